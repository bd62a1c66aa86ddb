"""A unique task's key: a lock taken when the task is enqueued, and handed through Redis to the
worker that runs it.

The enqueuing process takes the key (a lock named ``unique:<key>``) with the lease of a queued
task, sends the task, writes the task's id into the key's label and lets the hold go without
releasing it. The worker that starts the task reads the hold back (its secret and token: the
queue carries nothing of ours), takes it over with the lease of a running lock, which its
watchdog renews, and frees it when the task starts (``until="executing"``) or ends
(``until="executed"``). Whatever is lost on the way (a task revoked, expired, never picked up,
a worker killed) the key ends by its lease.
"""

from __future__ import annotations

import contextvars
import logging
import re
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote, unquote

from django_redis_lock.core.attempts import Acquired
from django_redis_lock.core.drivers import adrive, drive
from django_redis_lock.core.lock import Lock
from django_redis_lock.core.steps import Call, Flow
from django_redis_lock.exceptions import AlreadyQueued, LockError
from django_redis_lock.locked.naming import NameSpec, Naming
from django_redis_lock.runtime import runtime
from django_redis_lock.scripts import decode_read
from django_redis_lock.validation import MAX_LABEL_LENGTH, shorten

logger = logging.getLogger("django_redis_lock")

R = TypeVar("R")

#: What ``until`` takes: the key is freed when a worker starts the task, or when it ends.
UNTIL = ("executing", "executed")
#: What ``on_duplicate`` takes: the handle of the task holding the key, or AlreadyQueued.
ON_DUPLICATE = ("return", "raise")
#: The lease of a queued task's key when @unique is given no timeout: one hour in the queue.
QUEUED_TIMEOUT = 3600.0
#: The start of every unique task key's lock name.
PREFIX = "unique:"
#: How long a duplicate enqueue, or a starting worker, waits for the enqueue that took a key to
#: write which task holds it (Django's task ids are known only once the task is queued).
ID_WAIT = 2.0
_ID_POLL = 0.02

# The end of a unique key's label: its task's state, and its id once known (as id_in_label
# writes it: no space in it, so the last " as " is the one before the id).
_STATE = re.compile(r" (queued|running)(?: as (\S+))?$")
#: A label's part before its task's state is cut to this many characters at least, when a task
#: id too long to fit makes the whole longer than MAX_LABEL_LENGTH (the id is kept whole).
MIN_SHOWN_LABEL = 64
# The key an enqueue holds while it sends its task: a backend that runs the task as it is
# enqueued (Celery's eager mode, Django's immediate backend) starts it in the enqueue's own
# context, and takes over that very object.
_enqueuing: contextvars.ContextVar[TaskKey | None] = contextvars.ContextVar(
    "django_redis_lock_enqueuing", default=None
)


@dataclass(frozen=True)
class UniqueSpec:
    """The options of one @unique task."""

    key: NameSpec
    until: str
    on_duplicate: str
    #: The lease of the key while the task is queued (seconds).
    timeout: float
    using: str | tuple[str, ...] | None
    #: Shown to operators before the task's state: the task's dotted name unless given.
    label: str | None

    def naming(self, signature: Any, where: str) -> Naming:
        return Naming(self.key, signature, where)


def state_label(label: str, state: str, task_id: str | None) -> str:
    """``label`` with the task's state (and id) after it, cut to fit MAX_LABEL_LENGTH.

    The id is written whole, whatever its length and characters (a duplicate enqueue reads it
    back): whitespace, ``%`` and what cannot be printed as %-escapes; an id too long to fit
    beside MIN_SHOWN_LABEL characters of ``label`` makes the label longer than
    MAX_LABEL_LENGTH.
    """
    suffix = f" {state}" + (f" as {id_in_label(task_id)}" if task_id else "")
    return shorten(label, max(MAX_LABEL_LENGTH - len(suffix), MIN_SHOWN_LABEL)) + suffix


def id_in_label(task_id: str) -> str:
    """``task_id`` as a label carries it: one word, printable (see :func:`task_of`)."""
    return "".join(
        char if char.isprintable() and not char.isspace() and char != "%" else quote(char)
        for char in task_id
    )


def task_of(label: str) -> tuple[str | None, str | None]:
    """The state and the task id a unique key's label names (None: not named)."""
    found = _STATE.search(label)
    if not found:
        return None, None
    return found[1], None if found[2] is None else unquote(found[2])  # never raises


class Holder(NamedTuple):
    """A hold as Redis has it: what taking it over needs, and its label."""

    secret: str
    token: int
    label: str


class TaskKey(Lock):
    """The lock of a unique task's key: what a Lock does, and what passing its hold from the
    enqueuing process to the worker needs (read it back, take it over, relabel, let it go)."""

    def holder(self) -> Holder | None:
        """The hold of this key as Redis has it; None when the key is free."""
        return drive(self._backend, self._holder(), self.name)

    async def aholder(self) -> Holder | None:
        return await adrive(self._backend, self._holder(), self.name)

    def adopt(self, holder: Holder, label: str) -> bool:
        """Take over ``holder``'s hold, with this object's lease and ``label``; False when it
        ended meanwhile."""
        owner = runtime().thread_owner()
        return drive(self._backend, self._adopting(holder, owner, label), self.name)

    def relabel(self, label: str, lease: float | None = None) -> bool:
        """Give the hold ``label`` (and a lease of ``lease`` seconds); False when it ended."""
        owner = runtime().thread_owner()
        return drive(self._backend, self._relabeling(owner, label, lease), self.name)

    async def arelabel(self, label: str, lease: float | None = None) -> bool:
        owner = runtime().task_owner()
        return await adrive(self._backend, self._relabeling(owner, label, lease), self.name)

    def detach(self) -> None:
        """Let the hold go without releasing it: its lease (or whoever takes it over) ends it."""
        self._forget()

    @property
    def owned_here(self) -> bool:
        """Whether this object holds the key (as far as it knows: no request)."""
        return self._holding()

    def _holder(self) -> Flow[Holder | None]:
        values = decode_read((yield Call(self._keys.script("read"), (self._keys.lock,), ("",))))
        secret, token, label = values[0], values[1], values[3]
        if not secret or not isinstance(secret, str):
            return None
        try:
            number = int(token)
        except (TypeError, ValueError):
            number = 0  # a token someone else wrote: the hold can still be taken over
        return Holder(secret, number, label if isinstance(label, str) else "")

    def _adopting(self, holder: Holder, owner: str, label: str) -> Flow[bool]:
        keys = (self._keys.lock, self._keys.stats)
        args = [holder.secret, self._timeout_ms, "replace", "", owner, label]
        if not (yield Call(self._keys.script("extend"), keys, args, acked=True)):
            return False
        self.label = label
        return self._took(holder.secret, Acquired(holder.token, handed_over=False))

    def _relabeling(self, owner: str, label: str, lease: float | None) -> Flow[bool]:
        secret = self._owned_secret()
        ms = 0 if lease is None else round(lease * 1000)
        mode = "check" if lease is None else "replace"
        keys = (self._keys.lock, self._keys.stats)
        args = [secret, ms, mode, "", owner, label]
        if not (yield Call(self._keys.script("extend"), keys, args, acked=True)):
            self._lose()
            return False
        self.label = label
        return True


def duplicate_of(key: TaskKey) -> str | None:
    """The id of the task holding ``key`` (once its enqueue wrote it, within ID_WAIT)."""
    deadline = time.monotonic() + ID_WAIT
    while True:
        holder = key.holder()
        _, task_id = task_of(holder.label) if holder is not None else (None, None)
        if task_id is not None or holder is None or time.monotonic() > deadline:
            return task_id
        time.sleep(_ID_POLL)


async def aduplicate_of(key: TaskKey) -> str | None:
    """:func:`duplicate_of` for async code."""
    import asyncio

    deadline = time.monotonic() + ID_WAIT
    while True:
        holder = await key.aholder()
        _, task_id = task_of(holder.label) if holder is not None else (None, None)
        if task_id is not None or holder is None or time.monotonic() > deadline:
            return task_id
        await asyncio.sleep(_ID_POLL)


def refused(spec: UniqueSpec, name: str, task_id: str | None) -> AlreadyQueued:
    """The AlreadyQueued of a duplicate enqueue of key ``name``."""
    held_by = f"task {task_id}" if task_id else "a task whose enqueue has not said its id yet"
    return AlreadyQueued(f"The unique key {name!r} is held by {held_by}.", task_id)


def new_key(spec: UniqueSpec, name: str, label: str, *, running: bool = False) -> TaskKey:
    """The TaskKey of ``name``: the queued lease, not renewed; or, ``running``, the lock
    timeout (REDIS_LOCK["TIMEOUT"]), renewed by the watchdog while the task runs."""
    timeout = None if running else spec.timeout
    key = TaskKey(name, timeout=timeout, blocking=False, auto_renew=running, using=spec.using)
    key.label = label  # made by state_label: a long task id may take it past MAX_LABEL_LENGTH
    return key


def enqueue_once(
    spec: UniqueSpec,
    name: str,
    label: str,
    task_id: str | None,
    send: Callable[[], R],
    sent_id: Callable[[R], str],
    found: Callable[[str], R],
) -> R:
    """Take the key ``name``, then ``send()`` the task (the key given back if that fails);
    on a duplicate, ``found(id)`` of the task holding it, or AlreadyQueued."""
    for _ in range(3):  # the holder may free the key between our try and our look
        key = new_key(spec, name, state_label(label, "queued", task_id))
        if key.acquire():
            token = _enqueuing.set(key)
            try:
                result = send()
            except BaseException:
                with suppress(LockError):
                    key.release()
                raise
            finally:
                _enqueuing.reset(token)
            if key.owned_here and task_id is None:  # Django's: its id is known only now
                key.relabel(state_label(label, "queued", sent_id(result)))
            key.detach()
            return result
        holder_id = duplicate_of(key)
        if holder_id is not None or key.locked():
            if spec.on_duplicate == "raise" or holder_id is None:
                raise refused(spec, name, holder_id)
            return found(holder_id)
    raise refused(spec, name, None)


async def aenqueue_once(
    spec: UniqueSpec,
    name: str,
    label: str,
    send: Callable[[], Awaitable[R]],
    sent_id: Callable[[R], str],
    found: Callable[[str], Awaitable[R]],
) -> R:
    """:func:`enqueue_once` for async code (Django's aenqueue: the id is known once sent)."""
    for _ in range(3):
        key = new_key(spec, name, state_label(label, "queued", None))
        if await key.aacquire():
            token = _enqueuing.set(key)
            try:
                result = await send()
            except BaseException:
                with suppress(LockError):
                    await key.arelease()
                raise
            finally:
                _enqueuing.reset(token)
            if key.owned_here:
                await key.arelabel(state_label(label, "queued", sent_id(result)))
            key.detach()
            return result
        holder_id = await aduplicate_of(key)
        if holder_id is not None or await key.alocked():
            if spec.on_duplicate == "raise" or holder_id is None:
                raise refused(spec, name, holder_id)
            return await found(holder_id)
    raise refused(spec, name, None)


def started(spec: UniqueSpec, name: str, label: str, task_id: str) -> TaskKey | None:
    """A worker starts task ``task_id`` of key ``name``: take the key over (or take it, if its
    lease ended), and keep it while the task runs (``until="executed"``: returned, to be given
    to :func:`finished`) or free it now (``"executing"``). A key held by another task is left
    to it, with a warning: this run goes on without the key."""
    running = state_label(label, "running", task_id)
    own = _enqueuing.get()
    if own is not None and own.name == name and own.owned_here:  # run as it is enqueued
        if spec.until == "executing":
            free(own)
            return None
        return own if own.relabel(running) else None
    key = new_key(spec, name, running, running=True)
    deadline = time.monotonic() + ID_WAIT
    while True:
        holder = key.holder()
        holder_id = task_of(holder.label)[1] if holder is not None else None
        if holder is None or holder_id is not None or time.monotonic() > deadline:
            break
        time.sleep(_ID_POLL)  # its enqueue has yet to write the id: Django's tasks
    if holder is None:
        taken = spec.until == "executed" and key.acquire()
    elif holder_id in (task_id, None):  # queued for it, or its own earlier run (redelivered)
        taken = key.adopt(holder, running)
    else:
        taken = False
        logger.warning(
            "The unique key %r is held by task %s; task %s runs without it.",
            name,
            holder_id,
            task_id,
        )
    if taken and spec.until == "executing":
        free(key)
        return None
    return key if taken else None


def finished(key: TaskKey | None, *, retry: bool, spec: UniqueSpec, label: str) -> None:
    """The task of ``key`` ended: free the key; or, a retry was queued, keep it with the
    queued lease (no longer renewed) until a worker starts the retry."""
    if key is None:
        return
    if retry and key.owned_here:
        task_id = task_of(key.label or "")[1]
        with suppress(LockError):
            key.relabel(state_label(label, "queued", task_id), spec.timeout)
        key.detach()
        return
    free(key)


def free(key: TaskKey) -> None:
    """Release ``key``'s hold; a hold already ended (its lease, an operator) is logged."""
    try:
        key.release()
    except LockError as exc:
        logger.warning("Unique key %r: %s", key.name, exc)


def dotted(obj: Any) -> str:
    """The dotted name of a function or task, for labels and messages."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
