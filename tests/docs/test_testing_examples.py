"""The testing page's examples (docs/examples/testing_*.py), run as a reader runs them: pytest
in a project of its own whose conftest.py is the page's, on testproject's settings (with a
database in memory and a task backend that keeps what is enqueued), the kit's server its only
Redis."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.docs.examples import EXAMPLES
from tests.testing.pytest_runs import run_pytest, write_project

pytestmark = pytest.mark.slow

SETTINGS = """\
from testproject.settings import *  # noqa: F403

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# Enqueued tasks are kept, not run: a unique task's key stays held.
TASKS = {"default": {"BACKEND": f"{TASKS_FRAMEWORK}.backends.dummy.DummyBackend"}}  # noqa: F405
"""


def test_the_testing_pages_examples_pass(tmp_path: Path) -> None:
    write_project(tmp_path, {"settings.py": SETTINGS})
    shutil.copy(EXAMPLES / "testing_conftest.py", tmp_path / "conftest.py")
    for name in ("pytest", "unittest"):
        shutil.copy(EXAMPLES / f"testing_{name}.py", tmp_path / f"test_{name}_examples.py")
    result = run_pytest(tmp_path, "-p", "django", "-v", paths=[EXAMPLES])
    assert result.returncode == 0, result.stdout + result.stderr
    tests = (EXAMPLES / "testing_pytest.py").read_text().count("\ndef test_")
    tests += (EXAMPLES / "testing_unittest.py").read_text().count("    def test_")
    assert f"{tests} passed" in result.stdout, result.stdout
