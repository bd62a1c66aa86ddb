"""assert_enqueued_once: a @unique Django task's key, held once per enqueue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test.utils import override_settings

from django_redis_lock.testing import assert_enqueued_once, reset

pytestmark = pytest.mark.skipif(
    settings.TASKS_FRAMEWORK is None,
    reason="neither django.tasks (Django 6.0+) nor django-tasks is installed",
)


@pytest.fixture(autouse=True)
def _queued_not_run() -> Iterator[None]:
    """A backend that queues and never runs: the key stays held."""
    backend = f"{settings.TASKS_FRAMEWORK}.backends.dummy.DummyBackend"
    with override_settings(TASKS={"default": {"BACKEND": backend}}):
        yield
    reset()


def test_a_queued_task_holds_its_key_once() -> None:
    from testproject.jobs import export_data

    with pytest.raises(AssertionError, match=r"unique:.*export:7.*is not held"):
        assert_enqueued_once(export_data, 7, "gate")
    export_data.enqueue(7, "gate")
    export_data.enqueue(7, "gate")  # a duplicate: the same key
    info = assert_enqueued_once(export_data, 7, gate="gate")
    assert info.unique
    assert info.name.endswith("export:7")
    with pytest.raises(AssertionError):
        assert_enqueued_once(export_data, 8, "gate")


def test_a_task_that_is_not_unique_is_refused() -> None:
    from testproject.jobs import paced_job

    with pytest.raises(TypeError, match="not a @unique task"):
        assert_enqueued_once(paced_job, 1, "log")
