from celery import shared_task

from django_redis_lock import RateLimited, rate_limit
from myapp.work import refresh_feed, send_digest_to, sync_customer_data


def sync_customer_now(customer_id):
    # At most 10 calls a second to the partner's API, plus 5 at once after a quiet spell,
    # across every process and machine; each call waits for its turn (asleep, no polling).
    with rate_limit("partner-api", "10/s", burst=5):
        sync_customer_data(customer_id)


def send_digest(user_id):
    # 3 an hour to one user, spaced evenly: a digest within 20 minutes of the last is
    # refused, not delayed.
    try:
        rate_limit(f"digest:user:{user_id}", "3/h").check()
    except RateLimited as refused:
        return f"try again in {refused.retry_after:.0f} s"
    send_digest_to(user_id)
    return "sent"


async def refresh_feeds(count):
    feeds = rate_limit("feed-refresh", "20/s")
    for _ in range(count):
        async with feeds:
            await refresh_feed()


@shared_task
def sync_customer(customer_id):
    sync_customer_data(customer_id)


def schedule_sync(customer_id):
    # A scheduler takes the turn now and sends the task for when it comes: no worker sleeps.
    turn = rate_limit("crm-api", "600/m").reserve(max_wait=3600)
    if turn.admitted:
        sync_customer.apply_async((customer_id,), countdown=turn.wait)
    return turn
