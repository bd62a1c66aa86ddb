"""Fenced writes on SQLite and on PostgreSQL (a server of the tests' own): a holder SIGSTOPped
past its lease wakes up and writes, and its write is refused while the holders after it lose
nothing; the read-modify-write that fencing cannot save, and the two patterns that are safe."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable
from decimal import Decimal

import pytest
from django.db import connections, models, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext, isolate_apps

from django_redis_lock import (
    FencedModelMixin,
    FenceField,
    Lock,
    LockNotOwned,
    StaleFencingToken,
    fenced_update,
    lock,
)
from testproject.models import Account
from tests.helpers import fork_child, forks_to_share_its_setup, wait_children

pytestmark = pytest.mark.slow

# The stopped holder's lease: the holders after it wait this long for the lock.
LEASE = 1.0
WITHDRAWERS, ROUNDS = 3, 3


@pytest.fixture(
    params=[
        # Committed rows (no test transaction around it): other processes see them.
        pytest.param("sqlite", marks=pytest.mark.django_db(transaction=True)),
        "postgresql",
    ]
)
def alias(request: pytest.FixtureRequest) -> str:
    """The database alias of each database in turn: the suite's SQLite, a PostgreSQL."""
    if request.param == "sqlite":
        return "default"
    return str(request.getfixturevalue("postgres_db"))


def _account(alias: str, balance: int = 100) -> Account:
    return Account.objects.using(alias).create(balance=Decimal(balance))


def _balance(alias: str, account: Account) -> Decimal:
    return Account.objects.using(alias).get(pk=account.pk).balance


def _read(fd: int, timeout: float = 30.0) -> bytes:
    """What a child wrote to the pipe ``fd``, waited for at most ``timeout`` seconds."""
    ready, _, _ = select.select([fd], [], [], timeout)
    assert ready, f"no word from the child in {timeout:g} s"
    return os.read(fd, 64)


def _stopped_holder(
    alias: str, account: Account, write: Callable[[Lock], None], *, renew: bool = False
) -> tuple[bytes, int]:
    """A child takes a lock for ``account`` (LEASE seconds), says so, and is SIGSTOPped until
    WITHDRAWERS other processes have each taken the lock ROUNDS times and written 10 off the
    account; then it wakes up and runs ``write(hold)``. What it said of its write ("refused",
    "lost" or "written"), and how many writes the withdrawers made.

    Without renewal (``renew`` False) nothing tells the holder that its lease ended: it writes
    with its stale token, and only the database can refuse. A renewing holder's watchdog may
    find the hold lost as it wakes, and then fenced_update() refuses it before any query.
    """
    name = f"fence:account:{alias}:{account.pk}"
    connections.close_all()  # the children open their own
    held_r, held_w = os.pipe()
    go_r, go_w = os.pipe()
    said_r, said_w = os.pipe()

    def stale() -> None:
        hold = lock(name, timeout=LEASE, auto_renew=renew)
        assert hold.acquire()
        os.write(held_w, b"held")
        os.read(go_r, 1)  # stopped here, until well past its lease
        try:
            write(hold)
        except StaleFencingToken:
            os.write(said_w, b"refused")
        except LockNotOwned:
            os.write(said_w, b"lost")
        else:
            os.write(said_w, b"written")

    def withdraw() -> None:
        for _ in range(ROUNDS):
            with lock(name, blocking_timeout=30) as hold:
                queryset = Account.objects.using(alias).filter(pk=account.pk)
                fenced_update(queryset, hold, balance=F("balance") - 10)

    stale_pid = fork_child(stale)
    try:
        assert _read(held_r) == b"held"
        os.kill(stale_pid, signal.SIGSTOP)  # its watchdog stops too: the lease runs out
        others = [fork_child(withdraw) for _ in range(WITHDRAWERS)]
        assert wait_children(others) == [0] * WITHDRAWERS
    finally:
        os.kill(stale_pid, signal.SIGCONT)
        os.write(go_w, b"g")
    assert wait_children([stale_pid]) == [0]
    return _read(said_r), WITHDRAWERS * ROUNDS


@forks_to_share_its_setup
@pytest.mark.parametrize("renew", [False, True], ids=["unrenewed", "renewed"])
def test_a_stopped_holder_wakes_up_and_its_write_is_refused(alias: str, renew: bool) -> None:
    account = _account(alias)

    def write(hold: Lock) -> None:
        fenced_update(
            Account.objects.using(alias).filter(pk=account.pk), hold, balance=F("balance") - 10
        )

    said, writes = _stopped_holder(alias, account, write, renew=renew)
    assert said == b"refused" if not renew else said in (b"refused", b"lost")
    assert _balance(alias, account) == Decimal(100 - 10 * writes)  # every accepted write kept


@forks_to_share_its_setup
def test_the_lost_update_of_a_read_then_save_is_refused(alias: str) -> None:
    account = _account(alias)

    def write(hold: Lock) -> None:
        # What it read before it was stopped: the balance of 100 the withdrawers changed since.
        stale_copy.balance -= 10
        stale_copy.save(fence=hold)

    stale_copy = Account.objects.using(alias).get(pk=account.pk)
    said, writes = _stopped_holder(alias, account, write)
    assert said == b"refused"
    # Unfenced, its save would have set 90 and undone the withdrawers' writes.
    assert _balance(alias, account) == Decimal(100 - 10 * writes)


def _late_holder_pair(name: str) -> tuple[Lock, Lock]:
    """A holder whose lease ended, and the next holder: two holds of ``name`` at once."""
    stale = lock(name, timeout=0.05, auto_renew=False)
    stale.acquire()
    later = lock(name, blocking_timeout=10)
    assert later.acquire()
    assert stale.fencing_token is not None
    assert later.fencing_token is not None
    assert stale.fencing_token < later.fencing_token
    return stale, later


def test_read_modify_write_loses_an_update_that_fencing_cannot_see(alias: str) -> None:
    """The trap the docs show: both read, the stale holder writes first (its token is still
    the newest the row saw), the later holder writes what it computed from its old read."""
    account = _account(alias)
    stale, later = _late_holder_pair(f"fence:trap:{alias}")
    stale_copy = Account.objects.using(alias).get(pk=account.pk)
    later_copy = Account.objects.using(alias).get(pk=account.pk)
    stale_copy.balance -= 10
    stale_copy.save(fence=stale)  # accepted: no later token has reached the row yet
    later_copy.balance += 50
    later_copy.save(fence=later)  # accepted, and the withdrawal of 10 is gone
    assert _balance(alias, account) == Decimal(150)
    later.release()


def test_f_expressions_in_the_fenced_update_lose_nothing(alias: str) -> None:
    account = _account(alias)
    stale, later = _late_holder_pair(f"fence:f:{alias}")
    one = Account.objects.using(alias).filter(pk=account.pk)
    fenced_update(one, stale, balance=F("balance") - 10)  # first: accepted
    fenced_update(one, later, balance=F("balance") + 50)
    with pytest.raises(StaleFencingToken):
        fenced_update(one, stale, balance=F("balance") - 10)  # after the later holder: refused
    assert _balance(alias, account) == Decimal(140)
    later.release()


def test_a_fence_checked_under_select_for_update_loses_nothing(alias: str) -> None:
    account = _account(alias)
    stale, later = _late_holder_pair(f"fence:sfu:{alias}")
    for hold, change in ((stale, -10), (later, 50)):
        with transaction.atomic(using=alias):
            row = Account.objects.using(alias).select_for_update().get(pk=account.pk)
            row.balance += change
            row.save(fence=hold)
    with transaction.atomic(using=alias):
        row = Account.objects.using(alias).select_for_update().get(pk=account.pk)
        row.balance -= 10
        with pytest.raises(StaleFencingToken):
            row.save(fence=stale)
        # The refusal rolled back to its savepoint: the transaction goes on.
        assert Account.objects.using(alias).filter(pk=account.pk).exists()
    assert _balance(alias, account) == Decimal(140)
    later.release()


@isolate_apps("testproject")
def test_a_multi_table_model_is_locked_then_fenced(alias: str) -> None:
    """Django updates a model on several tables one table at a time, by primary key: the rows
    are selected for update first (where the database locks rows), then written, or refused."""

    class Base(FencedModelMixin, models.Model):  # noqa: DJ008
        fence = FenceField()
        Meta = type("Meta", (), {"app_label": "testproject"})

    class Child(Base):  # noqa: DJ008
        extra = models.IntegerField(default=0)
        objects: models.Manager[Child] = models.Manager()  # declared: made inside a test
        Meta = type("Meta", (), {"app_label": "testproject"})

    connection = connections[alias]
    with connection.schema_editor() as editor:
        editor.create_model(Base)
        editor.create_model(Child)
    try:
        row = Child.objects.using(alias).create(extra=1)
        one = Child.objects.using(alias).filter(pk=row.pk)
        with CaptureQueriesContext(connection) as queries:
            assert fenced_update(one, 5, extra=2) == 1
        if connection.features.has_select_for_update:
            assert any("FOR UPDATE" in query["sql"] for query in queries.captured_queries)
        with pytest.raises(StaleFencingToken):
            fenced_update(one, 4, extra=3)
        assert [(each.extra, each.fence) for each in one] == [(2, 5)]
    finally:
        with connection.schema_editor() as editor:
            editor.delete_model(Child)
            editor.delete_model(Base)


def test_a_bulk_update_that_writes_the_fence_is_refused(alias: str) -> None:
    """bulk_update() writes each instance's fence as it read it: older than a later holder's,
    it would set the row's fence back and let the stale holder in again."""
    account = _account(alias)
    stale_copy = Account.objects.using(alias).get(pk=account.pk)  # fence 0, in memory
    one = Account.objects.using(alias).filter(pk=account.pk)
    stale, later = _late_holder_pair(f"fence:bulk:{alias}")
    fenced_update(one, later, balance=F("balance") + 50)
    stale_copy.balance -= 10
    for fields in (["balance", "fence"], ("fence",), (name for name in ["balance", "fence"])):
        with pytest.raises(TypeError, match="fence"):
            Account.objects.using(alias).bulk_update([stale_copy], fields)
    assert [(each.balance, each.fence) for each in one.all()] == [
        (Decimal(150), later.fencing_token)
    ]
    with pytest.raises(StaleFencingToken):
        fenced_update(one, stale, balance=F("balance") - 10)  # the row still refuses it
    # Without the fence, a bulk_update is Django's, as a save without one.
    assert Account.objects.using(alias).bulk_update([stale_copy], ["balance"]) == 1
    assert [(each.balance, each.fence) for each in one.all()] == [
        (Decimal(90), later.fencing_token)
    ]
    later.release()


def test_a_stale_save_does_not_bring_a_deleted_row_back(alias: str) -> None:
    account = _account(alias)
    stale_copy = Account.objects.using(alias).get(pk=account.pk)
    stale, later = _late_holder_pair(f"fence:deleted:{alias}")
    Account.objects.using(alias).filter(pk=account.pk).delete()  # the later holder's write
    stale_copy.balance -= 10
    with pytest.raises(StaleFencingToken, match="deleted") as refused:
        stale_copy.save(fence=stale)
    assert (refused.value.rows, refused.value.fence) == ([account.pk], None)
    assert stale_copy.fence == 0  # the instance keeps the fence it had
    assert not Account.objects.using(alias).filter(pk=account.pk).exists()
    # A new instance is inserted with the token, as before.
    fresh = Account(balance=Decimal(1))
    fresh.save(using=alias, fence=later)
    assert Account.objects.using(alias).get(pk=fresh.pk).fence == later.fencing_token
    later.release()
