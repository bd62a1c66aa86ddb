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
import hashlib
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

from django_redis_lock import metrics
from django_redis_lock.core.lock import Lock
from django_redis_lock.exceptions import AlreadyQueued, LockError, Skipped
from django_redis_lock.locked.naming import NameSpec, Naming
from django_redis_lock.ops.records import UNIQUE_PREFIX
from django_redis_lock.validation import (
    MAX_LABEL_LENGTH,
    MAX_NAME_LENGTH,
    shorten,
)

logger = logging.getLogger("django_redis_lock")

#: What ``until`` takes: the key is freed when a worker starts the task, or when it ends, or
#: lives its window from the first enqueue whatever the task does (a throttle).
UNTIL = ("executing", "executed", "window")
#: What ``on_duplicate`` takes: the handle of the task holding the key, AlreadyQueued, or the
#: new task in place of the one queued (a debounce: the queued one will not run).
ON_DUPLICATE = ("return", "raise", "replace")
#: What ``scope`` takes: the task's name is part of the key's name, or not.
SCOPES = ("task", "global")
#: The lease of a queued task's key when @unique is given no timeout: one hour in the queue.
QUEUED_TIMEOUT = 3600.0
#: The start of every unique task key's lock name.
PREFIX = UNIQUE_PREFIX
#: The start of a sending lock's name (see :func:`sending_lock`).
SENDING = "unique-sending:"
#: The start of a run gate's name (see :func:`run_gate`).
RUN_GATE = "unique-running:"
#: How long an enqueue, or a starting worker, waits at most for the enqueue that sends the task
#: of its key to write the task's id (Django's tasks: the backend chooses it as it queues).
ID_WAIT = 2.0
#: The states a unique key's label ends with, before the task's id.
STATES = ("queued", "running", "done")
#: A label's part before its task's state is cut to this many characters at least, when a task
#: id too long to fit makes the whole longer than MAX_LABEL_LENGTH (the id is kept whole).
MIN_SHOWN_LABEL = 64
#: What a take-over accepts: a test of the holder's label (None: any holder).
Accept = Callable[[str], bool] | None
#: The enqueue under way in this context: a backend that runs the task as it is enqueued
#: (Celery's eager mode, Django's immediate backend) starts it in the enqueue's own context,
#: and takes over that very key.
under_way: contextvars.ContextVar[Enqueuing | None] = contextvars.ContextVar(
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
    #: ``until="window"``: how long the key lives from its enqueue (seconds).
    window: float | None = None
    #: For how long after a success a duplicate gets that run (seconds; None: not at all).
    keep_after_success: float | None = None
    scope: str = "task"
    #: The task's name (its metrics' ``task`` label), set once the task is known.
    task: str = ""

    def naming(self, signature: Any, where: str) -> Naming:
        return Naming(self.key, signature, where)

    @property
    def lease(self) -> float:
        """The key's lease from its enqueue: the window of a throttle, else the queued one."""
        return self.window if self.window is not None else self.timeout

    @property
    def mode(self) -> str:
        """What operators see of the options in the key's label ("" for the defaults)."""
        parts = []
        if self.until == "window":
            parts.append(f"window {self.window:g} s")
        elif self.until == "executing":
            parts.append("until executing")
        if self.on_duplicate == "replace":
            parts.append("replace")
        if self.keep_after_success is not None:
            parts.append(f"keep {self.keep_after_success:g} s")
        return ", ".join(parts)

    def shown(self, label: str) -> str:
        """``label`` as the key's label starts: its mode first, in brackets (read back by
        :func:`~django_redis_lock.ops.records.unique_mode`), where not the defaults."""
        return f"[{self.mode}] {label}" if self.mode else label

    def key_name(self, task_name: str, key: str) -> str:
        """The lock name of ``key`` (the template filled in) for the task ``task_name``."""
        return PREFIX + (f"{task_name}:{key}" if self.scope == "task" else key)


def report(spec: UniqueSpec, outcome: str) -> None:
    """Count an enqueue's or a start's ``outcome`` in the unique task metrics."""
    metrics.unique(spec.task or "-", outcome)


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
    """The state and the task id a unique key's label names (None: not named). The label
    ends ``<state>`` or ``<state> as <id>``, the id one word (see :func:`id_in_label`)."""
    words = label.rsplit(" ", 3)
    if len(words) >= 3 and words[-2] == "as" and words[-3] in STATES:
        return words[-3], unquote(words[-1])  # never raises
    return (words[-1], None) if words[-1] in STATES else (None, None)


class TaskKey(Lock):
    """The lock of a unique task's key: a Lock, taken over from the process that enqueued
    the task through the Lock's public :meth:`~Lock.take_over`."""

    def __init__(self, spec: UniqueSpec, name: str, label: str, *, running: bool = False):
        timeout = None if running else spec.lease
        super().__init__(
            name, timeout=timeout, blocking=False, auto_renew=running, using=spec.using
        )
        self.label = label  # made by state_label: a long task id may take it past the limit
        #: The run gate a debounced task holds while it runs (see :func:`run_gate`).
        self.gate: Lock | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the key (as far as it knows: no request)."""
        return self.fencing_token is not None and not self.lost


def none(label: str) -> bool:
    """Take over no hold: a take-over that only reads the holder's label."""
    return False


def refused(spec: UniqueSpec, name: str, task_id: str | None) -> AlreadyQueued:
    """The AlreadyQueued of a duplicate enqueue of key ``name``."""
    held_by = f"task {task_id}" if task_id else "a task whose enqueue has not said its id yet"
    return AlreadyQueued(f"The unique key {name!r} is held by {held_by}.", task_id)


def _named(prefix: str, name: str) -> str:
    """The name of a helper lock of key ``name``: ``prefix`` and the key (or its digest, for a
    key at the longest a name may be)."""
    named = prefix + name[len(PREFIX) :]
    if len(named) > MAX_NAME_LENGTH:
        named = prefix + hashlib.sha256(name.encode()).hexdigest()
    return named


def run_gate(name: str, spec: UniqueSpec) -> Lock:
    """The lock a debounced task (``on_duplicate="replace"``, ``until="executed"``) holds while
    it runs: a later enqueue replaces its key, but the later task starts only once this run
    has ended (it waits on the gate, woken by its release, at most the key's queued lease;
    a worker that dies lets it go at its lease)."""
    return Lock(_named(RUN_GATE, name), blocking_timeout=spec.lease, auto_renew=True,
                using=spec.using)  # fmt: skip


def sending_lock(name: str, spec: UniqueSpec) -> Lock:
    """The lock an enqueue holds from before it takes key ``name`` until its task's id is
    written in the key, when the framework chooses the id while it sends (Django's tasks): a
    worker that finds the key without an id waits for it (woken by its release, no polling)."""
    return Lock(_named(SENDING, name), blocking_timeout=ID_WAIT, auto_renew=True, using=spec.using)


class Enqueuing(NamedTuple):
    """An enqueue under way: its key, and its sending lock (None: the task's id was known)."""

    key: TaskKey
    sending: Lock | None

    def said(self) -> None:
        """The task's id is written in the key (or will never be): let the sending lock go."""
        if self.sending is not None and self.sending.fencing_token is not None:
            free(self.sending)

    async def asaid(self) -> None:
        """:meth:`said` for async code."""
        if self.sending is not None and self.sending.fencing_token is not None:
            try:
                await self.sending.arelease()
            except LockError as exc:
                logger.warning("Unique key %r: %s", self.sending.name, exc)


def started(spec: UniqueSpec, name: str, label: str, task_id: str) -> TaskKey | None:
    """A worker starts task ``task_id`` of key ``name``: take the key over (or take it, if its
    lease ended), and keep it while the task runs (``until="executed"``: returned, to be given
    to :func:`finished`) or free it now (``"executing"``). A throttle's key (``"window"``) is
    left to its window.

    Raises :class:`Skipped` when the task must not run: its key is held by another task (a
    later enqueue replaced it, or it was redelivered while another of its key is queued or
    running), or it already succeeded (``keep_after_success``).
    """
    if spec.until == "window":
        return None
    key = _taken_at_start(spec, name, label, task_id)
    if key is None or spec.on_duplicate != "replace":
        return key
    # A debounce: the key is this task's, but the task it replaced may still run. Wait for
    # that run to end, then run only if no later enqueue replaced this task meanwhile.
    gate = run_gate(name, spec)
    if not gate.acquire():  # the run before it lasted longer than the queued lease
        raise skipped(spec, name, task_id, None, "the run before it did not end in time")
    running = key.label or ""
    found = TaskKey(spec, name, running).take_over(running, none)[0]  # a read
    if found != running:
        free(gate)
        raise skipped(spec, name, task_id, found)
    key.gate = gate
    return key


def _taken_at_start(spec: UniqueSpec, name: str, label: str, task_id: str) -> TaskKey | None:
    """:func:`started`'s take-over of the key, once the run before it (a debounce) ended."""
    running = state_label(label, "running", task_id)
    own = under_way.get()
    if own is not None and own.key.name == name and own.key.held:  # run as it is enqueued
        key: TaskKey | None = own.key
        if spec.until == "executing":
            free(own.key)
            key = None
        elif not own.key.take_over(running)[1]:
            key = None
        own.said()  # the id is written (or the key freed): nobody need wait for it
        return key
    key = TaskKey(spec, name, running, running=True)

    def mine(found: str) -> bool:  # queued for it, or its own earlier run (redelivered)
        state, holder = task_of(found)
        return holder == task_id and state != "done"

    def ours(found: str) -> bool:  # or queued by an enqueue that has not said its id
        state, holder = task_of(found)
        return holder in (task_id, None) and state != "done"

    found, taken = key.take_over(running, mine)
    if found is not None and not taken and task_of(found)[1] is None:
        # Its enqueue has yet to write the id (Django's tasks): wait for it to let go of its
        # sending lock, woken by the release.
        sending = sending_lock(name, spec)
        if sending.acquire():
            free(sending)
        found, taken = key.take_over(running, ours)
    if found is None:
        taken = spec.until == "executing" or key.acquire()
        if not taken:  # a new enqueue took the key meanwhile: its task runs, not this one
            found = key.take_over(running, none)[0]
    if not taken:
        raise skipped(spec, name, task_id, found)
    if spec.until == "executing" and key.held:
        free(key)
        return None
    return key if key.held else None


def skipped(
    spec: UniqueSpec, name: str, task_id: str, found: str | None, why: str | None = None
) -> Skipped:
    """The Skipped of task ``task_id``, which found key ``name`` held as ``found`` (or could
    not run for ``why``)."""
    state, holder = task_of(found or "")
    report(spec, "skipped")
    if why is None:
        if state == "done" and holder == task_id:
            why = "it already succeeded"
        elif spec.on_duplicate == "replace" and state == "queued":
            why = f"a later enqueue replaced it with task {holder}"
        else:
            why = f"the key is held by task {holder}" if holder else "the key is held by another"
    logger.info("Unique task %s (key %r) does not run: %s.", task_id, name, why)
    return Skipped(f"Task {task_id} did not run: {why} (unique key {name!r}).", holder)


def finished(
    key: TaskKey | None, *, retry: bool, spec: UniqueSpec, label: str, success: bool = False
) -> None:
    """The task of ``key`` ended: free the key; or, a retry was queued, keep it with the
    queued lease until a worker starts the retry (``key``, dropped, is renewed no more); or it
    succeeded with ``keep_after_success``: keep it that long, its label saying ``done``.
    A key a later enqueue took over (``on_duplicate="replace"``) is left to that one, whose
    task may start now (the run gate is let go)."""
    if key is None:
        return
    try:
        _ended(key, retry=retry, spec=spec, label=label, success=success)
    finally:
        if key.gate is not None:
            free(key.gate)
            key.gate = None


def _ended(key: TaskKey, *, retry: bool, spec: UniqueSpec, label: str, success: bool) -> None:
    """:func:`finished`'s handling of the key."""
    task_id = task_of(key.label or "")[1]
    if retry and key.held:
        with suppress(LockError):
            key.take_over(state_label(label, "queued", task_id), lease=spec.timeout)
        return
    if spec.on_duplicate == "replace":  # read what the key says now: still this task's?
        running = key.label or ""
        fresh = TaskKey(spec, key.name, running)
        if not fresh.take_over(running, lambda found: found == running)[1]:
            return  # replaced while it ran (or lost): the key is the later task's
        key = fresh
    if success and spec.keep_after_success is not None and key.held:
        with suppress(LockError):
            key.take_over(state_label(label, "done", task_id), lease=spec.keep_after_success)
            return
    free(key)


def free(key: Lock) -> None:
    """Release ``key``'s hold; a hold already ended (its lease, an operator) is logged."""
    try:
        key.release()
    except LockError as exc:
        logger.warning("Unique key %r: %s", key.name, exc)


def dotted(obj: Any) -> str:
    """The dotted name of a function or task, for labels and messages."""
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
