try:
    from django.tasks import task  # Django 6.0 and later
except ImportError:
    from django_tasks import task  # the django-tasks backport, before Django 6.0

from django_redis_lock import AlreadyQueued, unique
from myapp.work import build_report


@unique("report:{report_id}")
@task
def rebuild_report(report_id):
    build_report()
    return report_id


def request_report(report_id):
    try:
        return rebuild_report.enqueue(report_id).id  # the TaskResult already queued, if any
    except AlreadyQueued as exc:  # a backend that keeps no results (the immediate one)
        return exc.task_id
