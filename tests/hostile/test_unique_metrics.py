"""Hostile probes of @unique and the metrics settings: task ids Celery accepts however odd
(huge, control characters, format directives, text that reads like the package's own
markers), two tasks made from one function, bad cache aliases for @unique, @locked, lock(),
semaphore() and rwlock(), METRICS set to what is not a bool or flipped while a lock is held,
and METRICS_MAX_LABELS small or raised at run time.

The promise held: docs/unique.rst (a duplicate gets back the queued task's id, or
AlreadyQueued carries it; the key is the key, whatever task uses it), docs/metrics.rst (METRICS
and METRICS_MAX_LABELS read at run time; labels past the cap go to "other", nothing uncounted)
and the project's rule that a bad alias is refused at the call or decoration.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test.utils import override_settings

from django_redis_lock import (
    AlreadyQueued,
    get_lock_manager,
    lock,
    locked,
    rwlock,
    semaphore,
    unique,
)
from testproject.redis_server import RedisServer
from tests.celery_worker import on_broker

celery = pytest.importorskip("celery")

NOBODY = "tests.hostile.nobody"

TASK_IDS = [
    "x" * 5000,
    "has spaces in it",
    "100%25 %s %d %(x)s %",
    "\u00e9\u4e2d\U0001f512 \u2028 \u202e",
    "line1\nline2\r\nline3",
    "queued as 7",
    " running as abc",
    "tab\tand\x00nul",
    "\\back\\slash",
    "-",
    "'quote\"",
    "a" * 40 + " queued as " + "b" * 40,
]


@pytest.fixture
def celery_app(celery_broker_server: RedisServer) -> Iterator[Any]:
    from testproject.celery import app

    with on_broker(celery_broker_server):
        yield app


def _work(item: int) -> int:
    """The body of every task here: what it does never matters, only its enqueueing."""
    return item


_made: dict[str, Any] = {}


def task_named(app: Any, name: str, key: str, **options: Any) -> Any:
    """The task ``name`` made from ``_work`` with ``@unique(key, **options)``, made once."""
    if name not in _made:
        _made[name] = unique(key, **options)(app.task(name=name)(_work))
    return _made[name]


@pytest.mark.parametrize("task_id", TASK_IDS, ids=range(len(TASK_IDS)))
def test_a_duplicate_gets_back_any_task_id(celery_app: Any, task_id: str) -> None:
    task = task_named(celery_app, "tests.hostile.ids", "hid:{item}")
    first = task.apply_async((1,), task_id=task_id, queue=NOBODY)
    assert first.id == task_id
    again = task.apply_async((1,), queue=NOBODY)
    assert again.id == task_id
    assert task.delay(1).id == task_id
    info = get_lock_manager().get("unique:tests.hostile.ids:hid:1")
    assert info is not None
    out = io.StringIO()
    call_command("locks", "list", stdout=out, no_color=True)
    assert all(len(line) <= 120 for line in out.getvalue().splitlines())
    shown = json.loads(_cmd_json("show", "unique:tests.hostile.ids:hid:1"))
    assert shown["name"] == "unique:tests.hostile.ids:hid:1"


@pytest.mark.parametrize("task_id", TASK_IDS, ids=range(len(TASK_IDS)))
def test_already_queued_carries_any_task_id(celery_app: Any, task_id: str) -> None:
    task = task_named(celery_app, "tests.hostile.raise", "hraise:{item}", on_duplicate="raise")
    task.apply_async((2,), task_id=task_id, queue=NOBODY)
    with pytest.raises(AlreadyQueued) as raised:
        task.apply_async((2,), queue=NOBODY)
    assert raised.value.task_id == task_id


def _cmd_json(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, "--json", stdout=out)
    return out.getvalue()


def test_two_tasks_from_one_function_keep_their_keys(celery_app: Any) -> None:
    a = task_named(celery_app, "tests.hostile.two.a", "two-a:{item}")
    b = task_named(celery_app, "tests.hostile.two.b", "two-b:{item}", on_duplicate="raise")
    first_a = a.apply_async((1,), queue=NOBODY)
    first_b = b.apply_async((1,), queue=NOBODY)
    assert first_a.id != first_b.id
    assert a.apply_async((1,), queue=NOBODY).id == first_a.id
    with pytest.raises(AlreadyQueued):
        b.apply_async((1,), queue=NOBODY)
    names = sorted(info.name for info in get_lock_manager().list("unique:tests.hostile.two.*"))
    assert names == ["unique:tests.hostile.two.a:two-a:1", "unique:tests.hostile.two.b:two-b:1"]


def test_two_tasks_given_one_key_share_it(celery_app: Any) -> None:
    """Two tasks (different names) given the same key with scope="global" share the key."""
    a = task_named(celery_app, "tests.hostile.same.a", "same:{item}", scope="global")
    b = task_named(celery_app, "tests.hostile.same.b", "same:{item}", scope="global")
    first = a.apply_async((1,), queue=NOBODY)
    assert b.apply_async((1,), queue=NOBODY).id == first.id


DECORATORS: dict[str, Callable[[Any], object]] = {
    "unique": lambda using: unique("k:{x}", using=using),
    "locked": lambda using: locked("k", using=using),
    "locked-limit": lambda using: locked("k", limit=2, using=using),
}


@pytest.mark.parametrize(
    "using",
    [
        "nope",
        "",
        " default",
        "DEFAULT",
        ["default", "default", "default"],
        ["default", "builtin"],
        ("default", "builtin", "nope"),
        5,
        b"default",
        {"default"},
    ],
    ids=repr,
)
@pytest.mark.parametrize("decorator", list(DECORATORS))
def test_bad_using_refused_at_decoration(decorator: str, using: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        DECORATORS[decorator](using)


@pytest.mark.parametrize(
    ("using", "refusal", "message"),
    [
        ("nope", ImproperlyConfigured, "'nope' .* is not in CACHES"),
        ("", ImproperlyConfigured, "'' .* is not in CACHES"),
        (["default", "default", "default"], ValueError, "'default' more than once"),
    ],
    ids=repr,
)
def test_bad_using_refused_for_lock_semaphore_rwlock(
    using: object, refusal: type[Exception], message: str
) -> None:
    for make in (
        lambda: lock("k", using=using),  # type: ignore[arg-type]
        lambda: semaphore("k", 2, using=using),  # type: ignore[arg-type]
        lambda: rwlock("k", using=using),  # type: ignore[arg-type]
    ):
        with pytest.raises(refusal, match=message):
            make()


# ---- METRICS at run time


prometheus_client = pytest.importorskip("prometheus_client")


@pytest.fixture
def registry() -> Any:
    """A fresh registry, the one METRICS_REGISTRY names in ``settings_with``."""
    from tests.metrics import registries

    registries.current = prometheus_client.CollectorRegistry()
    return registries.current


def acquires(registry: Any, label: str) -> float:
    """How many acquires of the lock labelled ``label`` the registry counted."""
    return (
        registry.get_sample_value(
            "django_redis_lock_acquire_total", {"lock": label, "outcome": "acquired"}
        )
        or 0.0
    )


def settings_with(**changes: Any) -> Any:
    """The test settings' REDIS_LOCK with the registry above and ``changes``."""
    from django.conf import settings

    return override_settings(
        REDIS_LOCK={
            **getattr(settings, "REDIS_LOCK", {}),
            "METRICS_REGISTRY": "tests.metrics.registries.current",
            **changes,
        }
    )


@pytest.mark.parametrize("value", [0, 1, "false", "False", "", None, "yes", [], {}, 0.0])
def test_metrics_set_to_what_is_no_bool_turns_off_warns_and_locks_work(
    registry: Any, value: object, caplog: pytest.LogCaptureFixture
) -> None:
    with settings_with(METRICS=value):
        with lock("m:1", template="m:1"):
            pass
        with semaphore("m:2", 2, template="m:2"):
            pass
        with rwlock("m:3", template="m:3").write():
            pass

        @locked("m:4", limit=2)
        def f() -> str:
            return "ok"

        assert f() == "ok"
    assert acquires(registry, "m:1") == 0
    assert acquires(registry, "m:2") == 0
    assert "METRICS" in caplog.text


def test_metrics_turned_off_while_held_leaves_no_held_gauge_behind(registry: Any) -> None:
    with settings_with(METRICS=True):
        held = lock("flip", template="flip")
        assert held.acquire()
        permit = semaphore("flip", 2, template="flip-s")
        assert permit.acquire()
    with settings_with(METRICS="false"):
        held.release()
        permit.release()
    with settings_with(METRICS=True):
        held2 = lock("flip", template="flip")
        assert held2.acquire()
        held2.release()
    gauge = registry.get_sample_value("django_redis_lock_held", {"lock": "flip"})
    assert gauge in (None, 0.0), gauge


@pytest.mark.parametrize("value", [1, 2])
def test_a_small_max_labels_puts_semaphores_and_rwlocks_past_it_under_other(
    registry: Any, value: int, caplog: pytest.LogCaptureFixture
) -> None:
    with settings_with(METRICS=True, METRICS_MAX_LABELS=value):
        for n in range(4):
            with semaphore(f"ml:{n}", 2, template=f"ml:{n}"):
                pass
            with rwlock(f"mr:{n}", template=f"mr:{n}").read():
                pass
    labels = {
        sample.labels["lock"]
        for metric in registry.collect()
        for sample in metric.samples
        if "lock" in sample.labels
    }
    assert len(labels - {"other"}) <= value, labels
    assert "other" in labels


def test_max_labels_raised_at_run_time_loses_no_acquire(registry: Any) -> None:
    with settings_with(METRICS=True, METRICS_MAX_LABELS=1):
        for n in range(3):
            with lock(f"up:{n}", template=f"up:{n}"):
                pass
    with settings_with(METRICS=True, METRICS_MAX_LABELS=10), lock("up:9", template="up:9"):
        pass
    # no crash; whichever rule applies, nothing is lost: the acquires are all counted somewhere
    total = sum(
        sample.value
        for metric in registry.collect()
        for sample in metric.samples
        if sample.name == "django_redis_lock_acquire_total"
        and sample.labels.get("outcome") == "acquired"
    )
    assert total == 4
