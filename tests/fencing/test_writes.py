"""Fenced writes through the ORM on SQLite: fenced_update, save(fence=...), the refusals that
come before any query, current_lock() inside @locked code, and the model check (E014)."""

from __future__ import annotations

import asyncio
import time
from decimal import Decimal
from typing import Any

import pytest
from django.db import models, transaction
from django.db.models import F
from django.test.utils import isolate_apps

from django_redis_lock import (
    FencedModelMixin,
    FenceField,
    Lock,
    LockNotOwned,
    MultiLock,
    StaleFencingToken,
    current_lock,
    fenced_update,
    lock,
    locked,
    rwlock,
    semaphore,
)
from django_redis_lock.checks.fencing import fence_errors
from testproject.models import Account
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db


def _account(balance: int = 100, fence: int = 0) -> Account:
    return Account.objects.create(balance=Decimal(balance), fence=fence)


def _row(account: Account) -> tuple[Decimal, int]:
    account.refresh_from_db()
    return account.balance, account.fence


def test_a_held_lock_writes_and_leaves_its_token() -> None:
    account = _account()
    with lock("fence:write") as held:
        written = fenced_update(
            Account.objects.filter(pk=account.pk), held, balance=F("balance") - 10
        )
        assert held.fencing_token is not None
        assert written == 1
        assert _row(account) == (Decimal(90), held.fencing_token)
        # The hold's second write to the row passes: the row accepted this very token.
        assert fenced_update(Account.objects.filter(pk=account.pk), held, balance=F("balance") - 5)
    assert _row(account)[0] == Decimal(85)


def test_a_stale_token_is_refused_and_names_lock_token_and_row() -> None:
    account = _account()
    with lock("fence:stale") as later:
        token = later.fencing_token
        assert token is not None
        fenced_update(Account.objects.filter(pk=account.pk), later, balance=F("balance") - 1)
    with pytest.raises(StaleFencingToken) as refused:
        fenced_update(Account.objects.filter(pk=account.pk), token - 1, balance=F("balance") - 50)
    error = refused.value
    assert (error.lock, error.token, error.model, error.rows, error.fence) == (
        None,
        token - 1,
        "testproject.Account",
        [account.pk],
        token,
    )
    assert f"pk={account.pk}" in str(error)
    assert str(token - 1) in str(error)
    assert _row(account) == (Decimal(99), token)  # nothing of the stale write


def test_the_error_names_the_lock_of_a_stale_hold() -> None:
    account = _account()
    stale = lock("fence:named")
    stale.acquire()
    assert stale.fencing_token is not None
    # A later holder wrote the row (as after this hold's lease ended).
    fenced_update(Account.objects.filter(pk=account.pk), stale.fencing_token + 1, balance=1)
    with pytest.raises(StaleFencingToken, match="'fence:named'") as refused:
        fenced_update(Account.objects.filter(pk=account.pk), stale, balance=2)
    stale.release()
    assert refused.value.lock == "fence:named"
    assert _row(account) == (Decimal(1), refused.value.fence)


def test_one_refused_row_refuses_the_whole_update() -> None:
    fresh, fenced = _account(), _account(fence=10**15)
    with pytest.raises(StaleFencingToken) as refused:
        fenced_update(Account.objects.all(), 10**15 - 1, balance=F("balance") + 1)
    assert refused.value.rows == [fenced.pk]
    assert _row(fresh) == (Decimal(100), 0)
    assert _row(fenced) == (Decimal(100), 10**15)


def test_a_filter_that_matches_nothing_writes_nothing_and_refuses_nothing() -> None:
    _account(fence=50)
    assert fenced_update(Account.objects.filter(pk=-1), 10, balance=0) == 0


def test_refusals_come_before_any_query(django_assert_num_queries: Any) -> None:
    queryset = Account.objects.all()
    readers = rwlock("fence:rw")
    with django_assert_num_queries(0):
        with pytest.raises(LockNotOwned, match="acquire it"):
            fenced_update(queryset, lock("fence:unheld"), balance=1)
        with pytest.raises(TypeError, match="current_lock"):
            fenced_update(queryset, None, balance=1)
        for wrong in (True, "12", 1.5, readers):
            with pytest.raises(TypeError):
                fenced_update(queryset, wrong, balance=1)
        for wrong_token in (0, -3, 2**63):
            with pytest.raises(ValueError, match="from 1 to"):
                fenced_update(queryset, wrong_token, balance=1)
        with pytest.raises(TypeError, match="'fence' itself"):
            fenced_update(queryset, 5, fence=7)
        with pytest.raises(TypeError, match="at least one field"):
            fenced_update(queryset, 5)
        with pytest.raises(TypeError, match="QuerySet"):
            fenced_update(Account.objects, 5, balance=1)  # type: ignore[arg-type]
        with readers.read() as reading, pytest.raises(ValueError, match="write hold"):
            fenced_update(queryset, reading, balance=1)


def test_a_lost_hold_is_refused_before_any_query(django_assert_num_queries: Any) -> None:
    held = lock("fence:lost", timeout=0.05, auto_renew=False)
    held.acquire()
    wait_until(lambda: not held.owned())  # its lease ended: owned() finds the hold lost
    assert held.lost
    with django_assert_num_queries(0), pytest.raises(LockNotOwned, match="lost"):
        fenced_update(Account.objects.all(), held, balance=1)


def test_a_model_without_one_fence_field_is_refused() -> None:
    from django.contrib.auth.models import Group

    with pytest.raises(TypeError, match=r"auth\.Group has none"):
        fenced_update(Group.objects.all(), 5, name="x")


def test_semaphore_places_and_write_holds_fence_writes() -> None:
    account = _account()
    with semaphore("fence:sem", 2) as place:
        assert fenced_update(Account.objects.filter(pk=account.pk), place, balance=1) == 1
    with rwlock("fence:rwl").write() as writing:
        assert fenced_update(Account.objects.filter(pk=account.pk), writing, balance=2) == 1
        assert _row(account) == (Decimal(2), writing.fencing_token)


def test_save_with_a_fence_updates_inserts_and_refuses() -> None:
    with lock("fence:save") as held:
        account = Account(balance=Decimal(7))
        account.save(fence=held)  # a new row: inserted with the token
        assert _row(account) == (Decimal(7), held.fencing_token)
        account.balance = Decimal(8)
        account.save(fence=held)
        token = held.fencing_token
        assert _row(account) == (Decimal(8), token)
    stale = Account.objects.get(pk=account.pk)
    Account.objects.filter(pk=account.pk).update(fence=F("fence") + 1)  # a later holder wrote
    stale.balance = Decimal(99)
    with pytest.raises(StaleFencingToken) as refused:
        stale.save(fence=token)
    assert refused.value.rows == [account.pk]
    assert stale.fence == _row(account)[1] - 1  # the instance keeps the fence it had
    assert _row(account)[0] == Decimal(8)
    # update_fields without the fence: the row takes the token all the same.
    later_token = _row(account)[1] + 1
    stale.balance = Decimal(9)
    stale.save(fence=later_token, update_fields=["balance"])
    assert _row(account) == (Decimal(9), later_token)
    stale.balance = Decimal(99)
    stale.save()  # without a fence, a save is Django's
    assert _row(account)[0] == Decimal(99)


def test_save_under_select_for_update_reads_and_writes_safely() -> None:
    account = _account()
    with lock("fence:sfu") as held, transaction.atomic():
        row = Account.objects.select_for_update().get(pk=account.pk)
        row.balance -= 30
        row.save(fence=held)
        token = held.fencing_token
    assert _row(account) == (Decimal(70), token)


@pytest.mark.django_db(transaction=True)  # asave() writes from a thread of its own
def test_async_save_with_a_fence() -> None:
    account = _account()

    async def main() -> int | None:
        async with lock("fence:asave") as held:
            account.balance = Decimal(5)
            await account.asave(fence=held)
            return held.fencing_token

    token = asyncio.run(main())
    assert _row(account) == (Decimal(5), token)


def test_current_lock_is_the_hold_of_locked_code() -> None:
    account = _account()
    seen: list[tuple[str, int | None]] = []  # the name and token of the lock held inside

    @locked("fence:current:{pk}")
    def withdraw(pk: int) -> int:
        held = current_lock()
        assert held is not None
        seen.append((held.name, held.fencing_token))
        return fenced_update(Account.objects.filter(pk=pk), held, balance=F("balance") - 1)

    @locked("fence:current:async")
    async def look() -> Lock | MultiLock | None:
        await asyncio.sleep(0)
        return current_lock()

    assert current_lock() is None
    assert withdraw(account.pk) == 1
    [(name, token)] = seen
    assert name == f"fence:current:{account.pk}"
    assert _row(account) == (Decimal(99), token)
    inner = asyncio.run(look())
    assert inner is not None
    assert inner.name == "fence:current:async"
    assert current_lock() is None


def test_fence_field_defaults_stay_out_of_migrations() -> None:
    assert FenceField().deconstruct()[3] == {}
    assert FenceField(default=5, editable=True).deconstruct()[3] == {"default": 5, "editable": True}
    field = Account._meta.get_field("fence")
    assert (field.default, field.editable) == (0, False)


@isolate_apps("testproject")
def test_model_check_e014() -> None:
    class Fine(FencedModelMixin, models.Model):  # noqa: DJ008
        fence = FenceField()
        Meta = type("Meta", (), {"app_label": "testproject"})

    class NoFence(FencedModelMixin, models.Model):  # noqa: DJ008
        Meta = type("Meta", (), {"app_label": "testproject"})

    class TwoFences(models.Model):  # noqa: DJ008
        fence = FenceField()
        other = FenceField()
        Meta = type("Meta", (), {"app_label": "testproject"})

    class Nullable(FencedModelMixin, models.Model):  # noqa: DJ008
        fence = FenceField(null=True)
        Meta = type("Meta", (), {"app_label": "testproject"})

    class Unmixed(models.Model):  # noqa: DJ008
        fence = FenceField()
        Meta = type("Meta", (), {"app_label": "testproject"})

    assert fence_errors(Fine) == []
    for model in (NoFence, TwoFences, Nullable):
        [error] = fence_errors(model)
        assert error.id == "django_redis_lock.E014"
        assert model._meta.label in error.msg
    [warning] = fence_errors(Unmixed)
    assert warning.id == "django_redis_lock.W013"


def test_a_plain_save_leaves_the_fence_as_the_row_has_it() -> None:
    account = _account()
    copy = Account.objects.get(pk=account.pk)  # fence 0, in memory
    fenced_update(Account.objects.filter(pk=account.pk), 7, balance=F("balance") - 1)
    copy.balance = Decimal(50)
    copy.save()  # a form's, the admin's: no fence
    assert _row(account) == (Decimal(50), 7)  # not set back to 0
    with pytest.raises(StaleFencingToken):
        fenced_update(Account.objects.filter(pk=account.pk), 5, balance=1)


def test_save_with_a_fence_and_update_fields(django_assert_num_queries: Any) -> None:
    account = _account()
    with django_assert_num_queries(0):
        account.save(fence=3, update_fields=[])  # saves nothing, as Django's
    account.balance = Decimal(4)
    account.save(fence=3, update_fields=(name for name in ["balance"]))  # any iterable
    assert _row(account) == (Decimal(4), 3)


def test_a_bare_token_far_ahead_of_the_clock_is_refused(
    django_assert_num_queries: Any,
) -> None:
    """A row that accepted 2**63 - 1 would refuse every token a lock can ever issue (they
    follow the Redis server's clock in microseconds): such a token is refused at the call."""
    account = _account()
    one = Account.objects.filter(pk=account.pk)
    now_us = time.time_ns() // 1000
    with django_assert_num_queries(0):
        for poison in (2**63 - 1, 2**62, now_us + 2 * 3600 * 10**6):
            with pytest.raises(ValueError, match="clock"):
                fenced_update(one, poison, balance=1)
            with pytest.raises(ValueError, match="clock"):
                account.save(fence=poison)
    assert _row(account) == (Decimal(100), 0)
    # A token a lock issued (or one a little ahead: another host's clock) passes.
    with lock("fence:clock") as held:
        assert fenced_update(one, held, balance=2) == 1
    assert fenced_update(one, now_us + 60 * 10**6, balance=3) == 1
