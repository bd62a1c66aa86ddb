from celery import shared_task

from django_redis_lock import locked
from myapp.work import rebuild_index, sync_customer_data


# @shared_task (or @app.task) above @locked: a worker takes the lock when it runs the task,
# not when the task is queued.
@shared_task
@locked("sync-customer:{customer_id}", timeout=120)
def sync_customer(customer_id):
    sync_customer_data(customer_id)


@locked("rebuild-search-index", blocking_timeout=30)
def rebuild_search_index():
    rebuild_index()
