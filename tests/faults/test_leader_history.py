"""The leadership scenarios' history (faults/leader_history.py), written as the children write
it and checked with the ``leader`` model: the runs the documentation allows are linearizable,
and a write of a deposed epoch accepted after the new one wrote, or a second leader while the
first's lease cannot have run out, is not.

Each child is a LeaderHistory driven as faults/leader_child.py drives it (writing, wrote,
resign); the times are the real clock's, in the order the calls are made.
"""

from __future__ import annotations

import time
from pathlib import Path

from faults.history import Verdict, check_file
from faults.leader_history import LeaderHistory
from faults.recorder import merge

# A lease that has run out by the time the next leader writes (its election: long ago).
GONE = (0, 0.0)
# A lease that cannot have run out during a test.
LONG = 600.0


def child(
    directory: Path, index: int, epoch: int, lease: tuple[int, float] = GONE
) -> LeaderHistory:
    """The history of supervisor ``index``'s child leading with ``epoch``: electable at
    ``lease[0]`` (ns) with a lease of ``lease[1]`` s."""
    return LeaderHistory(directory, index, epoch, *lease)


def writes(history: LeaderHistory, *accepted: bool) -> None:
    for each in accepted:
        history.writing()
        history.wrote(each)


def verdict(directory: Path) -> Verdict:
    target = directory / "merged.jsonl"
    assert merge(directory, target) > 0
    return check_file(target, "leader")


def test_a_hand_over_is_linearizable(tmp_path: Path) -> None:
    """leader-term: the first child resigns, then the follower is elected (long leases)."""
    now = time.monotonic_ns()
    first = child(tmp_path, 0, 10, (now, LONG))
    writes(first, True, True, True)
    first.resign()
    second = child(tmp_path, 1, 11, (now, LONG))
    writes(second, True, True)
    second.resign()
    result = verdict(tmp_path)
    assert result.linearizable, result.lines()
    # Each: elected (its first write), its other writes as acts, resigned, expire.
    assert result.operations == 5 + 4


def test_an_orphan_accepted_before_the_new_epoch_wrote_is_linearizable(tmp_path: Path) -> None:
    """leader-kill: the orphan writes on after the new child started; accepted until the new
    epoch's first write, refused after; it never resigns (its lease ends it)."""
    orphan = child(tmp_path, 0, 10)
    writes(orphan, True, True)
    new = child(tmp_path, 1, 11)
    writes(orphan, True)  # late: the store has not seen epoch 11 yet
    writes(new, True)
    writes(orphan, False, False)
    writes(new, True, True)
    new.resign()
    result = verdict(tmp_path)
    assert result.linearizable, result.lines()


def test_a_killed_child_leaves_an_unknown_write(tmp_path: Path) -> None:
    """A child killed inside a write: its act is left open (info), its lease ends it."""
    killed = child(tmp_path, 0, 10)
    writes(killed, True)
    killed.writing()
    new = child(tmp_path, 1, 11)
    writes(new, True, True)
    assert verdict(tmp_path).linearizable


def test_a_deposed_write_accepted_after_the_new_epoch_wrote_is_not(tmp_path: Path) -> None:
    """A store that does not fence: the orphan's write is accepted after epoch 11 wrote."""
    orphan = child(tmp_path, 0, 10)
    writes(orphan, True)
    new = child(tmp_path, 1, 11)
    writes(new, True)
    writes(orphan, True)
    result = verdict(tmp_path)
    assert not result.linearizable
    assert "act by sup0-e10 with epoch 10" in result.last_line()


def test_a_second_leader_within_the_first_lease_is_not(tmp_path: Path) -> None:
    """The follower's child writes while the first leader neither resigned nor can have
    lost its lease (a lease not kept: Redis restarted empty, a failover without WAIT)."""
    first = child(tmp_path, 0, 10, (time.monotonic_ns(), LONG))
    writes(first, True)
    second = child(tmp_path, 1, 11)
    writes(second, True)
    result = verdict(tmp_path)
    assert not result.linearizable
    assert "elected" in result.last_line()


def test_a_child_whose_writes_were_all_refused_was_never_leader(tmp_path: Path) -> None:
    """A child elected but deposed before its first write: its election is unknown to the
    store (info), its refused writes are nothing."""
    late = child(tmp_path, 0, 10)
    new = child(tmp_path, 1, 11)
    writes(new, True)
    writes(late, False, False)
    late.resign()
    writes(new, True)
    assert verdict(tmp_path).linearizable
