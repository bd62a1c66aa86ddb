from django_redis_lock import lock
from myapp.work import sync_customer_data


def sync_all(customer_ids):
    # Stops at the first customer after the lock was lost: another worker may hold it now.
    # The with block's exit then raises LockNotOwned, so the caller learns it too.
    with lock("sync-all", timeout=60) as held:
        for customer_id in customer_ids:
            if held.lost:
                break
            sync_customer_data(customer_id)
