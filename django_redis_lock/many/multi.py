"""MultiLock: several lock names taken all or none, held and released together.

Each name keeps its own keys and its own hold, as a lock of that name would: other code that
locks one of the names waits for the set, and operators see, release and clear each name.

On one server (or a Sentinel primary) a free set is taken in one script, one round trip, and
released in one. When a name is busy and the caller waits, the names are taken one by one in
their sorted order, each waiting in its name's FIFO queue, under one deadline for the set;
what was taken is given back when the set cannot be completed. A cluster (each name in a
slot of its own) and a quorum always take the names so. Callers that ask for the same names
in any order take them in the same order, so they never deadlock.

Every operation is written once, as a flow of steps (``core/steps.py``) that the sync and the
async driver take to Redis (``core/drivers.py``).
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

from django_redis_lock import signals
from django_redis_lock.backends.base import LockKeys
from django_redis_lock.conf import lock_settings
from django_redis_lock.core.attempts import Acquired, Attempt, attempts_for
from django_redis_lock.core.drivers import adrive, drive
from django_redis_lock.core.flows import HANDED_OVER
from django_redis_lock.core.holding import Holding, blocking_wait
from django_redis_lock.core.steps import Call, Flow
from django_redis_lock.exceptions import (
    LateGrant,
    LockError,
    LockNotOwned,
    LockUnavailable,
)
from django_redis_lock.many.hold import ManyHold, extend_calls, held_with, new_secrets
from django_redis_lock.runtime import runtime
from django_redis_lock.runtime.holds import Settle
from django_redis_lock.validation import (
    extend_options,
    holding_options,
    validate_label,
    validate_names,
    validate_timeout,
    validate_using,
    wait_options,
)

logger = logging.getLogger("django_redis_lock")


class MultiLock(Holding):
    """Several lock names, taken all or none: one fencing token per name, released together,
    renewed together; ``django_redis_lock.lock_many`` is this class.

    ``names`` is a list, tuple or set of lock names; the options are a lock's (see
    :class:`~django_redis_lock.Lock`), and ``blocking_timeout`` bounds the wait for the whole
    set. An empty collection, a repeated name, a bare string or a name a lock refuses raises
    ValueError or TypeError here, before any round trip.

    ``names`` are kept sorted (``.names``); ``fencing_tokens`` maps each name to the fencing
    token of this object's hold (empty when it holds nothing); ``lost`` is True once a call or
    the watchdog found a name taken away, which loses the set.
    """

    def __init__(
        self,
        names: object,
        *,
        timeout: float | None = None,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        auto_renew: bool | None = None,
        label: str | None = None,
        using: str | list[str] | tuple[str, ...] | None = None,
    ) -> None:
        #: The names, sorted: the one order every caller takes them in.
        self.names = validate_names(names)
        #: The names as one text, for messages and signals.
        self.name = ", ".join(self.names)
        ms = None if timeout is None else validate_timeout(timeout, "timeout")
        if timeout is not None and ms is None:
            raise ValueError('lock_many() takes a timeout in seconds, not "auto".')
        self._timeout_ms = lock_settings.timeout_ms if ms is None else ms
        self._blocking, self._blocking_timeout, self._auto_renew = holding_options(
            blocking, blocking_timeout, auto_renew, lock_settings.auto_renew
        )
        self.label = validate_label(label)
        self._labels = tuple(held_with(self.label, name, self.names) for name in self.names)
        self._backend = runtime().for_locks(validate_using(using))
        self._keys: tuple[LockKeys, ...] = tuple(self._backend.keys_for(n) for n in self.names)
        #: Whether one script may take and release every name (one server, one cluster slot).
        self._one_script = self._backend.one_script(self._keys)
        # The one-script path's keys, as tuples: the backend keeps them encoded.
        self._acquire_keys = tuple(key for k in self._keys for key in (k.lock, k.queue))
        self._release_keys = tuple(key for k in self._keys for key in (k.lock, k.queue, k.waiters))
        self._secrets: tuple[str, ...] = ()
        self._hold: ManyHold | None = None
        #: The fencing token of each name of this object's hold; empty when it holds nothing.
        self.fencing_tokens: dict[str, int] = {}
        #: The highest of them (None: nothing held), as signal receivers read a lock's.
        self.fencing_token: int | None = None
        #: True once a call or the watchdog found a name of the hold taken away.
        self.lost = False
        #: The name found busy by the last acquire that did not get the set, if any.
        self.busy_name: str | None = None
        #: Seconds left of that name's holder's lease (None: not known).
        self.busy_ttl: float | None = None
        #: Seconds that holder had held it (None: not known).
        self.busy_held: float | None = None
        self._busy_told = False  # lock_busy sent during the acquire under way

    def __repr__(self) -> str:
        state = "held" if self._secrets else "not held"
        return f"<MultiLock {list(self.names)!r} {state}>"

    @property
    def timeout(self) -> float:
        """The lease of each name in seconds: how long it lives unless renewed."""
        return self._timeout_ms / 1000

    # -- the public methods: each hands its flow to a driver -------------------------------

    def acquire(self, blocking: bool | None = None, blocking_timeout: float | None = None) -> bool:
        """Take every name, or none; wait unless ``blocking`` is False; True when taken."""
        wait, limit = blocking_wait(
            f"MultiLock.acquire() of {self.name!r}",
            blocking,
            blocking_timeout,
            self._blocking,
            self._blocking_timeout,
        )
        owner = runtime().thread_owner()
        return drive(self._backend, self._acquiring(wait, limit, owner), self.name)

    async def aacquire(
        self, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """:meth:`acquire` for async code: waiting never blocks the event loop."""
        wait, limit = wait_options(
            blocking, blocking_timeout, self._blocking, self._blocking_timeout
        )
        owner = runtime().task_owner()
        return await adrive(self._backend, self._acquiring(wait, limit, owner), self.name)

    def busy_message(self) -> str:
        """What LockBusy says when ``with`` finds a name held by someone else."""
        return f"The lock {self.busy_name!r} of {self.name!r} is held by someone else."

    def hold_lost(self, secret: str, cause: str = "") -> None:
        """Called by the watchdog when a name of the hold of ``secret`` was found gone, or
        could not be renewed in time: the set is lost. Not for application code."""
        if self._hold is not None and secret == self._hold.secret:
            self._lose()

    # -- acquire ---------------------------------------------------------------------------

    def _acquiring(self, wait: bool, limit: float | None, owner: str) -> Flow[bool]:
        """One script where the names share a server and are all free; else, when waiting,
        the names one by one in sorted order under one deadline, given back on failure."""
        if self._secrets and not self.lost:
            raise LockError(f"This MultiLock object already holds {self.name!r}.")
        if self._secrets:  # a lost hold's: forgotten
            self._forget()
        self.lost, self._busy_told = False, False
        deadline = None if limit is None else time.monotonic() + limit
        secrets = new_secrets(len(self.names))
        try:
            if self._one_script:
                tokens = yield from self._in_one_script(secrets, owner)
                if tokens is not None:
                    return self._took(secrets, [Acquired(t, handed_over=False) for t in tokens])
                if not wait or limit == 0:  # one try, as a lock's blocking_timeout=0
                    return False
            taken = yield from self._one_by_one(secrets, owner, wait, deadline)
            if taken is not None and not (yield from self._renewed(secrets, taken)):
                taken = None
        except BaseException as exc:  # give back what was taken: at once if Redis answers
            self._stop_renewing()
            answers = isinstance(exc, LateGrant) or not isinstance(exc, LockUnavailable)
            yield from self._leaving(secrets, now=answers)
            raise
        if taken is None:
            return False
        return self._took(secrets, taken)

    def _in_one_script(self, secrets: tuple[str, ...], owner: str) -> Flow[list[int] | None]:
        """Every name at once (their tokens), or None with nothing taken."""
        args: list[Any] = [self._timeout_ms, owner]
        for secret, label in zip(secrets, self._labels, strict=True):
            args += (secret, label)
        sent = time.monotonic()
        reply = yield Call("many_acquire", self._acquire_keys, args, acked=True)
        if int(reply[0]) != 1:
            self._busy(int(reply[1]) - 1, int(reply[2]), int(reply[3]))
            return None
        if (time.monotonic() - sent) * 1000 >= self._timeout_ms:  # given back by the caller
            raise LateGrant(
                f"Redis granted {self.name!r}, but its reply took as long as the lease: the "
                "grants were given back, not trusted."
            )
        return [int(token) for token in reply[1:]]

    def _one_by_one(
        self, secrets: tuple[str, ...], owner: str, wait: bool, deadline: float | None
    ) -> Flow[list[Acquired] | None]:
        """Each name in sorted order, each waiting in its queue until the set's deadline;
        None when one cannot be had, what was taken given back."""
        taken: list[Acquired] = []
        attempts = attempts_for(self._backend)
        for index, keys in enumerate(self._keys):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            channel = runtime().listener(self._backend).channel_for(keys) if wait else ""
            attempt = Attempt(
                keys,
                [secrets[index], self._timeout_ms, owner, self._labels[index]],
                channel,
                wait,
                left,
                self._busy_at(index),
                self._backend.wait_replicas > 0,
                lock_settings.stats,  # a busy name is counted in its statistics
            )
            acquired = yield from attempts(attempt)
            if acquired is None or self.lost:  # give back the names taken, leave the queue
                self._stop_renewing()
                yield from self._leaving(secrets[: index + 1], now=True)
                return None
            taken.append(acquired)
            # The names taken are kept alive while the next ones are waited for.
            self._watch(self._held_secrets(secrets, taken), taken, repeat=True)
        return taken

    def _renewed(self, secrets: tuple[str, ...], taken: list[Acquired]) -> Flow[bool]:
        """Renew every name taken one by one to at least the lease from now (the first were
        taken, or last renewed, earlier than the set's watchdog entry counts from); False,
        with every name given back, when one was gone meanwhile."""
        held = self._held_secrets(secrets, taken)
        for script, keys, args in extend_calls(
            self._one_script, self._keys, held, self._timeout_ms, "atleast"
        ):
            if not int((yield Call(script, keys, args, acked=True))):
                self._stop_renewing()
                yield from self._leaving(secrets, now=True)
                return False
        return True

    def _busy_at(self, index: int) -> Callable[[int, bool, int], None]:
        """What hears the busy answers for the name at ``index`` of the set."""
        return lambda lease_left_ms, _first, held_ms: self._busy(index, lease_left_ms, held_ms)

    def _busy(self, index: int, lease_left_ms: int, held_ms: int) -> None:
        """A name was found busy: note it and its holder's lease; ``lock_busy`` once a call."""
        if not self._busy_told:
            self._busy_told = True
            signals.send(signals.lock_busy, self, None)
        self.busy_name = self.names[index]
        self.busy_ttl = lease_left_ms / 1000 if lease_left_ms >= 0 else None
        self.busy_held = held_ms / 1000 if held_ms >= 0 else None

    def _leaving(self, secrets: tuple[str, ...], *, now: bool) -> Flow[None]:
        """Give back what an attempt with ``secrets`` may have got of each name, or take it
        out of each queue: at once when Redis is fine (``now``), else through the watchdog."""
        for keys, secret in zip(self._keys, secrets, strict=False):
            args: list[Any] = [secret, lock_settings.tombstone_ms]
            if now:
                try:
                    yield Call(keys.script("leave"), keys.all, args)
                    continue
                except Exception:  # Redis failed meanwhile: the watchdog settles it later
                    now = False
            runtime().watchdog.settle(Settle(self._backend, keys, args, keys.script("leave")))

    @staticmethod
    def _held_secrets(secrets: tuple[str, ...], taken: list[Acquired]) -> tuple[str, ...]:
        """The secret of each hold taken (a quorum attempt's own, else the acquire's)."""
        return tuple(a.secret or s for a, s in zip(taken, secrets, strict=False))

    def _watch(self, secrets: tuple[str, ...], taken: list[Acquired], *, repeat: bool) -> None:
        """One watchdog entry for the names taken (the first ``len(taken)``), in place of the
        last; a handed-over name's short lease is lengthened at a third of it."""
        self._stop_renewing()
        short = self._backend.handover_lease_ms
        handed_over = any(a.handed_over for a in taken) and self._timeout_ms > short
        if not (repeat or handed_over):
            return
        self._hold = ManyHold(
            weakref.ref(self),
            self._backend,
            self._keys[: len(taken)],
            secrets,
            self._timeout_ms,
            short if handed_over else self._timeout_ms,
            repeat=repeat,
            name=self.name,
            set_secret=secrets[0],  # this acquisition's: a later hold's loss is not its
        )
        runtime().watchdog.add(self._hold)

    def _took(self, secrets: tuple[str, ...], taken: list[Acquired]) -> bool:
        self._secrets = self._held_secrets(secrets, taken)
        self.fencing_tokens = {n: a.token for n, a in zip(self.names, taken, strict=True)}
        self.fencing_token = max(self.fencing_tokens.values())
        self.busy_name = None
        self._watch(self._secrets, taken, repeat=self._auto_renew)
        logger.debug("Acquired locks %r (fencing tokens %s).", self.name, self.fencing_tokens)
        signals.send(signals.lock_acquired, self, self.fencing_token)
        return True

    # -- release and extend ----------------------------------------------------------------

    def _releasing(self) -> Flow[bool]:
        """Release every name; True when one was handed to a waiter."""
        if not self._secrets:
            raise LockNotOwned(f"This MultiLock object does not hold {self.name!r}.")
        self._stop_renewing()
        if self.lost:
            self._forget()
            raise LockNotOwned(f"The locks {self.name!r} were lost before this release.")
        secrets, token = self._secrets, self.fencing_token
        try:
            codes = yield from self._release_calls(secrets)
        except BaseException:  # it may not have run: the watchdog runs it again (quietly)
            for keys, secret in zip(self._keys, secrets, strict=True):
                args: list[Any] = [secret, lock_settings.tombstone_ms]
                release = keys.script("release")
                runtime().watchdog.settle(Settle(self._backend, keys, args, release))
            raise
        self._forget()
        gone = [name for name, code in zip(self.names, codes, strict=True) if not code]
        if gone:
            self._lose(token)
            raise LockNotOwned(
                f"The locks {', '.join(gone)!r} of {self.name!r} were no longer held by this "
                "MultiLock object (expired or force-released) when it was released."
            )
        logger.debug("Released locks %r.", self.name)
        signals.send(signals.lock_released, self, token)
        return HANDED_OVER in codes

    def _release_calls(self, secrets: tuple[str, ...]) -> Flow[list[int]]:
        """RELEASE's answer for each name: in one script on one server, else name by name."""
        if self._one_script:
            args = [lock_settings.tombstone_ms, *secrets]
            codes = yield Call("many_release", self._release_keys, args)
            return [int(code) for code in codes]
        found = []
        for keys, secret in zip(self._keys, secrets, strict=True):
            args = [secret, lock_settings.tombstone_ms, lock_settings.stats, 0, self._timeout_ms]
            found.append(int((yield Call(keys.script("release"), keys.all, args))))
        return found

    def _extending(self, additional_time: float | None, replace_ttl: bool) -> Flow[None]:
        ms, mode = extend_options(additional_time, replace_ttl, self._timeout_ms)
        if not self._secrets:
            raise LockNotOwned(f"This MultiLock object does not hold {self.name!r}.")
        if self.lost:
            raise LockNotOwned(f"The locks {self.name!r} were lost; they cannot be extended.")
        sent, shortest = time.monotonic(), None
        for script, keys, args in extend_calls(
            self._one_script, self._keys, self._secrets, ms, mode
        ):
            left = int((yield Call(script, keys, args, acked=True)))
            if not left:
                self._lose()
                raise LockNotOwned(f"A lock of {self.name!r} is no longer held by this object.")
            shortest = left if shortest is None else min(shortest, left)
        if self._hold is not None and shortest is not None:
            self._hold.renewed(sent, shortest)

    # -- state -----------------------------------------------------------------------------

    def _stop_renewing(self) -> None:
        hold, self._hold = self._hold, None  # the watchdog's thread may be here at once
        runtime().watchdog.discard(hold)

    def _forget(self) -> None:
        self._stop_renewing()
        self._secrets, self.fencing_tokens, self.fencing_token = (), {}, None

    def _lose(self, token: int | None = None) -> None:
        """The set was taken away (a name of it): lost, no more renewals, a warning and
        ``lock_lost`` naming the set; once per hold."""
        if self.lost:
            return
        self.lost = True
        token = self.fencing_token if token is None else token
        self._stop_renewing()
        logger.warning("Locks %r were lost: a name expired or was force-released.", self.name)
        signals.send(signals.lock_lost, self, token)
