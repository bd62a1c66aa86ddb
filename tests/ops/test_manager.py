"""LockManager: listing with SCAN, exact get, force release and clear."""

from __future__ import annotations

import contextlib
import datetime
import logging

import pytest
import redis
from django.test import override_settings

from django_redis_lock import MAX_NAME_LENGTH, Lock, LockInfo, LockNotOwned, get_lock_manager, lock
from django_redis_lock.runtime import runtime
from testproject.settings import build_caches
from tests.helpers import forge, keys


def _hold(*names: str, **options: object) -> list[Lock]:
    held = [lock(name, **options) for name in names]  # type: ignore[arg-type]
    for each in held:
        assert each.acquire(blocking=False)
    return held


def test_list_shows_held_locks_with_their_metadata() -> None:
    held = _hold("report:1", "report:2", "import", label="batch", timeout=12)
    held[2].release()  # its tombstone is not a held lock
    infos = sorted(get_lock_manager().list(), key=lambda info: info.name)
    assert [info.name for info in infos] == ["report:1", "report:2"]
    first = infos[0]
    assert isinstance(first, LockInfo)
    assert first.fencing_token == held[0].fencing_token
    assert first.label == "batch"
    assert "pid" in first.owner
    assert 11 < first.ttl <= 12
    assert first.acquired_at.tzinfo == datetime.timezone.utc


def test_the_start_time_is_stored_once_unless_the_token_ran_ahead_of_the_clock(
    redis_client: redis.Redis,
) -> None:
    """A grant whose token is the server's clock stores no ``a``: the token is its start time,
    which the listing, a busy answer and the statistics read from ``t`` then."""
    before = datetime.datetime.now(datetime.timezone.utc)
    (plain,) = _hold("clocked")
    assert redis_client.hget(keys("clocked").lock, "a") is None
    info = get_lock_manager().get("clocked")
    assert info is not None
    assert info.fencing_token == plain.fencing_token
    assert abs((info.acquired_at - before).total_seconds()) < 5
    other = lock("clocked")
    assert not other.acquire(blocking=False)
    assert other.busy_held is not None
    assert 0 <= other.busy_held < 5
    plain.release()
    # A tombstone's token from the far future (someone else's clock): the next token follows
    # it, so the start time is stored apart, and shown instead of the token.
    ahead = 5_000_000_000_000_000  # microseconds: in the year 2128
    redis_client.hset(keys("clocked").lock, "t", str(ahead))
    (bumped,) = _hold("clocked")
    assert bumped.fencing_token == ahead + 1
    assert redis_client.hget(keys("clocked").lock, "a") is not None
    info = get_lock_manager().get("clocked")
    assert info is not None
    assert abs((info.acquired_at - before).total_seconds()) < 5


def test_list_matches_globs_on_names_only() -> None:
    _hold("a:1", "a:2", "b:1", "a*literal", "[x]")
    manager = get_lock_manager()
    assert sorted(i.name for i in manager.list("a:*")) == ["a:1", "a:2"]
    assert sorted(i.name for i in manager.list("?:1")) == ["a:1", "b:1"]
    assert [i.name for i in manager.list(r"a\*literal")] == ["a*literal"]
    assert [i.name for i in manager.list(r"\[x\]")] == ["[x]"]
    assert list(manager.list("testproject*")) == []  # the key prefix is not part of names


def test_list_ignores_other_prefixes_and_glob_characters_in_the_prefix(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"]["KEY_PREFIX"] = "odd*[pre]?"
    with override_settings(CACHES=caches):
        _hold("mine")
        assert [i.name for i in get_lock_manager().list()] == ["mine"]
    _hold("theirs")
    assert [i.name for i in get_lock_manager().list()] == ["theirs"]


def test_list_reads_many_locks_in_batches() -> None:
    held = _hold(*(f"bulk:{i}" for i in range(1200)), auto_renew=False)
    assert len(list(get_lock_manager().list("bulk:*"))) == len(held)


def test_get_is_exact_even_with_glob_characters() -> None:
    _hold("job*", "job1")
    manager = get_lock_manager()
    info = manager.get("job*")
    assert info is not None
    assert info.name == "job*"
    assert manager.get("job?") is None
    assert manager.get("missing") is None


def test_force_release_frees_and_reports() -> None:
    [held, other] = _hold("stuck", "other", auto_renew=False, label="nightly")
    manager = get_lock_manager()
    assert manager.release("stuck") is True
    assert manager.release("stuck") is False
    assert not held.owned()
    assert held.lost
    released = manager.force_release("other")
    assert released is not None
    assert released.info is not None
    assert (released.info.name, released.info.label) == ("other", "nightly")
    assert released.info.fencing_token == other.fencing_token
    assert not released.handed_over
    assert manager.force_release("other") is None


def _hostile(client: redis.Redis) -> list[str]:
    """Held locks no listing can show truthfully; their names (the ones a name can reach)."""
    forge(client, "huge-time", a="1" * 30)
    forge(client, "text-token", t="abc")
    forge(client, "float-token", t="1e3")
    forge(client, "inexact-token", t=str(2**53))  # a Lua double: 2**53 + 1 reads the same
    forge(client, "no-time", a="")
    forge(client, "x" * (MAX_NAME_LENGTH + 1))
    forge(client, "")
    tagged = runtime().backend().keys_for("tagged").lock
    forge(client, "", key=tagged.replace(":l:tagged", ":l:retagged"))  # "retagged", wrong tag
    forge(client, "", key=tagged.encode().replace(b":l:tagged", b":l:\xff\xfe"))
    return ["huge-time", "text-token", "float-token", "inexact-token", "no-time", "retagged"]


def test_listing_skips_what_it_cannot_show_and_warns_once(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    _hold("fine", auto_renew=False)
    names = _hostile(redis_client)
    redis_client.set(runtime().backend().keys_for("a-string").lock, "not a hash")  # not held: quiet
    manager = get_lock_manager()
    with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
        assert [info.name for info in manager.list()] == ["fine"]
        assert [info.name for info in manager.page().locks] == ["fine"]
    assert [record.getMessage()[:20] for record in caplog.records] == ["Skipped 9 held locks"] * 2
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_redis_lock"):
        assert [manager.get(name) for name in names] == [None] * len(names)
    assert len(caplog.records) == len(names) - 1  # "retagged" is not held under its own tag


@pytest.mark.parametrize(
    ("stored", "shown"), [("0005", 5), ("-5", -5), ("+7", 7), (str(2**53 - 1), 2**53 - 1)]
)
def test_integer_text_tokens_are_listed_and_released_by_that_token(
    redis_client: redis.Redis, stored: str, shown: int
) -> None:
    forge(redis_client, "odd-token", t=stored)
    manager = get_lock_manager()
    [info] = manager.list()
    assert info.fencing_token == shown
    assert manager.force_release("odd-token", fencing_token=shown + 1) is None  # another hold
    released = manager.force_release("odd-token", fencing_token=info.fencing_token)
    assert released is not None
    assert released.info == LockInfo("odd-token", shown, "someone", None, info.acquired_at, ttl=0.0)
    assert not lock("odd-token").locked()


def test_a_held_lock_with_garbage_data_is_released_and_reported(redis_client: redis.Redis) -> None:
    names = _hostile(redis_client)[:-1]  # those a name reaches
    manager = get_lock_manager()
    for name in names[1:]:
        released = manager.force_release(name)
        assert released is not None
        assert (released.name, released.info) == (name, None)
        assert not lock(name).locked()
    assert manager.release(names[0]) is True
    assert not lock(names[0]).locked()


def test_clear_releases_what_dry_run_lists(redis_client: redis.Redis) -> None:
    held = _hold("forever", "leased", auto_renew=False)
    redis_client.persist(keys("forever").lock)  # no TTL: only a release ends it
    forge(redis_client, "forged", t="+0042", a="-5")
    forge(redis_client, "future", a=str(32_503_680_000_000_000))  # the year 3000
    forge(redis_client, "garbage", a="1" * 30)
    manager = get_lock_manager()
    listed = sorted(info.name for info in manager.list())
    assert listed == ["forever", "forged", "future", "leased"]
    assert manager.clear() == len(listed)
    assert list(manager.list()) == []
    assert lock("garbage").locked()  # not listed, not cleared: `locks release` frees it
    for each in held:
        with pytest.raises(LockNotOwned):
            each.release()  # the holder learns that its lock was cleared


def test_clear_releases_matching_locks() -> None:
    _hold("tmp:1", "tmp:2", "keep", auto_renew=False)
    manager = get_lock_manager()
    assert manager.clear("tmp:*") == 2
    assert [i.name for i in manager.list()] == ["keep"]
    assert manager.clear() == 1
    assert list(manager.list()) == []


@pytest.mark.parametrize(("pattern", "error"), [("", ValueError), (None, TypeError)])
def test_bad_patterns_are_refused(pattern: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="pattern"):
        list(get_lock_manager().list(pattern))  # type: ignore[arg-type]
    with pytest.raises(error, match="pattern"):
        get_lock_manager().clear(pattern)  # type: ignore[arg-type]


def test_clear_leaves_holds_taken_while_it_runs() -> None:
    names = [f"busy:{i}" for i in range(3 * 500)]  # three batches
    first = _hold(*names, auto_renew=False)
    second: list[Lock] = []
    batches: list[int] = []

    def progress(released: int, handed_over: int) -> None:
        batches.append(released)
        if len(batches) == 1:  # every holder gives its lock up and takes it again
            for each in first:
                with contextlib.suppress(LockNotOwned):  # the cleared ones
                    each.release()
            second.extend(_hold(*names, auto_renew=False))

    assert get_lock_manager().clear("busy:*", progress=progress) == batches[0]
    assert len(batches) == 3
    assert 0 < batches[0] < len(names)
    assert all(each.owned() for each in second)  # the released ones were taken anew, too


@pytest.mark.parametrize(
    ("size", "error"),
    [(0, ValueError), (-1, ValueError), (10_001, ValueError), (2.5, TypeError), (True, TypeError)],
)
def test_a_bad_page_size_is_refused_as_such(size: object, error: type[Exception]) -> None:
    """Not "Redis could not be reached" (issue 21)."""
    with pytest.raises(error, match="page size"):
        get_lock_manager().page(size=size)  # type: ignore[arg-type]
