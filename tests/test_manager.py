"""LockManager: listing with SCAN, exact get, force release and clear."""

from __future__ import annotations

import datetime

import pytest
from django.test import override_settings

from django_redis_lock import Lock, LockInfo, get_lock_manager, lock
from testproject.settings import build_caches


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
    [held] = _hold("stuck", auto_renew=False)
    manager = get_lock_manager()
    assert manager.release("stuck") is True
    assert manager.release("stuck") is False
    assert not held.owned()
    assert held.lost


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
