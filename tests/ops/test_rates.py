"""Rate limits as operators see them: the manager lists them beside held locks with their rate
and how full they are, shows one by name, resets (releases) and clears them; ``manage.py
locks`` and the admin show and reset them; their statistics count admitted and limited calls."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command

from django_redis_lock import get_lock_manager, lock, rate_limit
from django_redis_lock.ops.records import LockInfo
from tests.helpers import staff_client

CHANGELIST = "/admin/django_redis_lock/lock/"


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue()


def _filled(name: str, rate: str, calls: int, burst: int | None = None) -> None:
    """``calls`` calls of the rate limit ``name``, each admitted at once."""
    limit = rate_limit(name, rate, burst=burst)
    assert all(limit.acquire(blocking=False) for _ in range(calls))


def _rate(info: LockInfo) -> tuple[str, int, float, int, int]:
    assert info.rate is not None
    fill = info.rate
    return fill.rate, fill.burst, round(fill.fill, 2), fill.capacity, fill.queued


def test_an_active_rate_limit_is_listed_with_its_rate_fill_and_time_until_drained() -> None:
    _filled("api", "1/h", 3, burst=4)
    held = lock("api")
    assert held.acquire(blocking=False)
    infos = {info.kind: info for info in get_lock_manager().list()}
    assert set(infos) == {"lock", "rate"}
    info = infos["rate"]
    assert (info.name, info.held_as, info.shown_name) == (
        "api",
        "rate 1/h, burst 4",
        "api [rate 1/h, burst 4]",
    )
    assert _rate(info) == ("1/h", 4, 3.0, 5, 0)
    assert 10_790 < info.ttl <= 10_800  # three calls an hour apart to drain
    assert info.rate is not None
    assert info.rate.shown == "3 of 5 used"
    page = get_lock_manager().page()
    assert sorted(each.kind for each in page.locks) == ["lock", "rate"]
    held.release()


def test_blocked_callers_with_a_turn_are_shown_as_queued_beyond_the_bucket() -> None:
    limit = rate_limit("slow", "1/h", burst=1)
    turns = [limit.reserve(None) for _ in range(4)]  # two at once, two sleep until theirs
    assert [turn.wait > 0 for turn in turns] == [False, False, True, True]
    info = get_lock_manager().get_rate("slow")
    assert info is not None
    assert _rate(info) == ("1/h", 1, 2.0, 2, 2)
    assert info.rate is not None
    assert info.rate.shown == "2 of 2 used, 2 queued"
    assert 14_390 < info.ttl <= 14_400


def test_holders_shows_the_rate_limit_after_the_holds_of_its_name() -> None:
    held = lock("both")
    assert held.acquire(blocking=False)
    _filled("both", "10/s", 1)
    manager = get_lock_manager()
    assert [info.kind for info in manager.holders("both")] == ["lock", "rate"]
    assert manager.get("both") is not None
    assert manager.get("both").kind == "lock"  # type: ignore[union-attr]
    assert manager.get_rate("idle") is None
    held.release()


def test_releasing_a_name_that_only_has_a_rate_limit_resets_it() -> None:
    _filled("reset", "1/h", 1)
    limit = rate_limit("reset", "1/h")
    assert not limit.acquire(blocking=False)
    released = get_lock_manager().force_release("reset")
    assert released is not None
    assert released.info is not None
    assert released.info.kind == "rate"
    assert limit.acquire(blocking=False)  # admitted again at once
    assert get_lock_manager().reset_rate("never-used") is None


def test_a_release_by_token_or_of_a_held_name_leaves_its_rate_limit_alone() -> None:
    held = lock("mixed")
    assert held.acquire(blocking=False)
    _filled("mixed", "1/h", 1)
    manager = get_lock_manager()
    assert manager.force_release("mixed", fencing_token=0) is None
    released = manager.force_release("mixed")
    assert released is not None
    assert released.info is not None
    assert released.info.kind == "lock"
    assert manager.get_rate("mixed") is not None
    assert [each.info.kind for each in manager.release_all("mixed") if each.info] == ["rate"]
    assert manager.get_rate("mixed") is None


def test_clear_resets_the_matching_rate_limits_too() -> None:
    _filled("job:1", "1/h", 1)
    _filled("job:2", "1/h", 1)
    _filled("other", "1/h", 1)
    held = lock("job:3")
    assert held.acquire(blocking=False)
    assert get_lock_manager().clear("job:*") == 3
    assert [info.name for info in get_lock_manager().list()] == ["other"]
    assert rate_limit("job:1", "1/h").acquire(blocking=False)


def test_statistics_count_admitted_and_limited_calls() -> None:
    limit = rate_limit("counted", "1/h")
    assert [limit.acquire(blocking=False) for _ in range(3)] == [True, False, False]
    stats = get_lock_manager().get_stats("counted")
    assert stats is not None
    assert (stats.admitted, stats.limited, stats.acquisitions) == (1, 2, 0)
    assert stats.as_json()["admitted"] == 1
    assert stats.as_json()["limited"] == 2
    [listed] = get_lock_manager().stats("counted")
    assert (listed.admitted, listed.limited) == (1, 2)


def test_locks_list_and_show_print_the_rate_and_fill() -> None:
    _filled("cmd", "1/h", 2, burst=2)
    listed = _command("list")
    assert "cmd [rate 1/h, burst 2]" in listed
    assert "2 of 3 used" in listed
    shown = _command("show", "cmd")
    assert "rate limit" in shown
    assert "2 of 3 used" in shown
    assert "drains in" in shown
    as_json = json.loads(_command("show", "cmd", "--json"))
    assert as_json["kind"] == "rate"
    assert (as_json["rate"], as_json["burst"], as_json["capacity"], as_json["queued"]) == (
        "1/h",
        2,
        3,
        0,
    )
    assert as_json["fill"] == pytest.approx(2, abs=0.01)
    assert as_json["fencing_token"] is None
    assert as_json["owner"] is None
    [listed_json] = json.loads(_command("list", "--json"))
    assert listed_json["kind"] == "rate"


def test_locks_show_of_a_lock_and_a_rate_limit_of_one_name_shows_both() -> None:
    held = lock("pair", label="nightly")
    assert held.acquire(blocking=False)
    _filled("pair", "5/s", 1)
    shown = _command("show", "pair")
    assert "nightly" in shown
    assert "rate 5/s" in shown
    as_json = json.loads(_command("show", "pair", "--json"))
    assert [each.get("kind", "lock") for each in as_json] == ["lock", "rate"]
    held.release()


def test_locks_release_resets_a_rate_limit_and_says_so() -> None:
    _filled("cmd-reset", "1/h", 1)
    out = _command("release", "cmd-reset")
    assert "Reset rate limit 'cmd-reset' [rate 1/h]" in out
    with pytest.raises(CommandError, match="No lock named 'cmd-reset' is held"):
        _command("release", "cmd-reset")
    _filled("cmd-reset", "1/h", 1)
    assert "would reset cmd-reset [rate 1/h]" in _command("clear", "--dry-run")
    assert "Released 1 lock" in _command("clear", "--yes")


def test_locks_stats_shows_admitted_and_limited_columns_only_where_there_are_any() -> None:
    held = lock("plain")
    assert held.acquire(blocking=False)
    held.release()
    assert "ADMITTED" not in _command("stats")
    limit = rate_limit("limited", "1/h")
    assert [limit.acquire(blocking=False) for _ in range(2)] == [True, False]
    out = _command("stats", "--sort", "limited")
    heading, first, *_ = out.splitlines()
    assert "ADMITTED" in heading
    assert "LIMITED" in heading
    assert first.startswith("limited")
    as_json = json.loads(_command("stats", "--json", "--pattern", "limited"))
    assert (as_json[0]["admitted"], as_json[0]["limited"]) == (1, 1)


@pytest.mark.django_db
def test_the_admin_lists_shows_and_resets_a_rate_limit() -> None:
    _filled("web", "1/h", 2, burst=1)
    client = staff_client("view_lock", "delete_lock")
    listed = client.get(CHANGELIST).content.decode()
    assert "web [rate 1/h, burst 1]" in listed
    assert "2 of 2 used" in listed
    detail = client.get(CHANGELIST + "web/").content.decode()
    assert "Reset this rate limit" in detail
    assert "2 of 2 used" in detail
    value = "rate:web"
    assert f'value="{value}"' in listed
    confirm = client.post(
        CHANGELIST, {"action": "release_selected", "_selected_action": [value]}
    ).content.decode()
    assert "rate 1/h, burst 1" in confirm
    done = client.post(
        CHANGELIST,
        {"action": "release_selected", "_selected_action": [value], "post": "yes"},
        follow=True,
    ).content.decode()
    assert "Released 1 lock" in done
    assert get_lock_manager().get_rate("web") is None


@pytest.mark.django_db
def test_a_reset_needs_the_delete_permission_and_the_stats_page_shows_the_counts() -> None:
    limit = rate_limit("page", "1/h")
    assert [limit.acquire(blocking=False) for _ in range(3)] == [True, False, False]
    viewer = staff_client("view_lock")
    selection = {"action": "release_selected", "_selected_action": ["rate:page"], "post": "yes"}
    assert viewer.post(CHANGELIST, selection).status_code == 403
    assert get_lock_manager().get_rate("page") is not None
    stats = viewer.get(CHANGELIST + "stats/?sort=limited").content.decode()
    assert re.search(r'data-label="Admitted"[^>]*>1<', stats)
    assert re.search(r'data-label="Limited"[^>]*>2<', stats)
