from celery import shared_task

from django_redis_lock import unique
from myapp.work import build_report, send_digest_to, sync_customer_data


# Throttle: at most one digest per user every 10 minutes, counted from the first enqueue;
# the key lives its window whether the task ran, failed or is still queued.
@unique("digest:{user_id}", until="window", window=600)
@shared_task
def send_digest(user_id):
    send_digest_to(user_id)


# Debounce: a burst of saves sends one sync, the last; an earlier one still queued when the
# later is enqueued does not run (its result raises Skipped).
@unique("customer:{customer_id}", on_duplicate="replace", timeout=300)
@shared_task
def sync_customer(customer_id):
    sync_customer_data(customer_id)


# Idempotency window: for an hour after a success, a duplicate gets that run's result.
@unique("report:{report_id}", keep_after_success=3600)
@shared_task
def rebuild_report(report_id):
    build_report()
    return report_id
