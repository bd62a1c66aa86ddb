"""Fenced writes: one conditional ``UPDATE`` per write, so a check and a write never race.

``UPDATE ... SET ..., fence = <token> WHERE <filter> AND fence <= <token>``: a row accepts a
token at least the last it accepted (the hold's own second write passes), and refuses an older
one. When the filter matched a row that the fence refused, the write is rolled back whole and
:class:`StaleFencingToken` names the lock, the token and the rows.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.db import models, router, transaction

from django_redis_lock.core.lock import Lock
from django_redis_lock.core.shared import SharedLock
from django_redis_lock.exceptions import LockNotOwned, StaleFencingToken
from django_redis_lock.fencing.fields import fence_field_of, fence_fields

if TYPE_CHECKING:
    from django.db.models.query import QuerySet

_M = TypeVar("_M", bound=models.Model)

# A token is stored in a signed 64-bit column.
MAX_TOKEN = 2**63 - 1
# How far a bare token may lead this host's clock, in microseconds. A lock's tokens follow the
# Redis server's clock in microseconds: a row that accepted a token far ahead of it would
# refuse every hold's until the clock caught up (2**63 - 1: for good). An hour allows for
# another host's clock.
MAX_TOKEN_LEAD_US = 3600 * 10**6
# How many refused rows an error names.
NAMED_ROWS = 5


class Fence:
    """A token to fence writes with, and the lock it came from (None: a bare token)."""

    __slots__ = ("lock", "token")

    def __init__(self, token: int, lock: str | None) -> None:
        self.token, self.lock = token, lock

    def describe(self) -> str:
        held = f" of the lock {self.lock!r}" if self.lock is not None else ""
        return f"fencing token {self.token}{held}"


def fence_of(lock_or_token: object) -> Fence:
    """The fence of a held Lock (a semaphore's place or a write hold too) or of an int token.

    Refused before any query: a Lock that holds nothing or whose hold was found lost
    (LockNotOwned), a read hold (ValueError: readers hold side by side), anything else
    (TypeError). A leadership fences with its epoch: its ``lock``.
    """
    if not isinstance(lock_or_token, Lock) and isinstance(getattr(lock_or_token, "lock", 0), Lock):
        lock_or_token = lock_or_token.lock  # type: ignore[attr-defined]  # a Leadership
    if isinstance(lock_or_token, bool) or not isinstance(lock_or_token, (Lock, numbers.Integral)):
        raise TypeError(
            "A fenced write needs a held Lock (or a semaphore's place, or a write hold) or an "
            f"int fencing token, not {type(lock_or_token).__name__}"
            + (": inside @locked code, current_lock() is the hold" if lock_or_token is None else "")
            + "."
        )
    if isinstance(lock_or_token, numbers.Integral):
        token = int(lock_or_token)
        if not 0 < token <= MAX_TOKEN:
            raise ValueError(f"A fencing token is an integer from 1 to {MAX_TOKEN}, not {token}.")
        ahead = time.time_ns() // 1000 + MAX_TOKEN_LEAD_US
        if token > ahead:
            raise ValueError(
                f"A fencing token is an integer from 1 to {ahead}, not {token}: a lock's tokens "
                "follow the Redis server's clock in microseconds, and a row that accepted one "
                "more than an hour ahead of this host's clock would refuse every hold's token."
            )
        return Fence(token, None)
    held = lock_or_token
    if isinstance(held, SharedLock) and held.kind == "r":
        raise ValueError(
            f"The read hold of {held.name!r} cannot fence a write: readers hold side by side. "
            "Write under the write hold, rwlock(...).write()."
        )
    if held.lost:
        raise LockNotOwned(f"The hold of the lock {held.name!r} was lost: nothing was written.")
    if held.fencing_token is None:
        raise LockNotOwned(
            f"The lock {held.name!r} is not held by this object: acquire it before a fenced write."
        )
    return Fence(held.fencing_token, held.name)


# Later holders' fences by lock name, as the test kit's advance_fence() declares them.
_later_fences: dict[str, int] = {}


def declare_later_fence(lock: str, token: int) -> None:
    """Declare that a later holder of the lock named ``lock`` wrote with ``token``: a fenced
    write of an older hold of it finds every row it matches carrying that fence (written in the
    write's own transaction, so rolled back with its refusal), and raises StaleFencingToken as
    it would after that holder's real write. A public seam of the test kit's
    ``advance_fence()``; :func:`forget_later_fences` ends it. Not for production code."""
    _later_fences[lock] = max(token, _later_fences.get(lock, 0))


def forget_later_fences() -> None:
    """Forget every fence :func:`declare_later_fence` declared (the test kit's ``reset()``)."""
    _later_fences.clear()


def _later_fence(fence: Fence) -> int | None:
    """The later fence declared for ``fence``'s lock, if above ``fence``'s token."""
    later = _later_fences.get(fence.lock) if _later_fences and fence.lock else None
    return later if later is not None and later > fence.token else None


def _refused(
    fence: Fence, model: type[models.Model], rows: list[tuple[Any, int]]
) -> StaleFencingToken:
    label = model._meta.label
    pks = [pk for pk, _ in rows[:NAMED_ROWS]]
    later = rows[0][1] if rows else None
    named = ", ".join(repr(pk) for pk in pks) + (" and more" if len(rows) > NAMED_ROWS else "")
    return StaleFencingToken(
        f"The {fence.describe()} is stale: {label} pk={named} accepted token {later} from a "
        "later holder. Nothing was written.",
        lock=fence.lock,
        token=fence.token,
        model=label,
        rows=pks,
        fence=later,
    )


def _deleted(fence: Fence, model: type[models.Model], pk: Any) -> StaleFencingToken:
    # Django's save() would insert the row again: the deletion, maybe a later holder's, undone.
    label = model._meta.label
    return StaleFencingToken(
        f"The write with the {fence.describe()} is refused: {label} pk={pk!r} was deleted "
        "after this instance was read. Nothing was written.",
        lock=fence.lock,
        token=fence.token,
        model=label,
        rows=[pk],
        fence=None,
    )


def fenced_update(queryset: QuerySet[_M], lock_or_token: object, /, **values: Any) -> int:
    """Update the rows of ``queryset`` with ``values`` and the fence, if no later holder wrote
    them: how many rows were written.

    One ``UPDATE ... WHERE <filter> AND fence <= <token>``, in a transaction (a savepoint
    inside one); for a model on several tables (multi-table inheritance) the rows are selected
    for update first, as Django updates each table by primary key. When a row the filter
    matches carries a later token, nothing is written and :class:`StaleFencingToken` is
    raised. ``lock_or_token``: a held Lock, a semaphore's place, a write hold or an int token.
    Compute new values from the row (``F("balance") - 10``), not from an earlier read: the
    docs' "Fencing" page shows why.
    """
    if not isinstance(queryset, models.QuerySet):
        raise TypeError(f"fenced_update() takes a QuerySet, not {type(queryset).__name__}.")
    fence = fence_of(lock_or_token)
    field = fence_field_of(queryset.model)
    if field.name in values or field.attname in values:
        raise TypeError(f"fenced_update() sets {field.name!r} itself, to the hold's token.")
    if not values:
        raise TypeError("fenced_update() needs at least one field to write.")
    # The alias update() itself would write to: the queryset's own, else the router's.
    using = getattr(queryset, "_db", None) or router.db_for_write(queryset.model)
    with transaction.atomic(using=using):
        declared = _later_fence(fence)
        if declared is not None:  # a later holder's write, declared by the test kit
            queryset.using(using).filter(**{f"{field.name}__lt": declared}).update(
                **{field.name: declared}
            )
        if queryset.model._meta.parents:
            # A model on several tables: Django selects the rows, then updates each table by
            # primary key. Lock them first, so that no holder writes between.
            list(
                queryset.using(using)
                .filter(**{f"{field.name}__lte": fence.token})
                .select_for_update()
                .values_list("pk", flat=True)
            )
        written = (
            queryset.using(using)
            .filter(**{f"{field.name}__lte": fence.token})
            .update(**values, **{field.name: fence.token})
        )
        later = list(
            queryset.using(using)
            .filter(**{f"{field.name}__gt": fence.token})
            .order_by("pk")
            .values_list("pk", field.name)[: NAMED_ROWS + 1]
        )
        if later:
            raise _refused(fence, queryset.model, later)
    return written


class FencedQuerySet(models.QuerySet[_M]):
    """A QuerySet with :meth:`fenced_update`: ``objects = FencedQuerySet.as_manager()``."""

    def fenced_update(self, lock_or_token: object, /, **values: Any) -> int:
        """:func:`fenced_update` of this queryset."""
        return fenced_update(self, lock_or_token, **values)

    def bulk_update(
        self, objs: Iterable[_M], fields: Iterable[str], batch_size: int | None = None
    ) -> int:
        """Django's ``bulk_update()``; refused (TypeError, before any query) when ``fields``
        name the fence: each instance carries the fence it read, maybe older than the row's,
        and writing it back would let a stale holder in again. Write fenced rows with
        :meth:`fenced_update` or ``save(fence=...)``."""
        fields = list(fields)
        for field in fence_fields(self.model):
            if field.name in fields or field.attname in fields:
                raise TypeError(
                    f"bulk_update() cannot write {self.model._meta.label}.{field.name}: it "
                    "would write back the fence each instance read, maybe older than the "
                    "row's. Leave it out, and write fenced rows with fenced_update() or "
                    "save(fence=...)."
                )
        return super().bulk_update(objs, fields, batch_size)


class FencedModelMixin:
    """``save(fence=lock_or_token)`` for a model with a :class:`FenceField`: the ``UPDATE``
    that saves the row also checks its fence, so a later holder's write is never overwritten.

    ``class Account(FencedModelMixin, models.Model)``. Without ``fence`` a save is Django's.
    A row that does not exist yet is inserted with the token as its fence; the row of an
    instance read from the database that was deleted since is not inserted again (a
    StaleFencingToken whose ``fence`` is None).
    """

    _fence_now: Fence | None = None

    @property
    def _fenced_model(self) -> type[models.Model]:
        return cast("type[models.Model]", type(self))  # a mixin of Model subclasses only

    def save(self, *args: Any, fence: object = None, **kwargs: Any) -> None:
        """Django's ``save()``; with ``fence``, refused (StaleFencingToken) when the row
        accepted a later token than the hold's."""
        if fence is None:
            super().save(*args, **kwargs)  # type: ignore[misc]
            return
        checked = fence_of(fence)
        field = fence_field_of(self._fenced_model)
        fields = kwargs.get("update_fields")
        if fields is not None:
            fields = list(fields)
            if not fields:
                return  # as Django's save(): an empty update_fields saves nothing
            if field.name not in fields and field.attname not in fields:
                fields.append(field.name)  # the row takes the token too
            kwargs["update_fields"] = fields
        before = getattr(self, field.attname)
        setattr(self, field.attname, checked.token)
        self._fence_now = checked
        # save(force_insert, force_update, using, update_fields): Django 4.2 takes them in
        # that order too.
        using = kwargs.get("using") or (args[2] if len(args) > 2 else None)
        using = using or router.db_for_write(self._fenced_model, instance=self)
        try:
            # A savepoint: a refusal leaves the caller's transaction usable, as with
            # fenced_update() (Django marks it for rollback after any failed save).
            with transaction.atomic(using=using):
                super().save(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            setattr(self, field.attname, before)
            raise
        finally:
            del self._fence_now

    async def asave(self, *args: Any, fence: object = None, **kwargs: Any) -> None:
        """:meth:`save` for async code (in a thread, as Django's ``asave()``)."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.save)(*args, fence=fence, **kwargs)

    def _do_update(
        self,
        base_qs: QuerySet[Any],
        using: str | None,
        pk_val: Any,
        values: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        # Django's save() updates each table of the model (a parent's too) through here; the
        # one with the fence column gets the fence in its WHERE.
        update = super()._do_update  # type: ignore[misc]
        fence = self._fence_now
        fields = fence_fields(self._fenced_model)  # one, unless E014 says otherwise
        field = fields[0] if len(fields) == 1 else None
        if field is None or field not in base_qs.model._meta.local_concrete_fields:
            return update(base_qs, using, pk_val, values, *args, **kwargs)
        if fence is None:
            # A save without a fence leaves the column as it is: the value in memory may be
            # older than the row's, and writing it back would let a stale holder in again.
            values = [value for value in values if value[0] is not field]
            return update(base_qs, using, pk_val, values, *args, **kwargs)
        declared = _later_fence(fence)
        if declared is not None:  # a later holder's write, declared by the test kit
            base_qs.filter(pk=pk_val, **{f"{field.name}__lt": declared}).update(
                **{field.name: declared}
            )
        fenced = base_qs.filter(**{f"{field.name}__lte": fence.token})
        updated = update(fenced, using, pk_val, values, *args, **kwargs)
        if not updated:
            later = list(
                base_qs.filter(pk=pk_val, **{f"{field.name}__gt": fence.token}).values_list(
                    "pk", field.name
                )
            )
            if later:
                raise _refused(fence, base_qs.model, later)
            # Read from the database (Django documents Model._state.adding):
            if not cast("models.Model", self)._state.adding:  # noqa: SLF001  Django's own API
                raise _deleted(fence, base_qs.model, pk_val)
        return updated
