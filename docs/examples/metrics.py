import logging

from django.dispatch import receiver

from django_redis_lock import lock, locked
from django_redis_lock.signals import lock_renewal_failed

logger = logging.getLogger("myapp.locks")


def pay(invoice_id):
    # The lock label of its metrics is the template, not "invoice:1234": one series per kind.
    with lock(f"invoice:{invoice_id}", template="invoice:{invoice_id}"):
        ...


@locked("invoice:{invoice_id}")  # the decorator's template is the label already
def refund(invoice_id): ...


@receiver(lock_renewal_failed)
def renewal_failed(sender, name, lease_left, error, **kwargs):
    # From the watchdog's thread, at each failed try: alert before the hold is lost.
    logger.error("lock %s: renewal failed (%s), %.1f s of lease left", name, error, lease_left)
