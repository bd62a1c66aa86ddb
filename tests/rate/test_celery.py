"""@locked(rate=...) Celery tasks, run by a real worker process (not eager mode): a task over
its rate is sent again for its turn, never dropped, and the resend is not a retry."""

from __future__ import annotations

import itertools

import pytest
import redis

from django_redis_lock.backends.base import text_of
from tests.locked.test_celery import worker  # noqa: F401  (a worker process, for this module)

celery = pytest.importorskip("celery", reason="Celery is not installed (requirements/test.txt)")

RESULT_SECONDS = 30


def runs(client: redis.Redis, log: str) -> list[tuple[int, int, float]]:
    """The runs a task logged (testproject.gates.record_run): (n, retries, server time)."""
    found = []
    for entry in client.lrange(log, 0, -1):
        n, retries, at = text_of(entry).split(":")
        found.append((int(n), int(retries), float(at)))
    return found


@pytest.mark.slow
@pytest.mark.usefixtures("worker")
def test_tasks_over_their_rate_are_sent_again_and_all_run_spaced(
    redis_client: redis.Redis,
) -> None:
    from testproject.tasks import paced

    sent = [paced.delay(n, "paced:log") for n in range(5)]
    # Each keeps its id through its resends, and succeeds: none failed on max_retries=0.
    assert sorted(result.get(timeout=RESULT_SECONDS) for result in sent) == list(range(5))
    logged = runs(redis_client, "paced:log")
    assert sorted(n for n, _, _ in logged) == list(range(5))  # each ran once, none dropped
    assert {retries for _, retries, _ in logged} == {0}  # a resend is not a retry
    times = sorted(at for _, _, at in logged)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # 2/s: turns 0.5 s apart by the server's clock; a run logs its time a little after its
    # turn, how long after depends on the machine's load: never two together, 2 s in all.
    assert min(gaps) > 0.25, gaps
    assert times[-1] - times[0] >= 1.8


@pytest.mark.slow
@pytest.mark.usefixtures("worker")
def test_a_task_s_own_retries_are_counted_apart_from_its_resends(
    redis_client: redis.Redis,
) -> None:
    from testproject.tasks import retried

    sent = [retried.delay(n, "retried:log") for n in range(2)]
    assert sorted(result.get(timeout=RESULT_SECONDS) for result in sent) == ["0 done", "1 done"]
    logged = runs(redis_client, "retried:log")
    for n in range(2):  # its first run, then its one retry: whatever resends came between
        assert [retries for m, retries, _ in logged if m == n] == [0, 1]
