import logging

from django_redis_lock import LockBusy, lock
from myapp.work import acharge_invoice, build_report, charge_invoice, refresh_feed

logger = logging.getLogger(__name__)


def pay(invoice_id):
    # Wait as long as it takes, run, release (even on exceptions).
    with lock(f"invoice:{invoice_id}"):
        charge_invoice(invoice_id)


def nightly_report():
    # Give up after 5 seconds: LockBusy.
    try:
        with lock("nightly-report", blocking_timeout=5, label="report build"):
            build_report()
    except LockBusy:
        logger.info("someone else is building the report")


def nightly_report_if_free():
    # Explicit calls: acquire() returns False when the lock is busy.
    report = lock("nightly-report", timeout=60)
    if report.acquire(blocking=False):
        try:
            build_report()
        finally:
            report.release()


async def apay(invoice_id):
    # The same API with an "a" in front; waiting never blocks the event loop.
    async with lock(f"invoice:{invoice_id}"):
        await acharge_invoice(invoice_id)


async def refresh_if_free():
    feed = lock("feed-refresh")
    if await feed.aacquire(blocking_timeout=0):
        try:
            await refresh_feed()
        finally:
            await feed.arelease()
