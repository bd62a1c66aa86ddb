"""The testing page's examples (docs/examples/testing_*.py), run as a reader runs them: pytest
in a project of its own whose conftest.py is the page's, on testproject's settings (with a
database in memory and a task backend that keeps what is enqueued), the kit's server its only
Redis."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.conf import settings

from tests.docs.examples import EXAMPLES, calls, example, forget
from tests.testing.pytest_runs import run_pytest, write_project

pytestmark = pytest.mark.slow

SETTINGS = """\
from testproject.settings import *  # noqa: F403

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# Enqueued tasks are kept, not run: a unique task's key stays held.
TASKS = {"default": {"BACKEND": f"{TASKS_FRAMEWORK}.backends.dummy.DummyBackend"}}  # noqa: F405
"""

#: The page's examples, as the reader's project names them.
FILES = {
    "testing_conftest": "conftest.py",
    "testing_pytest": "test_pytest_examples.py",
    "testing_unittest": "test_unittest_examples.py",
}


@pytest.mark.skipif(
    settings.TASKS_FRAMEWORK is None, reason="the page's unique task needs a tasks framework"
)
def test_the_testing_pages_examples_pass(tmp_path: Path) -> None:
    write_project(tmp_path, {"settings.py": SETTINGS})
    for name, copy in FILES.items():
        shutil.copy(EXAMPLES / f"{name}.py", tmp_path / copy)
    result = run_pytest(tmp_path, "-p", "django", "-v", paths=[EXAMPLES])
    assert result.returncode == 0, result.stdout + result.stderr
    tests = sum(
        (EXAMPLES / f"{name}.py").read_text().count("def test_")
        for name in ("testing_pytest", "testing_unittest")
    )
    assert f"{tests} passed" in result.stdout, result.stdout


def test_the_sync_job_syncs_each_customer_while_it_holds_its_lock() -> None:
    forget()
    example("jobs").sync_all([1, 2])
    assert calls() == [("sync_customer_data", 1), ("sync_customer_data", 2)]
