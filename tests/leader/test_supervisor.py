"""``manage.py locks lead NAME -- COMMAND`` as operators run it: real supervisor processes,
real children, real signals. The children report through Redis lists (started, stopped), which
the tests wait on with BLPOP: no sleeps."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_redis_lock import get_lock_manager
from django_redis_lock.backends.base import text_of
from testproject.redis_server import RedisServerGroup
from tests.helpers import PATIENT_SECONDS

ROOT = Path(__file__).resolve().parents[2]
# The lease of most tests: long, so that a hand-over that waited it out would show.
LONG_LEASE = "30"
WAIT = 60  # the longest any step may take, in seconds (a supervisor starts Django first)

# The supervised command: says when it started (with its epoch and pid), and when SIGTERM
# stopped it; "wait" runs until stopped, a number exits with that code at once.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    key, mode = sys.argv[1], sys.argv[2]

    def stop(signum, frame):
        client.rpush(key + ":stopped", os.getpid())
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    client.rpush(key + ":started", f"{os.environ['DJANGO_REDIS_LOCK_EPOCH']}:{os.getpid()}")
    if mode != "wait":
        sys.exit(int(mode))
    while True:
        signal.pause()
    """
)


class Supervisors:
    """The supervisor processes a test starts, each in a process group of its own with its
    children: the whole group is stopped (SIGKILL) at the end, orphans included."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.started: list[subprocess.Popen[str]] = []

    def start(
        self, name: str, *options: str, mode: str = "wait", redis_url: str | None = None
    ) -> subprocess.Popen[str]:
        """A supervisor of ``name`` on ``redis_url`` (the session's Redis by default), where
        its children report too."""
        command = [sys.executable, "-c", CHILD, name, mode]
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
        if redis_url is not None:
            env["REDIS_URL"] = redis_url
        process = subprocess.Popen(
            [sys.executable, "manage.py", "locks", "lead", name, *options, "--", *command],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a group of its own, children included
        )
        self.started.append(process)
        return process

    def next_start(self, name: str, timeout: float = WAIT) -> tuple[int, int] | None:
        """The epoch and pid of the next child of ``name`` to start (None: none in time)."""
        found = self.client.blpop([f"{name}:started"], timeout=timeout)
        if found is None:
            return None
        epoch, pid = (int(part) for part in text_of(found[1]).split(":"))
        return epoch, pid

    def next_stop(self, name: str, timeout: float = WAIT) -> int | None:
        found = self.client.blpop([f"{name}:stopped"], timeout=timeout)
        return None if found is None else int(found[1])

    def stop_all(self) -> None:
        for process in self.started:
            with contextlib.suppress(ProcessLookupError):  # the group may be gone already
                os.killpg(process.pid, signal.SIGKILL)
            process.communicate(timeout=WAIT)


@pytest.fixture
def supervisors(redis_client: redis.Redis) -> Iterator[Supervisors]:
    started = Supervisors(redis_client)
    yield started
    started.stop_all()


def test_of_two_supervisors_one_runs_the_command_with_the_epoch(supervisors: Supervisors) -> None:
    first = supervisors.start("cron", "--timeout", LONG_LEASE)
    second = supervisors.start("cron", "--timeout", LONG_LEASE)
    started = supervisors.next_start("cron")
    assert started is not None
    epoch, _ = started
    info = get_lock_manager().get("leader:cron")
    assert info is not None
    assert info.fencing_token == epoch  # the child's epoch is the leadership's token
    assert supervisors.next_start("cron", timeout=1) is None  # the other only waits
    assert first.poll() is None
    assert second.poll() is None


def test_sigterm_stops_the_child_and_hands_over_at_once(supervisors: Supervisors) -> None:
    leading = supervisors.start("beat", "--timeout", LONG_LEASE)
    started = supervisors.next_start("beat")
    assert started is not None
    follower = supervisors.start("beat", "--timeout", LONG_LEASE)
    wait_queued(supervisors.client, "beat")
    asked = time.monotonic()
    leading.send_signal(signal.SIGTERM)
    assert supervisors.next_stop("beat") == started[1]  # its child was stopped first
    assert leading.wait(WAIT) == 0  # the child's code: it stopped cleanly
    taken = supervisors.next_start("beat")
    assert taken is not None
    assert time.monotonic() - asked < float(LONG_LEASE) / 3  # not after the lease
    assert taken[0] > started[0]
    assert follower.poll() is None


def test_a_killed_leader_is_replaced_within_its_lease(supervisors: Supervisors) -> None:
    leading = supervisors.start("consumer", "--timeout", "1")
    started = supervisors.next_start("consumer")
    assert started is not None
    supervisors.start("consumer", "--timeout", "1")
    wait_queued(supervisors.client, "consumer")
    leading.kill()  # SIGKILL: no resignation; its child is orphaned and keeps running
    taken = supervisors.next_start("consumer", timeout=10)
    assert taken is not None
    assert taken[0] > started[0]  # the orphan's epoch is stale: storage refuses its writes


def test_a_lost_leadership_stops_the_child_and_leads_again_with_a_new_epoch(
    supervisors: Supervisors,
) -> None:
    supervisors.start("lost", "--timeout", "0.6", "--grace", "5")
    started = supervisors.next_start("lost")
    assert started is not None
    assert get_lock_manager().release("leader:lost")  # an operator takes it away
    assert supervisors.next_stop("lost") == started[1]
    again = supervisors.next_start("lost")
    assert again is not None
    assert again[0] > started[0]


def test_the_supervisor_exits_with_the_commands_code_and_resigns(supervisors: Supervisors) -> None:
    process = supervisors.start("once", "--timeout", LONG_LEASE, mode="3")
    assert process.wait(WAIT) == 3
    assert supervisors.next_start("once", timeout=0.1) is not None
    assert get_lock_manager().get("leader:once") is None  # given back, not left to expire


def test_a_follower_outlives_a_redis_outage_and_leads_when_it_is_back(
    redis_factory: RedisServerGroup,
) -> None:
    away = redis_factory()
    on_away = Supervisors(redis.Redis.from_url(away.url, socket_timeout=PATIENT_SECONDS))
    away.stop()  # Redis is out of reach as the supervisor starts
    try:
        supervisor = on_away.start("outage", "--timeout", "1", redis_url=away.url)
        said = supervisor.stderr
        assert said is not None
        # After the system checks' warnings (Redis is away), it says it tries again.
        lines = (said.readline() for _ in range(200))
        assert any("Redis is unavailable" in line for line in lines)
        away.start()  # on the same port again
        assert on_away.next_start("outage") is not None
        assert supervisor.poll() is None
    finally:
        on_away.stop_all()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["lead", "nothing"], "Give the command to run after '--'"),
        (["lead", "nothing", "--"], "Give the command to run after '--'"),
        (["lead", "nothing", "--timeout", "-1", "--", "true"], "--timeout"),
        (["lead", "nothing", "--grace", "soon", "--", "true"], "--grace"),
        (["--using", "no-such-alias", "lead", "nothing", "--", "true"], "no-such-alias"),
        (["lead", "", "--", "true"], "empty"),
    ],
)
def test_bad_input_exits_with_status_2_and_holds_nothing(
    arguments: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "locks", *arguments],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert list(get_lock_manager().list("leader:*")) == []


def wait_queued(client: redis.Redis, name: str) -> None:
    """Until a follower of ``name`` waits in its queue (it started Django, then queued)."""
    from django_redis_lock.runtime import runtime

    queue = runtime().for_locks(None).keys_for(f"leader:{name}").queue
    deadline = time.monotonic() + WAIT
    while not client.zcard(queue):  # no event says "queued": its queue does, in Redis
        assert time.monotonic() < deadline, f"no follower of {name!r} queued"
        time.sleep(0.01)
