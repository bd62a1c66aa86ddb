"""@unique's options and refusals, its keys as the queue stores the arguments, and the lease of
a key whose task is never picked up."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from django_redis_lock import AlreadyQueued, LockBusy, get_lock_manager, unique
from django_redis_lock.unique.enqueue import enqueue_once
from django_redis_lock.unique.keys import UniqueSpec, state_label, task_of
from testproject.redis_server import RedisServer
from tests.celery_worker import on_broker
from tests.helpers import label_of, wait_until


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"until": "done"}, ValueError, "until must be one of 'executing', 'executed'"),
        ({"on_duplicate": "skip"}, ValueError, "on_duplicate must be one of"),
        ({"scope": "app"}, ValueError, "scope must be one of 'task', 'global'"),
        ({"until": "window"}, ValueError, 'until="window" needs a window'),
        ({"window": 60}, ValueError, 'window is only for until="window"'),
        ({"until": "window", "window": 0}, ValueError, "window must be a number of seconds"),
        ({"until": "window", "window": -5}, ValueError, "window must be a number of seconds"),
        ({"until": "window", "window": "1m"}, TypeError, "window must be a number of seconds"),
        ({"until": "window", "window": 9, "on_duplicate": "replace"}, ValueError, "replace"),
        ({"until": "executing", "keep_after_success": 60}, ValueError, "keep_after_success"),
        ({"until": "window", "window": 9, "keep_after_success": 9}, ValueError, "keep_after"),
        ({"keep_after_success": 0}, ValueError, "keep_after_success must be a number"),
        ({"keep_after_success": True}, TypeError, "keep_after_success must be a number"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": "1h"}, TypeError, "timeout"),
        ({"label": "x" * 300}, ValueError, "label"),
        ({"using": 3}, TypeError, "using"),
        ({"using": ["a"]}, ValueError, "at least 3 cache aliases"),
        ({"using": "nope"}, ValueError, r"'nope' is not a cache alias in CACHES \(configured: "),
        ({"using": ["default", "x", "y"]}, ValueError, "'x' and 'y' are not cache aliases"),
    ],
)
def test_bad_options_are_refused_at_the_call(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        unique("report:{report_id}", **options)


def test_a_bad_key_is_refused_at_the_call() -> None:
    with pytest.raises(TypeError, match="must be a str or a callable"):
        unique(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="_"):
        unique("report:{report._private}")


def test_unique_goes_above_the_task_decorator() -> None:
    from celery import shared_task

    def work(report_id: int) -> None: ...

    with pytest.raises(TypeError, match=r"put it above @shared_task or @app\.task"):
        shared_task(unique("report:{report_id}")(work))
    with pytest.raises(TypeError, match="not on function"):
        unique("x")(work)


@pytest.fixture
def celery_app(celery_broker_server: RedisServer) -> Iterator[Any]:
    """This process's Celery app, on the tests' broker (see tests.celery_worker.on_broker)."""
    from testproject.celery import app

    with on_broker(celery_broker_server):
        yield app


def test_a_template_naming_no_argument_is_refused_at_the_first_enqueue(celery_app: Any) -> None:
    """Celery's task is known once its app has it: the first enqueue checks the template."""
    app = celery_app

    # Celery's task decorator carries no types.
    @unique("report:{nope}")
    @app.task(name="tests.unique.bad_template")  # type: ignore[untyped-decorator]
    def bad(report_id: int) -> None: ...

    with pytest.raises(ValueError, match=r"names 'nope', which tests\.unique\.bad_template"):
        bad.delay(1)
    assert get_lock_manager().get("unique:report:1") is None


def _report(report_id: int) -> int:
    """One function, several Celery tasks made from it below."""
    return report_id


# A queue no worker reads: what is sent there stays queued.
NOBODY = "tests.unique.nobody"


def test_every_app_that_has_the_task_takes_its_key(
    celery_app: Any, celery_broker_server: RedisServer
) -> None:
    """An app not made current (set_as_current=False) has its own instance of every shared task
    (@shared_task, and @app.task unless shared=False): each instance takes its task's key, with
    its own spec (two tasks from one function keep theirs)."""
    from celery import Celery, shared_task

    early = Celery("early", set_as_current=False, broker=celery_broker_server.url)
    early.finalize()  # before the tasks are made: Celery gives it the shared one at once
    shared = unique("shared:{report_id}")(shared_task(name="tests.unique.shared")(_report))
    own = celery_app.task(name="tests.unique.own")(_report)
    unique("own:{report_id}", on_duplicate="raise")(own)
    late = Celery("late", set_as_current=False, broker=celery_broker_server.url)
    try:
        for app in (early, late):
            first = app.tasks["tests.unique.shared"].apply_async((1,), queue=NOBODY)
            again = app.tasks["tests.unique.shared"].apply_async((1,), queue=NOBODY)
            assert again.id == first.id
        assert shared.apply_async((1,), queue=NOBODY).id == first.id  # the current app's
        late.tasks["tests.unique.own"].apply_async((1,), queue=NOBODY)
        with pytest.raises(AlreadyQueued):
            late.tasks["tests.unique.own"].apply_async((1,), queue=NOBODY)
        with pytest.raises(AlreadyQueued):
            own.apply_async((1,), queue=NOBODY)
        names = sorted(info.name for info in get_lock_manager().list("unique:*"))
        assert names == ["unique:tests.unique.own:own:1", "unique:tests.unique.shared:shared:1"]
    finally:
        early.close()
        late.close()


def test_alreadyqueued_is_a_lockbusy_with_the_task_id() -> None:
    error = AlreadyQueued("held", "abc")
    assert isinstance(error, LockBusy)
    assert error.task_id == "abc"


def test_labels_say_the_state_and_the_task_and_fit() -> None:
    assert state_label("app.tasks.report", "queued", "42") == "app.tasks.report queued as 42"
    assert task_of("app.tasks.report running as 42") == ("running", "42")
    assert task_of("app.tasks.report queued") == ("queued", None)
    assert task_of("anything else") == (None, None)
    long = state_label("x" * 300, "running", "id")
    assert len(long) == 256
    assert task_of(long) == ("running", "id")


@pytest.mark.parametrize("task_id", ["a b", "x" * 1000, "50%\n\u2028\u00e9 queued as 7"])
def test_a_label_carries_the_whole_task_id_whatever_it_holds(task_id: str) -> None:
    label = state_label("app.tasks.report " * 20, "queued", task_id)
    assert task_of(label) == ("queued", task_id)
    assert label.startswith("app.tasks.report")  # the task still shown, if shortened
    assert " " not in label.rpartition(" as ")[2]


def test_the_key_is_made_from_the_arguments_as_the_queue_stores_them(celery_app: Any) -> None:
    """A tuple reaches the worker as a list (JSON): the key is the same at both ends."""
    app = celery_app

    seen: list[Any] = []

    # Celery's task decorator carries no types.
    @unique("batch:{ids}")
    @app.task(name="tests.unique.batch")  # type: ignore[untyped-decorator]
    def batch(ids: Any) -> None:
        info = get_lock_manager().get("unique:tests.unique.batch:batch:[1, 2]")
        seen.append(None if info is None else info.label)

    app.conf.task_always_eager = True
    try:
        batch.delay((1, 2))
    finally:
        app.conf.task_always_eager = False
    assert seen == [f"tests.unique.batch running as {seen[0].rpartition(' ')[2]}"]


@pytest.mark.skipif(settings.TASKS_FRAMEWORK is None, reason="no tasks framework installed")
def test_a_django_task_keeps_its_options_and_class_through_using() -> None:
    from testproject.jobs import export_data

    moved = export_data.using(priority=5)
    assert type(moved) is type(export_data)
    assert moved.priority == 5
    assert type(export_data).__name__.startswith("Unique")


def test_a_task_never_picked_up_loses_its_key_by_its_lease() -> None:
    spec = UniqueSpec("k", "executed", "return", 0.5, None, None)
    sent = enqueue_once(spec, "unique:k", "app.job", "t1", lambda: "t1", str, str)
    assert sent == "t1"
    assert get_lock_manager().get("unique:k") is not None
    assert enqueue_once(spec, "unique:k", "app.job", "t2", lambda: "t2", str, str) == "t1"
    wait_until(lambda: get_lock_manager().get("unique:k") is None, timeout=5)
    assert enqueue_once(spec, "unique:k", "app.job", "t3", lambda: "t3", str, str) == "t3"


@pytest.mark.skipif(settings.TASKS_FRAMEWORK is None, reason="no tasks framework installed")
def test_a_django_task_template_is_checked_when_decorated() -> None:
    from testproject import jobs
    from testproject.gates import through_gate

    with pytest.raises(ValueError, match="names 'nope'"):
        unique("ping:{nope}")(jobs.task(through_gate))


def test_operators_see_a_unique_key_and_can_free_it() -> None:
    import io
    import json

    from django.core.management import call_command

    spec = UniqueSpec("k", "executed", "return", 60, None, None)
    enqueue_once(spec, "unique:report:9", "app.rebuild", "t1", lambda: "t1", str, str)
    out = io.StringIO()
    call_command("locks", "list", "--pattern", "unique:*", "--json", stdout=out)
    [shown] = json.loads(out.getvalue())
    assert (shown["name"], shown["label"]) == ("unique:report:9", "app.rebuild queued as t1")
    assert shown["unique"] == "default"
    call_command("locks", "release", "unique:report:9", stdout=io.StringIO())
    assert (
        enqueue_once(spec, "unique:report:9", "app.rebuild", "t2", lambda: "t2", str, str) == "t2"
    )


def _blocked_send(spec: UniqueSpec, task_id: str | None) -> tuple[threading.Thread, Any, Any]:
    """An enqueue of key ``unique:inflight`` whose send blocks until ``go`` is set; returns the
    thread, ``sending`` (set once its send began) and ``go``."""
    sending, go = threading.Event(), threading.Event()

    def send() -> str:
        sending.set()
        assert go.wait(30)
        return "first"

    first = threading.Thread(
        target=enqueue_once, args=(spec, "unique:inflight", "app.job", task_id, send, str, str)
    )
    first.start()
    assert sending.wait(30)
    return first, sending, go


def test_a_duplicate_of_a_send_in_flight_gets_its_known_id_at_once() -> None:
    """The id chosen before the send (Celery's) is in the key from its acquire: a duplicate
    returns it while the first send is still blocked."""
    spec = UniqueSpec("k", "executed", "return", 60, None, None)
    first, _, go = _blocked_send(spec, "first")
    try:
        again = enqueue_once(spec, "unique:inflight", "app.job", "second", str, str, str)
        assert again == "first"
    finally:
        go.set()
        first.join(30)


def test_a_duplicate_waits_for_an_id_chosen_by_the_send_on_a_release_not_a_timer(
    redis_client: redis.Redis,
) -> None:
    """The id the backend chooses as it sends (Django's): a duplicate waits on the sending
    lock, queued in Redis (no polling), and gets the id once the first enqueue wrote it."""
    from django_redis_lock.runtime import runtime
    from django_redis_lock.unique.keys import SENDING

    spec = UniqueSpec("k", "executed", "return", 60, None, None)
    first, _, go = _blocked_send(spec, None)
    got: list[str] = []
    duplicate = threading.Thread(
        target=lambda: got.append(
            enqueue_once(spec, "unique:inflight", "app.job", None, str, str, str)
        )
    )
    duplicate.start()
    try:
        queue = runtime().for_locks().keys_for(SENDING + "inflight").queue
        wait_until(lambda: redis_client.zcard(queue) == 1, timeout=5)  # queued behind it
    finally:
        go.set()
        first.join(30)
        duplicate.join(30)
    assert got == ["first"]
    assert label_of("unique:inflight") == "app.job queued as first"
