from celery import shared_task

from django_redis_lock import unique
from myapp.work import build_report, send_digest_to


# At most one rebuild per report queued or running; a second delay() gets the first's result.
@unique("report:{report_id}")
@shared_task
def rebuild_report(report_id):
    build_report()


# At most one digest per user waiting in the queue (one may run meanwhile); a duplicate
# raises AlreadyQueued; a digest not picked up within 10 minutes frees its key.
@unique("digest:{user_id}", until="executing", on_duplicate="raise", timeout=600)
@shared_task
def send_digest(user_id):
    send_digest_to(user_id)


def request_report(report_id):
    result = rebuild_report.delay(report_id)  # the task already queued or running, if any
    return result.id
