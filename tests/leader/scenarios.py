"""What a leadership must do on every topology, written once: each topology's test module
(tests/backends/) runs it on its own servers, sync and async (the ``driver`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from django_redis_lock import LeadershipLost, get_lock_manager, leader


def leads_hands_over_and_is_deposed(driver: Any, name: str = "topology") -> None:
    """One leader at a time; a resignation hands over with a higher epoch; an operator's
    release deposes the leader, which finds it at its next renewal."""
    # A lease a loaded machine's replies stay well inside (a reply as slow as the lease makes
    # the grant late: given back); renewed at a third of it, so the loss is found within 1 s.
    first, follower = leader(name, timeout=3.0), leader(name, timeout=3.0)
    assert driver.acquire(first, blocking=False)
    assert not driver.acquire(follower, blocking=False)
    epoch = first.epoch
    assert epoch is not None
    driver.release(first)
    assert driver.acquire(follower, blocking=False)
    assert follower.epoch is not None
    assert follower.epoch > epoch
    info = get_lock_manager().get(follower.lock.name)
    assert info is not None
    assert info.fencing_token == follower.epoch
    assert get_lock_manager().release(follower.lock.name)
    assert follower.lost.wait(5)  # a renewal, at a third of the lease, found it gone
    with pytest.raises(LeadershipLost):
        follower.check()
