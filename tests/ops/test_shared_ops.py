"""Semaphores and read/write locks as operators see them (the manager, manage.py locks, the
admin, the statistics), @locked(limit=N), and keys whose contents someone else wrote."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis
from django.contrib.admin.models import LogEntry
from django.core.management import CommandError, call_command
from django.test import RequestFactory
from django.urls import reverse
from redis.typing import EncodableT

from django_redis_lock import LockBusy, get_lock_manager, lock, locked, rwlock, semaphore
from django_redis_lock.admin.values import detail_path_segment, form_value
from django_redis_lock.ops.records import SeveralHolders
from django_redis_lock.runtime import runtime
from tests.helpers import staff_client


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue()


def _holding(*holds: Any) -> list[Any]:
    for held in holds:
        assert held.acquire(blocking=False)
    return list(holds)


def test_the_manager_lists_each_holder_with_its_kind_and_limit() -> None:
    permits = _holding(*(semaphore("reports", 3, label=f"build {i}") for i in range(2)))
    readers = _holding(rwlock("doc").read(), rwlock("doc").read())
    plain = _holding(semaphore("plain-lock", 1))
    infos = sorted(get_lock_manager().list(), key=lambda info: (info.name, info.fencing_token))
    assert [(info.name, info.kind, info.limit) for info in infos] == [
        ("doc", "read", None),
        ("doc", "read", None),
        ("plain-lock", "semaphore", 1),
        ("reports", "semaphore", 3),
        ("reports", "semaphore", 3),
    ]
    assert {info.label for info in infos if info.name == "reports"} == {"build 0", "build 1"}
    holders = get_lock_manager().holders("reports")
    assert [info.fencing_token for info in holders] == sorted(p.fencing_token for p in permits)
    page = get_lock_manager().page("*")
    assert len(page.locks) == 5
    for held in permits + readers + plain:
        held.release()


def test_one_name_held_as_a_lock_a_semaphore_and_a_read_write_lock_shows_and_releases_each() -> (
    None
):
    held, permit, reader = _holding(lock("triple"), semaphore("triple", 1), rwlock("triple").read())
    manager = get_lock_manager()
    listed = sorted((info.kind, info.fencing_token) for info in manager.list("triple"))
    assert listed == sorted(
        [
            ("lock", held.fencing_token),
            ("semaphore", permit.fencing_token),
            ("read", reader.fencing_token),
        ]
    )
    assert len(manager.holders("triple")) == 3
    released = manager.force_release("triple", fencing_token=reader.fencing_token)
    assert released is not None
    assert released.info is not None
    assert released.info.kind == "read"
    assert not reader.owned()
    assert permit.owned()
    assert held.owned()
    writer = _holding(rwlock("triple").write())[0]  # the permit and the lock are no readers
    assert manager.clear("triple") == 3
    assert not any(each.owned() for each in (held, permit, writer))


def test_an_operator_releases_one_holder_by_its_token() -> None:
    first, second = _holding(semaphore("pool", 2), semaphore("pool", 2))
    manager = get_lock_manager()
    tokens = sorted([first.fencing_token, second.fencing_token])
    with pytest.raises(SeveralHolders, match=r"2 holders .*fencing_token=N") as refused:
        manager.force_release("pool")  # two holders: which one?
    assert refused.value.tokens == tokens
    assert first.owned()
    assert second.owned()
    released = manager.force_release("pool", fencing_token=first.fencing_token)
    assert released is not None
    assert released.info is not None
    assert released.info.fencing_token == first.fencing_token
    assert (released.info.kind, released.info.limit) == ("semaphore", 2)
    assert not first.owned()
    assert second.owned()
    assert manager.release("pool")  # the only one left
    assert not second.owned()


def test_a_release_by_name_releases_every_holder_and_says_which() -> None:
    permits = _holding(semaphore("pair", 2), semaphore("pair", 2))
    manager = get_lock_manager()
    assert manager.release("pair") is True  # whoever holds it: both places
    assert not any(held.owned() for held in permits)
    assert manager.release("pair") is False
    readers = _holding(rwlock("book").read(), rwlock("book").read())
    released = manager.release_all("book")
    assert sorted((r.info.kind, r.info.fencing_token) for r in released if r.info) == sorted(
        ("read", held.fencing_token) for held in readers
    )
    assert not any(held.owned() for held in readers)


def test_the_command_releases_one_holder_or_every_one_and_says_so() -> None:
    first, second = _holding(semaphore("duo", 2, label="a"), semaphore("duo", 2, label="b"))
    with pytest.raises(CommandError, match=r"has 2 holders: pass --token .*--all"):
        _command("release", "duo")
    assert first.owned()
    assert second.owned()
    out = _command("release", "duo", "--token", str(first.fencing_token))
    assert "Released 'duo' [semaphore of 2] (held by " in out
    assert f"fencing token {first.fencing_token})" in out
    assert not first.owned()
    third = _holding(semaphore("duo", 2))[0]
    out = _command("release", "duo", "--all")
    assert out.startswith("Released 2 holders:\n")
    assert str(second.fencing_token) in out
    assert str(third.fencing_token) in out
    assert not second.owned()
    assert not third.owned()
    with pytest.raises(CommandError, match="not both"):
        _command("release", "duo", "--all", "--token", "1")
    with pytest.raises(CommandError, match="No lock named 'duo' is held"):
        _command("release", "duo", "--all")


def test_the_command_shows_releases_and_clears_shared_locks() -> None:
    first, second = _holding(semaphore("batch", 2), semaphore("batch", 2))
    writer = _holding(rwlock("doc:w").write())[0]
    listed = json.loads(_command("list", "--json"))
    assert {(each["name"], each.get("kind"), each.get("limit")) for each in listed} == {
        ("batch", "semaphore", 2),
        ("doc:w", "write", None),
    }
    assert "batch [semaphore of 2]" in _command("list")
    shown = json.loads(_command("show", "batch", "--json"))
    assert [each["fencing_token"] for each in shown] == [first.fencing_token, second.fencing_token]
    with pytest.raises(CommandError, match=r"has 2 holders: pass --token"):
        _command("release", "batch")
    out = _command("release", "batch", "--token", str(second.fencing_token))
    assert f"fencing token {second.fencing_token}" in out
    assert first.owned()
    assert not second.owned()
    assert "Released 2 locks" in _command("clear", "--yes")
    assert not first.owned()
    assert not writer.owned()


def test_the_admin_lists_shows_and_releases_one_holder(db: None) -> None:
    first, second = _holding(semaphore("admin-pool", 2), semaphore("admin-pool", 2))
    client = staff_client("view_lock", "delete_lock")
    page = client.get("/admin/django_redis_lock/lock/").content.decode()
    assert page.count(">admin-pool [semaphore of 2]</a>") == 2
    url = reverse("admin:django_redis_lock_lock_change", args=[detail_path_segment("admin-pool")])
    detail = client.get(url).content.decode()
    assert detail.count("one of at most 2 holders") == 2
    assert str(first.fencing_token) in detail
    assert str(second.fencing_token) in detail
    value = form_value("admin-pool", first.fencing_token)
    answer = client.post(
        "/admin/django_redis_lock/lock/",
        {"action": "release_selected", "_selected_action": [value], "post": "yes"},
    )
    assert answer.status_code == 302
    assert not first.owned()
    assert second.owned()
    second.release()
    log = LogEntry.objects.get()
    assert log.change_message.startswith("Released lock 'admin-pool' [semaphore of 2] held by ")


def test_the_admin_releases_one_reader_by_its_token(db: None) -> None:
    reader, other = _holding(rwlock("admin-doc").read(), rwlock("admin-doc").read())
    client = staff_client("view_lock", "delete_lock")
    selection = {"action": "release_selected", "_selected_action": [form_value("admin-doc")]}
    confirm = client.post("/admin/django_redis_lock/lock/", selection).content.decode()
    assert "has 2 holders: release one from its page" in confirm  # no token: which one?
    value = form_value("admin-doc", reader.fencing_token)
    client.post(
        "/admin/django_redis_lock/lock/",
        {"action": "release_selected", "_selected_action": [value], "post": "yes"},
    )
    assert not reader.owned()
    assert other.owned()
    assert "[read] held by " in LogEntry.objects.get().change_message
    other.release()


def test_statistics_record_semaphore_holds() -> None:
    for _ in range(3):
        with semaphore("counted", 2):
            pass
    stats = get_lock_manager().get_stats("counted")
    assert stats is not None
    assert stats.acquisitions == 3


def test_locked_with_a_limit_lets_that_many_calls_run() -> None:
    calls: list[int] = []

    @locked("limited", limit=2)
    def work(n: int) -> int:
        calls.append(n)
        return n

    holders = _holding(semaphore("limited", 2))
    assert work(1) == 1  # one place left
    holders += _holding(semaphore("limited", 2))
    with pytest.raises(LockBusy):
        work(2)
    for held in holders:
        held.release()
    assert calls == [1]


def test_a_locked_view_with_a_limit_answers_423_when_every_place_is_taken() -> None:
    from django.http import HttpResponse

    @locked("exports", limit=2, timeout=20)
    def export(request: Any) -> HttpResponse:
        return HttpResponse("ok")

    request = RequestFactory().get("/export/")
    assert export(request).status_code == 200
    held = [semaphore("exports", 2, timeout=20, auto_renew=False) for _ in range(2)]
    for each in held:
        assert each.acquire(blocking=False)
    busy = export(request)
    assert busy.status_code == 423
    assert busy["Retry-After"] in ("19", "20")
    for each in held:
        each.release()


def test_locked_with_a_limit_of_one_is_the_lock_of_that_name() -> None:
    """``limit=1`` reads as "one call at once": it excludes ``@locked(name)`` and ``lock(name)``
    (a semaphore of the same name is a thing apart)."""

    @locked("single", limit=1)
    def once() -> str:
        return "ran"

    @locked("single")
    def plain() -> str:
        return "ran"

    with lock("single"), pytest.raises(LockBusy):
        once()
    with semaphore("single", 1):
        assert once() == "ran"  # the semaphore's place is not the lock
    calls: list[str] = []

    @locked("single", limit=1)
    def nested() -> None:
        with pytest.raises(LockBusy):
            plain()
        calls.append("checked")

    nested()
    assert calls == ["checked"]


def test_bad_limits_for_locked_are_refused_when_decorating() -> None:
    with pytest.raises(ValueError, match="limit"):
        locked("x", limit=0)
    with pytest.raises(TypeError, match="limit"):
        locked("x", limit=2.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "garbage",
    [
        {"#t": "x", "#n": "nope"},
        {"a" * 32: "not json"},
        {"b" * 32: "[1, 2]"},
        {"c" * 32: '{"e": "soon", "t": "1"}'},
        {"d" * 32: '{"e": 99999999999999, "t": "x", "a": "y", "o": 5, "l": [], "k": "?"}'},
        {"e" * 32: '{"e": 99999999999999, "t": "1e400", "a": "1", "o": "o", "l": "l", "k": "s"}'},
    ],
)
def test_hostile_contents_never_crash_listing_nor_a_semaphore(
    redis_client: redis.Redis, garbage: dict[EncodableT, EncodableT]
) -> None:
    keys = runtime().for_locks(None).shared_keys_for("hostile")
    redis_client.hset(keys.lock, mapping=garbage)
    list(get_lock_manager().list())  # skips what it cannot show: no crash
    get_lock_manager().holders("hostile")
    _command("list")
    with semaphore("hostile", 1, blocking_timeout=5) as held:  # the garbage is no holder
        assert held.owned()


def test_a_key_of_another_type_reads_as_no_holders(redis_client: redis.Redis) -> None:
    keys = runtime().for_locks(None).shared_keys_for("typed")
    redis_client.set(keys.lock, "a string")
    assert get_lock_manager().holders("typed") == []
    assert list(get_lock_manager().list()) == []


def test_a_dry_run_shows_each_holder_apart() -> None:
    first, second = _holding(semaphore("twice", 2), semaphore("twice", 2))
    out = _command("clear", "--dry-run").splitlines()
    assert out[-1] == "2 locks would be released."
    assert len(set(out[:-1])) == 2  # not two identical lines
    for held in (first, second):
        (line,) = [each for each in out if f"token {held.fencing_token}" in each]
        assert line.startswith("would release twice [semaphore of 2]  (token ")
    first.release()
    second.release()


def test_the_table_keeps_the_kind_of_a_long_name_and_fits_120_columns() -> None:
    name = "reports:" + "x" * 150 + ":end"
    held = _holding(semaphore(name, 3, label="y" * 40 + " queued as " + "1" * 36))[0]
    table = _command("list").splitlines()
    assert max(len(line) for line in table) <= 120
    row = table[1]
    assert row.startswith("re…nd [semaphore of 3]")  # the name cut in the middle, not its kind
    assert str(held.fencing_token) in row
    shown = _command("show", name)
    assert name in shown
    assert "1" * 36 in shown
    listed = json.loads(_command("list", "--json"))
    assert listed[0]["name"] == name
    held.release()
