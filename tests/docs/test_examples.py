"""Every example of the documentation, run against real Redis servers (docs/examples/)."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from contextlib import redirect_stdout
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import caches
from django.core.checks import run_checks
from django.test import Client, override_settings

from django_redis_lock import AlreadyQueued, LockBusy, LockNotOwned, get_lock_manager, lock
from testproject.redis_server import RedisServerGroup
from tests.docs.examples import calls, example, example_settings, forget


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    forget()
    yield
    forget()


def _messages() -> list[str]:
    return [
        m.id for m in run_checks(tags=["caches"]) if m.id and m.id.startswith("django_redis_lock")
    ]


def _address(redis_url: str) -> str:
    return redis_url.removeprefix("redis://").partition("/")[0]


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["settings_minimal", "settings_builtin", "settings_valkey"])
def test_a_single_server_as_configured(redis_url: str, name: str) -> None:
    found = example_settings(name, {"127.0.0.1:6379": _address(redis_url)})
    if "INSTALLED_APPS" in found:
        assert "django_redis_lock" in found["INSTALLED_APPS"]
    with override_settings(CACHES=found["CACHES"]):
        assert _messages() == []
        with lock("configured") as held:
            assert held.fencing_token is not None
            assert lock("configured").locked()


def test_locks_in_an_alias_of_their_own_survive_cache_clear(redis_url: str) -> None:
    found = example_settings("settings_locks_alias", {"127.0.0.1:6379": _address(redis_url)})
    with override_settings(CACHES=found["CACHES"], REDIS_LOCK=found["REDIS_LOCK"]):
        assert _messages() == []
        with lock("kept") as held:
            caches["default"].clear()  # FLUSHDB of database 0
            assert held.owned()
        # In the cache's own database the same clear() drops a held lock.
        with pytest.raises(LockNotOwned), lock("dropped", using="default"):
            caches["default"].clear()


def test_a_quorum_as_configured(redis_url: str) -> None:
    group = RedisServerGroup()
    try:
        servers = [group() for _ in range(5)]
        found = example_settings(
            "settings_quorum",
            {
                'f"redis://redis-{i}.internal:6379/0"': "urls[i]",
                "redis://10.0.0.9:6379/0": redis_url,
            },
            urls=[server.url for server in servers],
        )
        with override_settings(CACHES=found["CACHES"], REDIS_LOCK=found["REDIS_LOCK"]):
            assert _messages() == []
            with lock("invoice:42") as held:
                assert held.fencing_token is not None
                info = get_lock_manager().get("invoice:42")
                assert info is not None
                assert len(info.primaries) == 5
    finally:
        group.stop_all()


# -- code ------------------------------------------------------------------------------------


def test_first_lock() -> None:
    example("first_lock").pay(7)
    assert calls() == [("charge_invoice", 7)]
    assert not lock("invoice:7").locked()


def test_using_locks(caplog: pytest.LogCaptureFixture) -> None:
    using = example("using_locks")
    using.pay(1)
    asyncio.run(using.apay(2))
    using.nightly_report_if_free()
    asyncio.run(using.refresh_if_free())
    assert calls() == [
        ("charge_invoice", 1),
        ("acharge_invoice", 2),
        ("build_report", None),
        ("refresh_feed", None),
    ]
    forget()
    with lock("nightly-report"), lock("feed-refresh"):
        using.nightly_report_if_free()
        asyncio.run(using.refresh_if_free())
        with override_blocking(using, 0.05), caplog.at_level(logging.INFO):
            using.nightly_report()
    assert calls() == []
    assert "someone else is building the report" in caplog.text


class override_blocking:
    """Make the example's five-second wait short: lock() called with blocking_timeout=5 waits
    ``seconds`` instead (the example's text is what the docs show; the wait is not)."""

    def __init__(self, module: Any, seconds: float) -> None:
        self.module, self.seconds, self.original = module, seconds, module.lock

    def __enter__(self) -> None:
        original, seconds = self.original, self.seconds

        def shorter(name: str, **options: Any) -> Any:
            if options.get("blocking_timeout") == 5:
                options["blocking_timeout"] = seconds
            return original(name, **options)

        self.module.lock = shorter

    def __exit__(self, *exc: object) -> None:
        self.module.lock = self.original


@pytest.mark.django_db
def test_views() -> None:
    example("views")
    with override_settings(ROOT_URLCONF="tests.docs.urls"):
        client = Client()
        assert client.post("/invoices/3/pay/").status_code == 200
        with lock("invoice:3"):
            busy = client.post("/invoices/3/pay/")
        assert busy.status_code == 423
        assert int(busy["Retry-After"]) >= 1

        assert client.get("/contacts/import/").status_code == 302  # anonymous: log in first
        ada, bob = (get_user_model().objects.create_user(name) for name in ("ada", "bob"))
        client.force_login(ada)
        other = Client()
        other.force_login(bob)
        with lock(f"import-contacts:user:{ada.pk}"):
            assert client.get("/contacts/import/").status_code == 423
            assert other.get("/contacts/import/").status_code == 200  # bob has a lock of his own

        assert client.get("/feeds/5/refresh/").status_code == 200
        with lock("feed:5"):
            assert client.get("/feeds/5/refresh/").status_code == 423
        assert client.post("/reports/8/").content == b"report 8 built"
        with lock("report:8"):
            assert client.post("/reports/8/").status_code == 423
        assert client.post("/exports/9/").content == b"export 9 done"
        with lock("export:9"):
            answer = client.post("/exports/9/")
        assert answer.status_code == 302
        assert answer["Location"] == "/exports/9/status/"
    assert ("charge_invoice", 3) in calls()
    assert ("import_contacts_of", bob) in calls()


def test_tasks() -> None:
    tasks = example("tasks")
    tasks.sync_customer(42)  # the task's body, as a worker runs it
    tasks.rebuild_search_index()
    assert calls() == [("sync_customer_data", 42), ("rebuild_index", None)]
    with lock("sync-customer:42"), pytest.raises(LockBusy):
        tasks.sync_customer(42)
    assert tasks.sync_customer.name.endswith("tasks.sync_customer")  # a Celery task


def test_operating() -> None:
    operating = example("operating")
    held = lock("invoice:11", label="paying")
    assert held.acquire()
    output = io.StringIO()
    with redirect_stdout(output):
        operating.show_held_invoices()
    assert output.getvalue().startswith("invoice:11 ")
    assert " paying " in output.getvalue()
    assert held.fencing_token is not None
    assert operating.release_stuck("invoice:11", held.fencing_token + 1) is False
    assert held.owned()
    assert operating.release_stuck("invoice:11", held.fencing_token) is False  # nobody waited
    assert not held.owned()

    for name in ("tmp:a", "tmp:b", "report:x"):
        lock(name).acquire()
    assert operating.clear_temporary() == 2
    assert operating.first_page() == (["report:x"], "")

    for _ in range(3):
        with lock("report:daily"):
            pass
    with redirect_stdout(io.StringIO()) as printed:
        stats = operating.report_statistics()
    assert stats is not None
    assert stats.acquisitions == 3
    assert "report:daily 3 " in printed.getvalue()


def test_signals(caplog: pytest.LogCaptureFixture) -> None:
    from django_redis_lock.signals import lock_lost

    module = example("signals")
    try:
        held = lock("watched")
        assert held.acquire()
        get_lock_manager().release("watched")
        with caplog.at_level(logging.ERROR, logger="myapp.locks"):
            assert not held.owned()
        assert f"lost the lock watched (token {held.fencing_token})" in caplog.text
    finally:
        lock_lost.disconnect(module.page_someone)


@pytest.mark.django_db
def test_fencing(redis_client: redis.Redis, rf: Any) -> None:
    from django_redis_lock import StaleFencingToken
    from testproject.models import Account

    fencing = example("fencing")
    account = Account.objects.create(balance=Decimal(100))
    fencing.withdraw(account.pk, Decimal(30))
    assert fencing.deposit(rf.get("/"), pk=account.pk).status_code == 200
    fencing.withdraw_checked(account.pk, Decimal(20))
    with pytest.raises(ValueError, match="not enough"):
        fencing.withdraw_checked(account.pk, Decimal(1000))
    account.refresh_from_db()
    assert account.balance == Decimal(60)
    assert account.fence > 0
    # A later holder wrote first (its token is larger): each way of writing is refused.
    Account.objects.filter(pk=account.pk).update(fence=account.fence + 10**12)
    for write in (fencing.withdraw, fencing.withdraw_checked, fencing.withdraw_unsafe):
        with pytest.raises(StaleFencingToken):
            write(account.pk, Decimal(30))
    account.refresh_from_db()
    assert account.balance == Decimal(60)


def test_settings_options() -> None:
    found = example_settings("settings_options", {})
    with override_settings(REDIS_LOCK=found["REDIS_LOCK"]):
        assert _messages() == []
        held = lock("configured")
        assert held.timeout == 30


def test_unique_celery(celery_broker_server: Any) -> None:
    from testproject.celery import app
    from tests.celery_worker import on_broker

    with on_broker(celery_broker_server):
        unique_celery = example("unique_celery")
        app.conf.task_always_eager = True
        try:
            assert unique_celery.request_report(1)  # run at once (eager)
            report = f"unique:{unique_celery.rebuild_report.name}:report:1"
            with lock(report, label="x queued as abc"):  # as a queued task holds it
                assert unique_celery.request_report(1) == "abc"
            with (
                lock(f"unique:{unique_celery.send_digest.name}:digest:5", label="x queued as def"),
                pytest.raises(AlreadyQueued) as refused,
            ):
                unique_celery.send_digest.delay(5)
            assert refused.value.task_id == "def"
            unique_celery.send_digest.delay(5)
        finally:
            app.conf.task_always_eager = False
    assert calls() == [("build_report", None), ("send_digest_to", 5)]


def test_unique_modes(celery_broker_server: Any) -> None:
    from django_redis_lock import Skipped
    from tests.celery_worker import on_broker

    with on_broker(celery_broker_server):
        modes = example("unique_modes")
        nobody = "tests.docs.nobody"  # a queue no worker reads
        digest = modes.send_digest.apply_async((5,), queue=nobody)
        assert modes.send_digest.apply_async((5,), queue=nobody).id == digest.id  # throttled
        assert modes.send_digest.apply((5,), task_id=digest.id).successful()
        assert modes.send_digest.apply_async((5,), queue=nobody).id == digest.id  # its window
        first = modes.sync_customer.apply_async((7,), queue=nobody)
        last = modes.sync_customer.apply_async((7,), queue=nobody)
        assert isinstance(modes.sync_customer.apply((7,), task_id=first.id).result, Skipped)
        assert modes.sync_customer.apply((7,), task_id=last.id).successful()
        report = modes.rebuild_report.apply_async((2,), queue=nobody)
        assert modes.rebuild_report.apply((2,), task_id=report.id).get() == 2
        assert modes.rebuild_report.apply_async((2,), queue=nobody).id == report.id  # kept
    assert calls() == [("send_digest_to", 5), ("sync_customer_data", 7), ("build_report", None)]


@pytest.mark.skipif(settings.TASKS_FRAMEWORK is None, reason="no tasks framework installed")
def test_unique_tasks() -> None:
    unique_tasks = example("unique_tasks")
    assert unique_tasks.request_report(2)  # the immediate backend runs it as it is enqueued
    assert calls() == [("build_report", None)]
    report = f"unique:{unique_tasks.rebuild_report.module_path}:report:2"
    with lock(report, label="x queued as xyz"):
        assert unique_tasks.request_report(2) == "xyz"
    assert calls() == [("build_report", None)]


def test_semaphores() -> None:
    from django.test import RequestFactory

    from django_redis_lock import rwlock, semaphore

    examples = example("semaphores")
    examples.build(1)
    assert examples.show(7) == "text"
    with rwlock("document:7").read():  # readers together
        assert examples.show(7) == "text"
    examples.edit(7, "new")
    assert calls() == [
        ("build_report", None),
        ("read_document", 7),
        ("read_document", 7),
        ("write_document", (7, "new", True)),
    ]
    with semaphore("exports", 2), semaphore("exports", 2):
        assert examples.export(RequestFactory().get("/")).status_code == 423
    assert examples.export(RequestFactory().get("/")).status_code == 200


def test_several_names_at_once() -> None:
    examples = example("many")
    examples.transfer(1, 2, 5)
    assert examples.try_transfer(2, 1, 3) == "moved"
    with lock("warehouse:2"):
        assert examples.try_transfer(1, 2, 1) == "busy: warehouse:2"
        assert not lock("warehouse:1").locked()
    asyncio.run(examples.atransfer(3, 1, 2))
    examples.restock(2, 1, 4)
    fences = ["warehouse:1", "warehouse:2"]
    assert calls() == [
        ("move_stock", (1, 2, 5, fences)),
        ("move_stock", (2, 1, 3, fences)),
        ("amove_stock", (3, 1, 2)),
        ("move_stock", (2, 1, 4, fences)),
    ]


def test_cache_once() -> None:
    examples = example("cache_once")
    assert examples.dashboard(3) == {"team": 3, "open_orders": 12}
    assert examples.dashboard(3) == {"team": 3, "open_orders": 12}
    assert asyncio.run(examples.adashboard(3)) == {"team": 3, "open_orders": 12}
    assert asyncio.run(examples.adashboard(4)) == {"team": 4, "open_orders": 12}
    assert examples.monthly_sales(2026, 11) == examples.monthly_sales(2026, 11) == 11000
    assert calls() == [
        ("build_dashboard", 3),
        ("build_dashboard", 4),
        ("compute_sales", (2026, 11)),
    ]
    assert caches["default"].get("sales:2026:11") == 11000
