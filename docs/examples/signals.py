import logging

from django.dispatch import receiver

from django_redis_lock.signals import lock_lost

logger = logging.getLogger("myapp.locks")


@receiver(lock_lost)
def page_someone(sender, lock, name, fencing_token, **kwargs):
    # Sent once per hold, maybe from the watchdog thread: keep it short.
    logger.error(
        "lost the lock %s (token %s): its work may not have been exclusive", name, fencing_token
    )
