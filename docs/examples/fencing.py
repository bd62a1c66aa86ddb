from django.db.models import F

from django_redis_lock import lock
from testproject.models import Account


class StaleHolder(Exception):
    """Our hold ended and a later holder wrote first: this write was refused."""


def withdraw(pk, amount):
    with lock(f"account:{pk}") as held:
        # One conditional UPDATE: the row accepts only a token above the last it saw, and
        # computes the new balance from what it holds now, not from an earlier read.
        updated = Account.objects.filter(pk=pk, fence__lt=held.fencing_token).update(
            balance=F("balance") - amount, fence=held.fencing_token
        )
        if not updated:
            raise StaleHolder(f"account {pk}: a later holder wrote first")
