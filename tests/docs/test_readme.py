"""The README's Python, run as a reader pastes it: each ``code-block:: python`` of README.rst
on its own, imports included (``myapp`` is docs/examples/myapp, the application the examples
lock for), against the suite's Redis. PyPI shows the README without includes, so its blocks
are run from the page itself."""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory, override_settings

from django_redis_lock import lock
from tests.docs.examples import calls, example, forget

README = Path(__file__).resolve().parents[2] / "README.rst"


def readme_blocks() -> list[str]:
    """The code of each ``.. code-block:: python`` of README.rst, dedented."""
    found = re.findall(
        r"^\.\. code-block:: python\n\n((?:(?: {4}.*)?\n)+)", README.read_text(), re.MULTILINE
    )
    return [textwrap.dedent(block).strip() + "\n" for block in found]


def run_block(number: int, replace: dict[str, str] | None = None) -> dict[str, Any]:
    """Run README's ``number``-th Python block (from 0) as a module of its own; its names."""
    example("myapp")  # puts docs/examples on sys.path, as the reader's project has myapp
    code = readme_blocks()[number]
    for old, new in (replace or {}).items():
        assert old in code, f"{old!r} is not in README's block {number}"
        code = code.replace(old, new)
    namespace: dict[str, Any] = {"__name__": f"readme_block_{number}"}
    exec(compile(code, f"README.rst block {number}", "exec"), namespace)
    return namespace


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    forget()
    yield
    forget()


def test_the_readme_shows_these_blocks() -> None:
    """Each block has its test below: a new block fails here until it has one."""
    assert len(readme_blocks()) == 6


def test_configure(redis_url: str) -> None:
    address = redis_url.removeprefix("redis://").partition("/")[0]
    found = run_block(0, {"127.0.0.1:6379": address})
    assert "django_redis_lock" in found["INSTALLED_APPS"]
    with override_settings(CACHES=found["CACHES"]), lock("configured") as held:
        assert held.fencing_token is not None


def test_a_first_lock() -> None:
    run_block(1)["pay"](7)
    assert calls() == [("charge_invoice", 7)]
    assert not lock("invoice:7").locked()


def test_a_first_locked_view(rf: RequestFactory) -> None:
    pay = run_block(2)["pay"]
    assert pay(rf.post("/"), invoice_id=3).content == b"paid"
    with lock("invoice:3"):
        busy = pay(rf.post("/"), invoice_id=3)
    assert busy.status_code == 423
    assert int(busy["Retry-After"]) >= 1
    assert calls() == [("charge_invoice", 3)]


@pytest.mark.django_db
def test_a_lock_per_signed_in_user(rf: RequestFactory) -> None:
    import_contacts = run_block(3)["import_contacts"]
    anonymous = rf.get("/")
    anonymous.user = AnonymousUser()
    assert import_contacts(anonymous).status_code == 302  # login_required: log in first
    request = rf.get("/")
    request.user = get_user_model().objects.create_user("ada")
    assert import_contacts(request).content == b"imported"
    with lock(f"import-contacts:user:{request.user.pk}"):
        assert import_contacts(request).status_code == 423
    assert calls() == [("import_contacts_of", request.user)]


def test_unique_tasks(celery_broker_server: Any) -> None:
    from testproject.celery import app
    from tests.celery_worker import on_broker

    with on_broker(celery_broker_server):
        rebuild_report = run_block(4)["rebuild_report"]
        app.conf.task_always_eager = True
        try:
            rebuild_report.delay(1)  # run at once (eager): the key is free
            key = f"unique:{rebuild_report.name}:report:1"  # the task's name, then its key
            with lock(key, label="x queued as abc"):  # as a queued task holds it
                assert rebuild_report.delay(1).id == "abc"
        finally:
            app.conf.task_always_eager = False
    assert calls() == [("build_report", None)]


def test_rate_limits() -> None:
    sync_customer = run_block(5)["sync_customer"]
    started = time.monotonic()
    for customer_id in range(7):  # one and a burst of five at once, then the next turn
        sync_customer(customer_id)
    assert time.monotonic() - started >= 0.09  # the seventh: 0.1 s after the first
    assert calls() == [("sync_customer_data", i) for i in range(7)]
