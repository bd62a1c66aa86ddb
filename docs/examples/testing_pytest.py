import time

import pytest
from django.db.models import F
from django.test import RequestFactory, override_settings

import jobs
import semaphores
import unique_tasks
import using_locks
import views
from django_redis_lock import LockNotOwned, StaleFencingToken, fenced_update, leader, lock, rwlock
from django_redis_lock.testing import Captured, held, redis_server
from myapp import calls
from myapp.models import Account


def test_pay_answers_423_while_the_invoice_is_busy(locks):
    locks.make_busy("invoice:7")  # another process holds it
    response = views.pay(RequestFactory().post("/invoices/7/pay/"), invoice_id=7)
    assert response.status_code == 423


def test_the_report_is_not_built_while_someone_else_builds_it(locks):
    locks.make_busy("nightly-report", owner="worker-2")
    using_locks.nightly_report_if_free()  # its acquire(blocking=False) is False
    assert ("build_report", None) not in calls


def test_the_sync_stops_when_its_lock_is_lost(locks, monkeypatch):
    synced = []

    def sync_customer_data(customer_id):
        synced.append(customer_id)
        if customer_id == 2:
            locks.expire_now("sync-all")  # as an eviction or a long pause would end it

    monkeypatch.setattr(jobs, "sync_customer_data", sync_customer_data)
    with pytest.raises(LockNotOwned):
        jobs.sync_all(range(10))
    assert synced == [0, 1, 2]


def test_a_short_lease_runs_out_while_renewals_are_paused(locks):
    held = lock("nightly-report", timeout=0.2)
    with locks.pause_renewals():
        held.acquire()
        # No renewal comes: the lease runs out while the lock is still held.
        deadline = time.monotonic() + 5
        while held.owned() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert held.lost
    with pytest.raises(LockNotOwned):
        held.release()


@pytest.mark.django_db
def test_a_stale_holder_cannot_write(locks):
    account = Account.objects.create(balance=100)
    held = lock(f"account:{account.pk}")
    held.acquire()
    locks.advance_fence(f"account:{account.pk}")  # a later holder took the lock and wrote
    with pytest.raises(StaleFencingToken):
        fenced_update(Account.objects.filter(pk=account.pk), held, balance=F("balance") - 10)
    account.refresh_from_db()
    assert account.balance == 100


def test_paying_takes_the_invoice_lock(locks):
    with locks.captured_locks() as taken:
        using_locks.pay(7)
    assert taken == [Captured("invoice:7", "lock")]


def test_the_lock_is_held_while_the_report_builds(locks):
    with lock("nightly-report", label="report build"):
        info = locks.assert_held("nightly-report", label="report build")
        assert info.label == "report build"
    locks.assert_not_held("nightly-report")


def test_a_third_export_is_refused(locks):
    locks.make_busy("exports", kind="semaphore", limit=2)  # both places taken
    response = semaphores.export(RequestFactory().post("/exports/"))
    assert response.status_code == 423


def test_only_the_leader_runs_the_scheduler(locks):
    with leader("scheduler"):
        locks.assert_held("scheduler", kind="leader")
    locks.assert_not_held("scheduler", kind="leader")


def test_no_edit_while_a_reader_reads(locks):
    locks.make_busy("document:1", kind="read")  # a reader: the writer waits
    assert not rwlock("document:1").write().acquire(blocking=False)


def test_a_report_is_queued_once(locks):
    unique_tasks.request_report(7)
    unique_tasks.request_report(7)  # a duplicate: no second one queued
    locks.assert_enqueued_once(unique_tasks.rebuild_report, 7)


def test_on_a_server_of_its_own():
    with redis_server() as server, override_settings(**server.settings()):
        report = lock("nightly-report")  # on this server
        assert report.acquire()
        assert held("nightly-report") is not None
        report.release()
