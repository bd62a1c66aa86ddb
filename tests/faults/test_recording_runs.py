"""Histories recorded against a real redis-server: the fault suite's workers (faults/worker.py)
for a few seconds, checked linearizable; and a restart without persistence while a worker
holds, caught by the mutex model (with persistence the same steps are linearizable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from django_redis_lock import LockNotOwned, lock
from faults.histories import LINEARIZABLE, check_scenario
from faults.history import check_file
from faults.recorder import History, merge
from faults.scenarios import WORKER
from faults.store import READ_WRITE, Store, create
from faults.topologies import server_settings
from faults.worker import HISTORY
from testproject.redis_server import RedisServer, RedisServerGroup, die_with_parent
from tests.helpers import builtin_cache_with

ROOT = Path(__file__).resolve().parents[2]
WORKERS = 3
LEASE = 1.0
# Sections the workers must write before they are told to stop, and how long that may take.
SECTIONS = 12
RUN_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
POLL = 0.05
# The lease of the restart test: the restart and the second grant come well within it.
HOLD = 30.0


def _sections(store_path: Path) -> int:
    store = Store(store_path)
    try:
        return sum(1 for section in store.sections() if section.accepted)
    finally:
        store.close()


@pytest.fixture
def workers(tmp_path: Path, redis_factory: RedisServerGroup) -> Path:
    """WORKERS worker processes (read-write variant) on a server of their own, until they
    wrote SECTIONS sections (bounded); then stopped. The scratch directory."""
    server = redis_factory()
    store_path, stop = tmp_path / "store.sqlite3", tmp_path / "stop"
    create(store_path)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "faults.settings",
        "FAULTS_SETTINGS": json.dumps(server_settings(server.url, 1.0, 0)),
        "PYTHONPATH": str(ROOT),
    }
    args = [str(store_path), READ_WRITE, str(LEASE), "0.02", "1.0", str(stop)]
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), args[0], str(index), *args[1:]],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
        )
        for index in range(WORKERS)
    ]
    try:
        deadline = time.monotonic() + RUN_TIMEOUT
        while _sections(store_path) < SECTIONS and time.monotonic() < deadline:
            time.sleep(POLL)  # polling the store, bounded by RUN_TIMEOUT
        stop.touch()
        for process in processes:
            process.wait(timeout=STOP_TIMEOUT)
    finally:
        for process in processes:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)
    return tmp_path


def test_the_workers_histories_are_linearizable(workers: Path) -> None:
    checked = check_scenario(
        workers / HISTORY, "workers", ["mutex", "fenced-register"], LEASE, LINEARIZABLE
    )
    assert not checked.violations, checked.summary()
    mutex, register = checked.verdicts
    assert mutex.operations >= 2 * SECTIONS  # an acquire and a release each
    assert register.operations >= 3 * SECTIONS  # an acquire, a read and a write each


def _restart_while_holding(server: RedisServer, directory: Path) -> Path:
    """ "a" takes the lock; Redis is killed and started again; "b" asks for the lock (granted
    only if Redis forgot "a"'s hold); "a" releases. The merged history."""
    holder, other = History(directory, "a"), History(directory, "b")
    with builtin_cache_with(server.url) as alias:
        first = lock("restarted", using=alias, timeout=HOLD, auto_renew=False)
        invoked = holder.invoke("acquire", "restarted")
        assert first.acquire(blocking=False)
        holder.ok("acquire", "restarted", first.fencing_token)
        server.kill()
        server.start()
        second = lock("restarted", using=alias, timeout=HOLD, auto_renew=False)
        other.invoke("acquire", "restarted")
        if second.acquire(blocking=False):
            other.ok("acquire", "restarted", second.fencing_token)
        else:
            other.fail("acquire", "restarted", "busy")
        holder.invoke("release", "restarted")
        try:
            first.release()
        except LockNotOwned:  # the hold is gone: it ends by its lease
            holder.fail("release", "restarted")
            holder.expire("restarted", invoked + int(HOLD * 1e9), invoked)
        else:
            holder.ok("release", "restarted")
    holder.close()
    other.close()
    merged = directory / "merged.jsonl"
    merge(directory, merged)
    return merged


def test_a_restart_without_persistence_is_caught(
    tmp_path: Path, redis_factory: RedisServerGroup
) -> None:
    merged = _restart_while_holding(redis_factory(), tmp_path)
    verdict = check_file(merged, "mutex")
    assert not verdict.linearizable
    assert verdict.failures[0].why == "acquire by b while a holds"


def test_a_restart_with_persistence_is_linearizable(
    tmp_path: Path, redis_factory: RedisServerGroup
) -> None:
    persistent: Any = redis_factory(extra_args=("--appendonly", "yes", "--appendfsync", "always"))
    merged = _restart_while_holding(persistent, tmp_path)
    verdict = check_file(merged, "mutex")
    assert verdict.linearizable, verdict.lines()
