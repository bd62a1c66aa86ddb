"""@unique's modes: task-scoped keys, the throttle, the debounce, the idempotency window,
``app.send_task`` and a redelivered task. Celery tasks are sent to a queue no worker reads and
run in this process by ``apply`` (the worker's own run: its signals, its result)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command

from django_redis_lock import AlreadyQueued, Skipped, get_lock_manager, unique
from django_redis_lock.ops.records import LockInfo
from testproject.redis_server import RedisServer
from tests.celery_worker import on_broker
from tests.helpers import label_of, wait_until

celery = pytest.importorskip("celery", reason="Celery is not installed (requirements/test.txt)")

# A queue no worker reads: what is sent there stays queued.
NOBODY = "tests.unique.modes.nobody"
# What the tasks' body ran with, in this process.
RUNS: list[int] = []


def _work(item: int) -> int:
    RUNS.append(item)
    return item


_made: dict[str, Any] = {}


@pytest.fixture
def app(celery_broker_server: RedisServer) -> Iterator[Any]:
    """This process's Celery app, on the tests' broker."""
    from testproject.celery import app

    RUNS.clear()
    with on_broker(celery_broker_server):
        yield app


def task_named(app: Any, name: str, key: str, **options: Any) -> Any:
    """The task ``tests.unique.modes.<name>`` of ``_work`` with ``@unique(key, **options)``."""
    if name not in _made:
        _made[name] = unique(key, **options)(app.task(name=f"tests.unique.modes.{name}")(_work))
    return _made[name]


def held(name: str) -> LockInfo:
    info = get_lock_manager().get(name)
    assert info is not None, f"{name} is not held"
    return info


def skipped_by(result: Any) -> Skipped:
    """The Skipped a run reported (its state FAILURE, as AsyncResult and EagerResult say)."""
    assert result.state == "FAILURE"
    assert isinstance(result.result, Skipped)
    return result.result


def test_the_task_name_is_in_the_key_unless_scope_is_global(app: Any) -> None:
    a = task_named(app, "a", "shared:{item}")
    b = task_named(app, "b", "shared:{item}")
    first = a.apply_async((1,), queue=NOBODY)
    assert b.apply_async((1,), queue=NOBODY).id != first.id  # not a's AsyncResult
    c = task_named(app, "c", "together:{item}", scope="global")
    d = task_named(app, "d", "together:{item}", scope="global")
    together = c.apply_async((1,), queue=NOBODY)
    assert d.apply_async((1,), queue=NOBODY).id == together.id
    names = sorted(info.name for info in get_lock_manager().list("unique:*"))
    assert names == [
        "unique:tests.unique.modes.a:shared:1",
        "unique:tests.unique.modes.b:shared:1",
        "unique:together:1",
    ]


def test_a_throttle_keeps_its_key_for_its_window_whatever_the_task_does(app: Any) -> None:
    throttled = task_named(app, "throttle", "t:{item}", until="window", window=1)
    name = "unique:tests.unique.modes.throttle:t:1"
    first = throttled.apply_async((1,), queue=NOBODY)
    assert held(name).held_as == "unique, window 1 s"
    out = io.StringIO()
    call_command("locks", "list", "--pattern", "unique:*", "--json", stdout=out)
    assert [shown["unique"] for shown in json.loads(out.getvalue())] == ["window 1 s"]
    assert held(name).shown_name == f"{name} [unique, window 1 s]"  # the table's, the admin's
    assert label_of(name) == f"[window 1 s] tests.unique.modes.throttle queued as {first.id}"
    assert throttled.apply_async((1,), queue=NOBODY).id == first.id
    assert throttled.apply((1,), task_id=first.id).get() == 1  # it runs...
    assert held(name).ttl <= 1  # ...and the key lives on, not renewed by the run
    assert throttled.apply_async((1,), queue=NOBODY).id == first.id
    wait_until(lambda: get_lock_manager().get(name) is None, timeout=5)
    assert throttled.apply_async((1,), queue=NOBODY).id != first.id


def test_a_debounce_runs_the_last_enqueue_and_extends_the_key(app: Any) -> None:
    debounced = task_named(app, "debounce", "d:{item}", on_duplicate="replace", timeout=2)
    name = "unique:tests.unique.modes.debounce:d:1"
    first = debounced.apply_async((1,), queue=NOBODY)
    assert held(name).held_as == "unique, replace"
    wait_until(lambda: held(name).ttl < 1.5, timeout=5)
    last = debounced.apply_async((1,), queue=NOBODY)
    assert last.id != first.id
    assert held(name).ttl > 1.5  # the lease of a queued task again
    assert label_of(name).endswith(f"queued as {last.id}")
    assert skipped_by(debounced.apply((1,), task_id=first.id)).task_id == last.id
    assert RUNS == []  # the earlier one did not run
    assert debounced.apply((1,), task_id=last.id).get() == 1
    assert RUNS == [1]
    assert get_lock_manager().get(name) is None


def test_an_idempotency_window_returns_the_run_that_succeeded(app: Any) -> None:
    kept = task_named(app, "keep", "k:{item}", keep_after_success=1)
    name = "unique:tests.unique.modes.keep:k:1"
    first = kept.apply_async((1,), queue=NOBODY)
    assert kept.apply((1,), task_id=first.id).get() == 1
    assert label_of(name) == f"[keep 1 s] tests.unique.modes.keep done as {first.id}"
    assert held(name).held_as == "unique, keep 1 s"
    assert kept.apply_async((1,), queue=NOBODY).id == first.id  # that run, not a new one
    skipped_by(kept.apply((1,), task_id=first.id))  # its redelivery does not run again
    assert RUNS == [1]
    wait_until(lambda: get_lock_manager().get(name) is None, timeout=5)
    assert kept.apply_async((1,), queue=NOBODY).id != first.id


def test_send_task_of_a_unique_task_known_here_takes_its_key(app: Any) -> None:
    sent = task_named(app, "sent", "s:{item}")
    first = app.send_task("tests.unique.modes.sent", (1,), queue=NOBODY)
    assert app.send_task("tests.unique.modes.sent", (1,), queue=NOBODY).id == first.id
    assert sent.delay(1).id == first.id
    assert label_of("unique:tests.unique.modes.sent:s:1").endswith(f"queued as {first.id}")


@pytest.mark.parametrize("on_duplicate", ["return", "raise", "replace"])
def test_a_redelivered_task_does_not_run_beside_the_holder_of_its_key(
    app: Any, on_duplicate: str
) -> None:
    task = task_named(app, f"redelivered-{on_duplicate}", "r:{item}", on_duplicate=on_duplicate)
    name = f"unique:tests.unique.modes.redelivered-{on_duplicate}:r:1"
    holder = task.apply_async((1,), queue=NOBODY)
    # An older task of the key, delivered again (its worker died before acknowledging it)
    # while another holds the key: it does not run.
    assert skipped_by(task.apply((1,), task_id="older")).task_id == holder.id
    assert RUNS == []
    assert label_of(name).endswith(f"queued as {holder.id}")
    if on_duplicate == "raise":
        with pytest.raises(AlreadyQueued):
            task.apply_async((1,), queue=NOBODY)
    # The holder itself delivered again (its earlier run's worker died): it runs.
    assert task.apply((1,), task_id=holder.id).get() == 1
    assert get_lock_manager().get(name) is None
