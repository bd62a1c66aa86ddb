"""The controller's side of the histories (faults/histories.py): a killed holder's hold ended
by its lease, the views each model checks, and what a verdict means for a scenario."""

from __future__ import annotations

import json
from pathlib import Path

from faults.histories import (
    LINEARIZABLE,
    MAY_VIOLATE,
    VIOLATES,
    check_scenario,
    expire_killed,
    holding,
    view,
)
from faults.history import check_events
from faults.recorder import History, events, merge

KEY = "faults:counter"
LEASE = 1.0
SECOND = 1_000_000_000


def _killed_holder(directory: Path, start: int) -> None:
    """Process "1" acquires (token 10) at ``start`` and is killed holding; "2" asks, busy."""
    one, two = History(directory, "1"), History(directory, "2")
    one.event("invoke", "acquire", KEY, at=start)
    one.event("ok", "acquire", KEY, 10, at=start + 1000)
    two.event("invoke", "acquire", KEY, at=start + 2000)
    two.event("fail", "acquire", KEY, "busy", at=start + 3000)
    one.close()
    two.close()


def _second_holder(directory: Path, at: int) -> None:
    """Process "3" acquires (token 20) at ``at`` and releases."""
    three = History(directory, "3")
    three.event("invoke", "acquire", KEY, at=at)
    three.event("ok", "acquire", KEY, 20, at=at + 1000)
    three.event("invoke", "release", KEY, at=at + 2000)
    three.event("ok", "release", KEY, at=at + 3000)
    three.close()


def _merged(directory: Path) -> list[dict[str, object]]:
    target = directory / "merged.jsonl"
    merge(directory, target)
    return [json.loads(line) for line in target.read_text().splitlines()]


def test_a_killed_holder_s_hold_ends_by_its_lease(tmp_path: Path) -> None:
    _killed_holder(tmp_path, SECOND)
    assert expire_killed(tmp_path, LEASE) == 1
    expires = [e for e in _merged(tmp_path) if e["f"] == "expire"]
    assert [(e["process"], e["type"], e["value"]) for e in expires] == [
        ("1/lease", "invoke", ["1", SECOND]),  # the holder and its acquire's invoke
        ("1/lease", "info", ["1", SECOND]),
    ]
    assert expires[0]["time"] == SECOND + SECOND  # the acquire's invoke plus the lease


def test_a_grant_after_the_killed_holder_s_lease_is_linearizable(tmp_path: Path) -> None:
    _killed_holder(tmp_path, SECOND)
    _second_holder(tmp_path, 2 * SECOND + 5000)
    expire_killed(tmp_path, LEASE)
    verdict = check_events(view(_merged(tmp_path), "mutex"), "mutex")
    assert verdict.linearizable, verdict.lines()


def test_a_grant_within_the_killed_holder_s_lease_is_caught(tmp_path: Path) -> None:
    """Without the expire the checker could end the hold at no time at all: it must not be
    needed for a later grant to be legal, and a grant within the lease is a violation."""
    _killed_holder(tmp_path, SECOND)
    _second_holder(tmp_path, SECOND + SECOND // 2)
    expire_killed(tmp_path, LEASE)
    verdict = check_events(view(_merged(tmp_path), "mutex"), "mutex")
    assert not verdict.linearizable
    assert "while 1 holds" in verdict.failures[0].why


def test_holding_follows_each_process_to_its_last_operation(tmp_path: Path) -> None:
    history = History(tmp_path, "1")
    history.event("invoke", "acquire-write", KEY, at=1)
    history.event("ok", "acquire-write", KEY, 5, at=2)
    history.event("invoke", "release-write", KEY, at=3)
    history.event("ok", "release-write", KEY, at=4)
    history.event("invoke", "acquire-read", KEY, at=5)  # killed while asking: maybe granted
    asked = History(tmp_path, "2")
    asked.event("invoke", "acquire", KEY, at=6)
    asked.event("info", "acquire", KEY, at=7)  # unknown: its worker wrote the expire
    history.close()
    asked.close()
    assert holding(events(sorted(tmp_path.glob("*.jsonl")))) == {"1": (KEY, 5)}


def test_each_model_sees_its_own_operations() -> None:
    found = [
        {"process": 1, "type": "ok", "f": f, "key": KEY, "value": None, "time": t}
        for t, f in enumerate(["acquire-write", "read", "write", "release-write", "expire"])
    ]
    assert [e["f"] for e in view(found, "rwlock")] == ["acquire-write", "release-write", "expire"]
    assert [e["f"] for e in view(found, "fenced-register")] == ["acquire", "read", "write"]
    assert [e["f"] for e in view(found, "semaphore:2")] == ["expire"]


def test_what_a_violation_means_depends_on_the_scenario(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    directory.mkdir()
    _killed_holder(directory, SECOND)
    _second_holder(directory, SECOND + SECOND // 2)
    results = {
        expected: check_scenario(directory, "caught", ["mutex"], LEASE, expected)
        for expected in (LINEARIZABLE, MAY_VIOLATE, VIOLATES)
    }
    assert results[LINEARIZABLE].violations
    assert not results[MAY_VIOLATE].violations
    assert not results[VIOLATES].violations
    caught = results[VIOLATES].caught[0]
    assert caught.kept is not None
    assert caught.kept.exists()
    assert "NOT linearizable" in results[VIOLATES].summary()


def test_a_violation_that_must_be_caught_fails_when_it_is_not(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    directory.mkdir()
    _second_holder(directory, SECOND)
    checked = check_scenario(directory, "safe", ["mutex", "fenced-register"], LEASE, VIOLATES)
    assert checked.summary().startswith("mutex: 2 operations, linearizable")
    assert checked.violations == [
        "history: the checker did not catch the violation this setting allows"
    ]
    assert not check_scenario(directory, "safe", ["mutex"], LEASE, LINEARIZABLE).violations


def test_no_histories_is_reported(tmp_path: Path) -> None:
    checked = check_scenario(tmp_path / "history", "none", ["mutex"], LEASE, LINEARIZABLE)
    assert checked.violations == [f"history: no histories in {tmp_path / 'history'}"]
