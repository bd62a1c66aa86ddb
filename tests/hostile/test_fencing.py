"""Hostile probes of fenced writes: bulk_update() naming the fence field, a stale save of a row
deleted (or deleted and created again) since it was read, tokens that are huge, far ahead, not
integers or a read hold's, and fenced_update() on what is not a queryset.

The promise held: docs/fencing.rst (a write with a token lower than the row's is refused with
StaleFencingToken and writes nothing; bulk_update() naming the fence is a TypeError before any
query; a token is an integer from 1 to 2**63 - 1 and at most an hour ahead of the clock).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import transaction
from django.db.models import F

from django_redis_lock import (
    LockNotOwned,
    StaleFencingToken,
    fenced_update,
    lock,
    rwlock,
    semaphore,
)
from django_redis_lock.fencing.writes import MAX_TOKEN
from testproject.models import Account

pytestmark = pytest.mark.django_db

REFUSED_TOKEN = "A fencing token is an integer from 1 to"


def now_us() -> int:
    return time.time_ns() // 1000


def account(fence: int = 0) -> Account:
    return Account.objects.create(balance=Decimal(100), fence=fence)


@pytest.mark.parametrize(
    "fields",
    [["fence"], ("balance", "fence"), {"fence": 1}, ["balance", "fence", "fence"]],
    ids=repr,
)
def test_bulk_update_naming_the_fence_is_refused(fields: object) -> None:
    row = account(fence=5)
    row.fence = 1
    row.balance = Decimal(1)
    with pytest.raises(TypeError):
        Account.objects.bulk_update([row], fields)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Account.objects.all().bulk_update([row], fields)  # type: ignore[arg-type]
    row.refresh_from_db()
    assert (row.balance, row.fence) == (Decimal(100), 5)


def test_bulk_update_without_the_fence_keeps_the_rows_fence() -> None:
    row = account(fence=5)
    stale = Account.objects.get(pk=row.pk)
    Account.objects.filter(pk=row.pk).update(fence=9)
    stale.balance = Decimal(7)
    Account.objects.bulk_update([stale], ["balance"])
    row.refresh_from_db()
    assert (row.balance, row.fence) == (Decimal(7), 9)


def test_bulk_update_with_generator_fields_refuses_before_writing() -> None:
    row = account(fence=5)
    row.fence = 1
    with pytest.raises(TypeError):
        Account.objects.bulk_update([row], (name for name in ["balance", "fence"]))


def test_stale_save_of_a_deleted_row_is_refused_not_reinserted() -> None:
    row = account()
    copy = Account.objects.get(pk=row.pk)
    Account.objects.filter(pk=row.pk).delete()
    held = lock("fence-del")
    assert held.acquire()
    with pytest.raises(StaleFencingToken) as raised:
        copy.save(fence=held)
    assert raised.value.fence is None
    assert not Account.objects.filter(pk=row.pk).exists()
    with pytest.raises(StaleFencingToken):
        copy.save(fence=held, update_fields=["balance"])
    assert not Account.objects.filter(pk=row.pk).exists()
    assert copy.fence == 0  # the in-memory fence is put back
    held.release()


def test_stale_save_of_a_deleted_row_inside_a_transaction_leaves_it_usable() -> None:
    row = account()
    copy = Account.objects.get(pk=row.pk)
    with transaction.atomic():
        Account.objects.filter(pk=row.pk).delete()
        with pytest.raises(StaleFencingToken):
            copy.save(fence=now_us())
        Account.objects.create(balance=Decimal(1))  # the transaction still works
    assert not Account.objects.filter(pk=row.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_async_stale_save_of_a_deleted_row() -> None:
    row = account()
    copy = Account.objects.get(pk=row.pk)
    Account.objects.filter(pk=row.pk).delete()
    with pytest.raises(StaleFencingToken):
        asyncio.run(copy.asave(fence=now_us()))
    assert not Account.objects.filter(pk=row.pk).exists()


def test_a_row_deleted_and_created_again_by_a_later_holder_refuses_the_stale_save() -> None:
    row = account()
    copy = Account.objects.get(pk=row.pk)
    pk = row.pk
    Account.objects.filter(pk=pk).delete()
    Account.objects.create(pk=pk, balance=Decimal(5), fence=now_us() + 10**6)
    with pytest.raises(StaleFencingToken):
        copy.save(fence=now_us())
    assert Account.objects.get(pk=pk).balance == Decimal(5)


def test_a_new_instance_is_inserted_with_the_token_as_its_fence() -> None:
    fresh = Account(balance=Decimal(3))
    token = now_us()
    fresh.save(fence=token)
    fresh.refresh_from_db()
    assert fresh.fence == token


def test_save_force_update_of_a_deleted_row_is_refused_as_stale() -> None:
    row = account()
    copy = Account.objects.get(pk=row.pk)
    Account.objects.filter(pk=row.pk).delete()
    with pytest.raises(StaleFencingToken, match="was deleted after this instance was read"):
        copy.save(fence=now_us(), force_update=True)
    assert not Account.objects.filter(pk=row.pk).exists()


@pytest.mark.parametrize(
    "token",
    [0, -1, MAX_TOKEN, MAX_TOKEN + 1, 2**64, 10**30, "now+2h", "now+61min"],
    ids=repr,
)
def test_huge_or_bad_tokens_refused_before_any_query(
    token: object, django_assert_num_queries: Callable[[int], AbstractContextManager[object]]
) -> None:
    row = account()
    if token == "now+2h":
        token = now_us() + 2 * 3600 * 10**6
    elif token == "now+61min":
        token = now_us() + 61 * 60 * 10**6
    with django_assert_num_queries(0):
        with pytest.raises(ValueError, match=REFUSED_TOKEN):
            fenced_update(Account.objects.filter(pk=row.pk), token, balance=Decimal(0))
        with pytest.raises(ValueError, match=REFUSED_TOKEN):
            row.save(fence=token)
    row.refresh_from_db()
    assert (row.balance, row.fence) == (Decimal(100), 0)


@pytest.mark.parametrize(
    "token", [True, False, 5.0, Decimal(5), Fraction(5), "5", b"5", [5]], ids=repr
)
def test_tokens_that_are_not_ints_are_type_errors(token: object) -> None:
    row = account()
    with pytest.raises(TypeError):
        fenced_update(Account.objects.filter(pk=row.pk), token, balance=Decimal(0))
    with pytest.raises(TypeError):
        row.save(fence=token)
    row.refresh_from_db()
    assert row.fence == 0


def test_a_token_half_an_hour_ahead_is_accepted_and_refuses_current_holds() -> None:
    row = account()
    ahead = now_us() + 1800 * 10**6
    assert fenced_update(Account.objects.filter(pk=row.pk), ahead, balance=Decimal(1)) == 1
    held = lock("fence-ahead")
    assert held.acquire()
    with pytest.raises(StaleFencingToken):
        fenced_update(Account.objects.filter(pk=row.pk), held, balance=Decimal(2))
    held.release()


def test_fenced_update_refuses_the_fence_in_values_and_f_expressions() -> None:
    row = account()
    for values in ({"fence": 1}, {"fence": F("fence") + 1}):
        with pytest.raises(TypeError):
            fenced_update(Account.objects.filter(pk=row.pk), now_us(), **values)


def test_a_read_hold_or_a_released_hold_cannot_fence_a_save_a_permit_can() -> None:
    row = account()
    reader = rwlock("fence-r").read()
    assert reader.acquire()
    with pytest.raises(ValueError, match="cannot fence a write"):
        row.save(fence=reader)
    released = lock("fence-l")
    assert released.acquire()
    released.release()
    with pytest.raises(LockNotOwned):
        row.save(fence=released)
    permit = semaphore("fence-s", 2)
    assert permit.acquire()
    row.save(fence=permit)
    row.refresh_from_db()
    assert row.fence == permit.fencing_token


def test_fenced_update_on_deleted_rows_writes_nothing_and_refuses_nothing() -> None:
    row = account()
    Account.objects.filter(pk=row.pk).delete()
    assert fenced_update(Account.objects.filter(pk=row.pk), now_us(), balance=Decimal(0)) == 0


def test_fenced_update_refuses_what_is_not_a_queryset() -> None:
    with pytest.raises(TypeError):
        fenced_update(Account.objects, now_us(), balance=Decimal(0))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        fenced_update([Account()], now_us(), balance=Decimal(0))  # type: ignore[arg-type]
