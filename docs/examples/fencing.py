from django.db import transaction
from django.db.models import F
from django.http import JsonResponse

from django_redis_lock import current_lock, fenced_update, lock, locked
from myapp.models import Account


def withdraw(pk, amount):
    with lock(f"account:{pk}") as held:
        # One UPDATE: written only if no later holder wrote the row, and the new balance is
        # computed by the database from what the row holds now.
        fenced_update(Account.objects.filter(pk=pk), held, balance=F("balance") - amount)


@locked("account:{pk}")
def deposit(request, pk):
    # Inside @locked code, current_lock() is the hold: no lock to pass around.
    Account.objects.filter(pk=pk).fenced_update(current_lock(), balance=F("balance") + 10)
    return JsonResponse({"deposited": 10})


def withdraw_checked(pk, amount):
    with lock(f"account:{pk}") as held, transaction.atomic():
        # Read and write in one transaction that keeps the row locked: nobody writes between.
        account = Account.objects.select_for_update().get(pk=pk)
        if account.balance < amount:
            raise ValueError("not enough money")
        account.balance -= amount
        account.save(fence=held)  # refused if a later holder wrote the row


def withdraw_unsafe(pk, amount):
    # Do not do this: the read is not fenced. A stale holder and the next one may both read
    # the same balance; the stale one writes first (accepted: no later token reached the row
    # yet), and the next one then writes a balance that misses that withdrawal.
    with lock(f"account:{pk}") as held:
        account = Account.objects.get(pk=pk)
        account.balance -= amount
        account.save(fence=held)
