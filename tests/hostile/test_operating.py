"""Hostile probes of the operator surfaces: LockManager, ``manage.py locks`` and the admin on
names held by a lock, semaphore places and readers at once; on names full of Redis pattern,
key-tag, control and option-like characters; on junk someone else wrote into a holders hash
or waiters queue (not JSON, wrong types, a kind that is an array, keys of the wrong type); and
the doctor and the commands under bad settings.

The promise held: docs/operating.rst and docs/reference/command.rst (every holder listed and
released by its fencing token, a name with several holders refused without one, bad input a
CommandError), docs/semaphores.rst ("anything in the hash that is not a holder as these
scripts write one never holds a place") and the project's rule that anything read back from
Redis may be garbage: it is shown safely or skipped, never a crash.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import time
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command
from django.test.utils import override_settings
from redis.typing import EncodableT

from django_redis_lock import LockNotOwned, get_lock_manager, lock, rwlock, semaphore
from django_redis_lock.ops.records import SeveralHolders
from django_redis_lock.runtime import runtime
from tests.helpers import staff_client, token_of


@pytest.fixture(autouse=True)
def _default_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def cmd(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out, no_color=True)
    return out.getvalue()


HOSTILE = [
    "{tag}",
    "}{",
    "{",
    "a*b",
    "a?b",
    "a[b",
    "a]b",
    "[x]",
    "\\",
    "back\\slash*",
    "\u00e9t\u00e9 \u4e2d\u6587 \U0001f512",
    "x" * 1024,
    " lead and trail ",
    "tab\there",
    "new\nline",
    "\x1b[31mred\x1b[0m",
    "--all",
    "-x",
    "lock:{user}:*",
]


def hold_everything(name: str) -> list[Any]:
    """A lock, two places of a semaphore of 3 and two readers, all of ``name``, held."""
    held = [
        lock(name, auto_renew=False),
        semaphore(name, 3, auto_renew=False),
        semaphore(name, 3, auto_renew=False),
        rwlock(name, auto_renew=False).read(),
        rwlock(name, auto_renew=False).read(),
    ]
    for each in held:
        assert each.acquire(blocking=False)
    return held


def hold_lock_and_places(name: str) -> list[Any]:
    """A lock and two places of a semaphore of 3, all of ``name``, held."""
    held = [lock(name), semaphore(name, 3), semaphore(name, 3)]
    for each in held:
        assert each.acquire(blocking=False)
    return held


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_manager_lists_and_releases_every_holder_of_a_hostile_name(name: str) -> None:
    held = hold_everything(name)
    decoy = hold_everything(name[:1000] + "-decoy")
    manager = get_lock_manager()
    holders = manager.holders(name)
    assert sorted(info.kind for info in holders) == [
        "lock",
        "read",
        "read",
        "semaphore",
        "semaphore",
    ]
    assert all(info.name == name for info in holders)
    assert manager.get(name) is not None
    tokens = sorted(info.fencing_token for info in manager.holders(name))
    released = manager.release_all(name)
    assert sorted(r.info.fencing_token for r in released if r.info) == tokens
    assert {r.info.kind for r in released if r.info} == {"lock", "semaphore", "read"}
    assert not any(each.owned() for each in held)
    assert all(each.owned() for each in decoy)
    assert manager.release(name) is False
    assert manager.release(name[:1000] + "-decoy") is True
    assert not any(each.owned() for each in decoy)


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_force_release_without_a_token_refuses_places_and_readers(name: str) -> None:
    held = [semaphore(name, 2), rwlock(name).read()]
    for each in held:
        assert each.acquire(blocking=False)
    with pytest.raises(SeveralHolders) as refused:
        get_lock_manager().force_release(name)
    assert sorted(refused.value.tokens) == sorted(token_of(each) for each in held)
    assert all(each.owned() for each in held)


def test_force_release_without_a_token_refuses_a_lock_and_places() -> None:
    """operating.rst: 'Without a fencing_token, a name with several holders raises
    SeveralHolders'. A lock plus two semaphore places is three holders of one name."""
    held = hold_lock_and_places("mixed-kinds")
    with pytest.raises(SeveralHolders):
        get_lock_manager().force_release("mixed-kinds")
    assert all(each.owned() for each in held)


def test_command_release_without_a_token_refuses_a_lock_and_places() -> None:
    """operating.rst: 'A name with several holders ... is refused with their fencing tokens'."""
    held = hold_lock_and_places("mixed-cmd")
    with pytest.raises(CommandError, match="'mixed-cmd' has 3 holders: pass --token"):
        cmd("release", "mixed-cmd")
    assert all(each.owned() for each in held)


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_command_shows_and_releases_each_holder_of_a_hostile_name(name: str) -> None:
    if name.startswith("-"):
        pytest.skip("argparse reads a name starting with '-' as an option")
    hold_everything(name)
    shown = json.loads(cmd("show", name, "--json"))
    assert isinstance(shown, list)
    assert len(shown) == 5
    assert {each["name"] for each in shown} == {name}
    text = cmd("show", name)
    assert text.count("token") >= 5
    token = next(each for each in shown if each.get("kind") == "semaphore")["fencing_token"]
    out = cmd("release", name, "--token", str(token))
    assert str(token) in out
    out = cmd("release", name, "--all")
    assert out.startswith("Released 4 holders")
    with pytest.raises(CommandError, match="No lock named"):
        cmd("release", name, "--all")
    assert get_lock_manager().holders(name) == []


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_list_fits_120_columns_and_shows_each_kind(name: str) -> None:
    hold_everything(name)
    hold_everything("plain")
    out = cmd("list")
    lines = out.splitlines()
    assert all(len(line) <= 120 for line in lines), max(len(line) for line in lines)
    assert sum("[semaphore of 3]" in line for line in lines) == 4
    assert sum("[read]" in line for line in lines) == 4
    assert lines[-1] == "10 held locks."


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_list_pattern_with_escaped_metacharacters_matches_the_name_exactly(name: str) -> None:
    hold_everything(name)
    hold_everything(name[:1000] + "x")
    escaped = "".join("\\" + c if c in "*?[]\\" else c for c in name)
    listed = json.loads(cmd("list", f"--pattern={escaped}", "--json"))
    assert len(listed) == 5
    assert {each["name"] for each in listed} == {name}
    assert {each.get("kind", "lock") for each in listed} == {"lock", "semaphore", "read"}


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_clear_dry_run_lists_each_holder_and_releases_nothing(name: str) -> None:
    held = hold_everything(name)
    out = cmd("clear", "--dry-run")
    lines = out.splitlines()
    assert lines[-1] == "5 locks would be released."
    assert len([line for line in lines if line.startswith("would release ")]) == 5
    tokens = {str(each.fencing_token) for each in held}
    for token in tokens:
        assert f"(token {token}," in out
    assert all(each.owned() for each in held)


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_clear_releases_every_kind(name: str) -> None:
    held = hold_everything(name)
    assert get_lock_manager().clear() == 5
    assert not any(each.owned() for each in held)


@pytest.mark.parametrize("token", ["abc", "1.5", "", "0x10"])
def test_release_token_not_an_integer_is_a_command_error(token: str) -> None:
    hold_everything("tok")
    with pytest.raises(CommandError):
        cmd("release", "tok", "--token", token)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("-1", "No lock named 'tok2' is held with fencing token -1"),
        ("0", "No lock named 'tok2' is held with fencing token 0"),
        (str(2**53 + 1), f"No lock named 'tok2' is held with fencing token {2**53 + 1}"),
        (str(2**63), "it does not fit 64 bits"),
        (str(10**30), "it does not fit 64 bits"),
    ],
)
def test_release_with_a_token_no_holder_has_is_a_command_error(token: str, message: str) -> None:
    held = hold_everything("tok2")
    with pytest.raises(CommandError, match=message):
        cmd("release", "tok2", "--token", token)
    assert all(each.owned() for each in held)


@pytest.mark.parametrize("pattern", ["", "[", "a\\", "x" * 3000])
def test_bad_patterns_are_command_errors(pattern: str) -> None:
    for sub in (("list",), ("clear", "--dry-run"), ("clear", "--yes")):
        with pytest.raises(CommandError):
            cmd(*sub, "--pattern", pattern)


@pytest.mark.parametrize("name", ["", "x" * 1025])
def test_show_and_release_bad_names_are_command_errors(name: str) -> None:
    for sub in (("show", name), ("release", name), ("release", name, "--all")):
        with pytest.raises(CommandError):
            cmd(*sub)


def test_manager_refuses_bad_names_and_patterns() -> None:
    manager = get_lock_manager()
    for bad in ("", None, 5, "x" * 1025):
        for call in (
            manager.release,
            manager.release_all,
            manager.force_release,
            manager.holders,
            manager.get,
        ):
            with pytest.raises((ValueError, TypeError)):
                call(bad)  # type: ignore[arg-type]
    for pattern in ("", None, "[", 5):
        with pytest.raises((ValueError, TypeError)):
            manager.clear(pattern)  # type: ignore[arg-type]
        with pytest.raises((ValueError, TypeError)):
            manager.list(pattern)  # type: ignore[arg-type]


@pytest.mark.parametrize("token", ["5", 5.5, True, [1], math.nan, math.inf])
def test_manager_force_release_refuses_a_token_that_is_no_int(token: object) -> None:
    hold_everything("badtok")
    with pytest.raises((TypeError, ValueError)):
        get_lock_manager().force_release("badtok", token)  # type: ignore[arg-type]


# ---- junk in the holders hash


def shared_key(name: str, kind: str) -> str:
    """The holders hash of the semaphore (``kind`` "s") or read/write lock ("r") ``name``."""
    return runtime().for_locks(None).shared_keys_for(name, kind).lock


def future_ms(client: redis.Redis, seconds: float = 60) -> int:
    """The server's clock ``seconds`` from now, in ms (as a holder's lease end ``e``)."""
    now, micros = client.time()
    return int(now) * 1000 + int(micros) // 1000 + int(seconds * 1000)


def holder_json(client: redis.Redis, **override: object) -> str:
    """A holder entry as the scripts write one, with ``override``'s fields (``...``: left out)."""
    entry: dict[str, object] = {
        "e": future_ms(client),
        "t": "123",
        "a": str(int(time.time() * 1e6)),
        "o": "someone",
        "l": "label",
        "k": "s",
    }
    entry.update(override)
    return json.dumps({k: v for k, v in entry.items() if v is not ...})


def junk_entries(client: redis.Redis) -> dict[EncodableT, EncodableT]:
    """Fields someone else might have written into a holders hash, by what is wrong in each."""
    far = future_ms(client, 2 * 365 * 24 * 3600)
    return {
        "not-json": "not json at all",
        "empty": "",
        "array": "[1, 2, 3]",
        "null": "null",
        "number": "42",
        "e-string": holder_json(client, e="soon"),
        "e-far": holder_json(client, e=far),
        "e-float": holder_json(client, e=future_ms(client) + 0.5),
        "e-past": holder_json(client, e=1),
        "t-number": holder_json(client, t=123),
        "t-huge": holder_json(client, t="9" * 40),
        "t-text": holder_json(client, t="abc"),
        "t-list": holder_json(client, t=[1]),
        "a-missing": holder_json(client, a=...),
        "a-huge": holder_json(client, a="9" * 30),
        "o-number": holder_json(client, o=5),
        "o-object": holder_json(client, o={"x": 1}),
        "l-list": holder_json(client, l=[1, 2]),
        "k-unknown": holder_json(client, k="z"),
        "k-missing": holder_json(client, k=...),
        "bytes": b"\xff\xfe\x00junk",
        "#n": "not a limit",
        "#t": "not a token",
        "#r": "x" * 5000,
        "f": "{}",
    }


def write_junk(
    client: redis.Redis, name: str, kind: str, entries: dict[EncodableT, EncodableT]
) -> None:
    client.hset(shared_key(name, kind), mapping=entries)


@pytest.mark.parametrize("kind", ["s", "r"])
def test_junk_in_a_holders_hash_never_crashes_listing_or_clear(
    redis_client: redis.Redis, kind: str
) -> None:
    name = "junky"
    write_junk(redis_client, name, kind, junk_entries(redis_client))
    manager = get_lock_manager()
    list(manager.list())
    manager.page()
    manager.holders(name)
    cmd("list")
    cmd("list", "--json")
    cmd("clear", "--dry-run")
    assert get_lock_manager().clear() >= 0


NOT_HOLDERS = [
    "not-json",
    "empty",
    "array",
    "null",
    "number",
    "e-string",
    "e-far",
    "e-past",
    "t-number",
    "t-huge",
    "t-text",
    "t-list",
    "k-unknown",
    "k-missing",
    "bytes",
]
INVISIBLE = ["a-missing", "a-huge", "e-float"]


@pytest.mark.parametrize("field", NOT_HOLDERS + INVISIBLE)
def test_junk_holds_no_place(redis_client: redis.Redis, field: str) -> None:
    """semaphores.rst: anything in the hash that is not a holder as these scripts write one
    never holds a place."""
    redis_client.hset(shared_key("place", "s"), field, junk_entries(redis_client)[field])
    real = semaphore("place", 1)
    assert real.acquire(blocking=False), field
    real.release()


@pytest.mark.parametrize("field", INVISIBLE)
def test_junk_that_takes_a_place_is_listed(redis_client: redis.Redis, field: str) -> None:
    """What holds a place is shown to operators (or holds none)."""
    redis_client.hset(shared_key("seen", "s"), field, junk_entries(redis_client)[field])
    full = not semaphore("seen", 1).acquire(blocking=False)
    shown = get_lock_manager().holders("seen")
    assert not full or shown, f"{field}: the place is taken, and no holder is listed"


@pytest.mark.parametrize(
    "field",
    [
        "k-list",
        "k-object",
        "k-number",
        "k-bool",
        "l-object",
        "o-list",
        "t-float",
        "a-float",
        "a-number",
        "e-negative",
    ],
)
def test_each_single_junk_field_never_crashes_listing(
    redis_client: redis.Redis, field: str
) -> None:
    junk: dict[str, dict[str, object]] = {
        "k-list": {"k": [1]},
        "k-object": {"k": {"x": 1}},
        "k-number": {"k": 1},
        "k-bool": {"k": True},
        "l-object": {"l": {"x": 1}},
        "o-list": {"o": [1]},
        "t-float": {"t": 1.5},
        "a-float": {"a": 1.5},
        "a-number": {"a": 1700000000000000},
        "e-negative": {"e": -5},
    }
    values = junk[field]
    redis_client.hset(shared_key("one-junk", "s"), field, holder_json(redis_client, **values))
    real = semaphore("other-real", 2)
    assert real.acquire(blocking=False)
    listed = list(get_lock_manager().list())
    assert "other-real" in {info.name for info in listed}
    get_lock_manager().holders("one-junk")
    cmd("list")
    cmd("clear", "--dry-run")
    real.release()


def test_junk_with_a_real_holder_release_all_frees_the_real_one(redis_client: redis.Redis) -> None:
    real = semaphore("mixed", 2, auto_renew=False)
    assert real.acquire()
    write_junk(redis_client, "mixed", "s", junk_entries(redis_client))
    released = get_lock_manager().release_all("mixed")
    assert real.fencing_token in [r.info.fencing_token for r in released if r.info]
    with pytest.raises(LockNotOwned):
        real.release()


def test_junk_limit_shown_to_operators(redis_client: redis.Redis) -> None:
    real = semaphore("badlimit", 2)
    assert real.acquire()
    redis_client.hset(shared_key("badlimit", "s"), "#n", "not a limit")
    out = cmd("list")
    # operators see a limit, never 'None'
    assert "None" not in out, out
    real.release()


def test_junk_with_a_far_lease_is_not_listed_as_a_holder(redis_client: redis.Redis) -> None:
    far = future_ms(redis_client, 2 * 365 * 24 * 3600)
    redis_client.hset(shared_key("far", "s"), "secret", holder_json(redis_client, e=far))
    # it holds no place (documented), so it should not be shown as one either
    assert semaphore("far", 1).locked() is False
    assert get_lock_manager().holders("far") == [], get_lock_manager().holders("far")


def test_wrong_type_keys_do_not_crash_listing(redis_client: redis.Redis) -> None:
    redis_client.set(shared_key("str-key", "s"), "hello")
    redis_client.rpush(shared_key("list-key", "r"), "a")
    real = semaphore("real", 1)
    assert real.acquire()
    listed = list(get_lock_manager().list())
    assert [info.name for info in listed] == ["real"]
    cmd("list")
    cmd("clear", "--dry-run")
    assert get_lock_manager().holders("str-key") == []
    real.release()


@pytest.mark.parametrize("junk", ["not json", "[1]", "{}", '{"d": "x"}'])
@pytest.mark.parametrize("what", ["semaphore", "lock"])
def test_junk_in_waiters_does_not_stop_acquire(
    redis_client: redis.Redis, junk: str, what: str
) -> None:
    backend = runtime().for_locks(None)
    keys = backend.shared_keys_for("jq", "s") if what == "semaphore" else backend.keys_for("jq")
    redis_client.zadd(keys.queue, {"ghost": 0})
    redis_client.hset(keys.waiters, "ghost", junk)
    held = semaphore("jq", 1) if what == "semaphore" else lock("jq")
    assert held.acquire(blocking_timeout=3)
    held.release()


# ---- the doctor with bad settings


@pytest.mark.parametrize(
    "setting",
    [
        {"TIMEOUT": -1},
        {"TIMEOUT": "abc"},
        {"TIMEOUT": None},
        {"TIMEOUT": math.inf},
        {"TIMEOUT": math.nan},
        {"KEY_NAMESPACE": "{locks}"},
        {"KEY_NAMESPACE": "a}b"},
        {"KEY_NAMESPACE": ""},
        {"KEY_NAMESPACE": 5},
        {"CACHE": "nope"},
        {"CACHE": 5},
        {"CACHE": ""},
        {"CACHE": ["default", "nope", "other"]},
        {"METRICS": "false"},
        {"METRICS_MAX_LABELS": 0},
        {"HANDOVER_LEASE": -1},
        {"TOMBSTONE_TIMEOUT": "x"},
        {"AUTO_RENEW": "yes"},
    ],
    ids=lambda s: repr(s),
)
def test_doctor_reports_bad_settings_as_a_command_error(setting: dict[str, object]) -> None:
    with override_settings(REDIS_LOCK=setting):
        out = io.StringIO()
        with pytest.raises(CommandError) as raised:
            call_command("locks", "doctor", "--json", stdout=out)
        assert raised.value.returncode == 1
        findings = json.loads(out.getvalue())
        assert any(f["level"] == "error" for f in findings)
        text = io.StringIO()
        with pytest.raises(CommandError):
            call_command("locks", "doctor", stdout=text, no_color=True)


@pytest.mark.parametrize("setting", ["not a dict", 5, ["CACHE"]], ids=repr)
def test_doctor_with_redis_lock_not_a_dict_is_a_command_error(setting: object) -> None:
    with override_settings(REDIS_LOCK=setting), pytest.raises(CommandError):
        call_command("locks", "doctor", "--json", stdout=io.StringIO())


@pytest.mark.parametrize("using", ["nope", "", "a,b"])
def test_commands_with_a_bad_using_are_command_errors(using: str) -> None:
    for sub in (("list",), ("show", "x"), ("release", "x"), ("clear", "--dry-run"), ("doctor",)):
        with pytest.raises(CommandError):
            cmd(*sub, "--using", using)


@pytest.mark.parametrize(
    "setting", [{"CACHE": "nope"}, {"KEY_NAMESPACE": "{x}"}, {"TIMEOUT": -1}], ids=repr
)
def test_commands_under_bad_settings_fail_only_as_command_errors(
    setting: dict[str, object],
) -> None:
    with override_settings(REDIS_LOCK=setting):
        for sub in (("list",), ("show", "x"), ("release", "x"), ("clear", "--dry-run")):
            with contextlib.suppress(CommandError):  # anything else fails the test
                cmd(*sub)


# ---- a holder whose kind is a JSON array or object


def innocent_beside_a_bad_kind(client: redis.Redis, kind: object) -> Any:
    """The lock "innocent", held, and a live holder entry in the semaphore "bad-kind" whose
    kind ``k`` is ``kind``."""
    held = lock("innocent")
    assert held.acquire()
    client.hset(shared_key("bad-kind", "s"), "field", holder_json(client, k=kind))
    return held


@pytest.mark.parametrize("kind", [[1], {"x": 1}, [], {}])
def test_list_survives_a_kind_that_is_an_array_or_object(
    redis_client: redis.Redis, kind: object
) -> None:
    assert innocent_beside_a_bad_kind(redis_client, kind).owned()
    assert [info.name for info in get_lock_manager().list()] == ["innocent"]


@pytest.mark.parametrize("kind", [[1], {"x": 1}])
def test_command_list_survives_a_kind_that_is_an_array_or_object(
    redis_client: redis.Redis, kind: object
) -> None:
    assert innocent_beside_a_bad_kind(redis_client, kind).owned()
    assert "innocent" in cmd("list")


@pytest.mark.parametrize("kind", [[1], {"x": 1}])
def test_clear_survives_a_kind_that_is_an_array_or_object(
    redis_client: redis.Redis, kind: object
) -> None:
    held = innocent_beside_a_bad_kind(redis_client, kind)
    assert get_lock_manager().clear() >= 1
    assert not held.owned()


def test_admin_changelist_survives_a_kind_that_is_an_array(
    redis_client: redis.Redis, db: None
) -> None:
    held = semaphore("innocent", 2)
    assert held.acquire()
    redis_client.hset(shared_key("bad-kind", "s"), "field", holder_json(redis_client, k=[1]))
    client = staff_client("view_lock", "delete_lock")
    answer = client.get("/admin/django_redis_lock/lock/")
    assert answer.status_code == 200
    assert "innocent" in answer.content.decode()
