import os
import threading

from django.db.models import F

from django_redis_lock import fenced_update, leader
from myapp.models import Account
from myapp.work import handle_message, run_due_jobs


def run_scheduler(stop: threading.Event, every: float = 60) -> None:
    # One scheduler across every instance: the others wait here to take over.
    with leader("scheduler") as lead:
        while not stop.is_set():
            lead.check()  # LeadershipLost once another instance may lead
            run_due_jobs(epoch=lead.epoch)
            stop.wait(every)


async def consume(messages):
    # The body is cancelled with LeadershipLost if the leadership is lost.
    async with leader("feed-consumer") as lead:
        async for message in messages:
            await handle_message(message, epoch=lead.epoch)


def settle(account_id: int, amount: int) -> None:
    with leader("settlement") as lead:
        # Refused (StaleFencingToken) if a later leader wrote the row: a deposed leader
        # that wakes up late cannot overwrite it.
        fenced_update(Account.objects.filter(pk=account_id), lead, balance=F("balance") - amount)


def settle_in_a_supervised_command(account_id: int, amount: int) -> None:
    # In a command run by `manage.py locks lead settlement -- ...`: the epoch comes with it.
    epoch = int(os.environ["DJANGO_REDIS_LOCK_EPOCH"])
    fenced_update(Account.objects.filter(pk=account_id), epoch, balance=F("balance") - amount)
