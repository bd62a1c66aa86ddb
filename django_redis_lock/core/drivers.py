"""The two drivers of the lock's flows: the only code that takes a Lock's steps to Redis.

Every operation of a Lock is written once, as a flow (see ``lock.py``): a generator that yields
the steps it needs (run a script, listen for a grant, wait for it) and receives their
outcomes, as httpx's auth flows do. :func:`drive` takes the steps with blocking calls and
:func:`adrive` with awaits. Both map Redis errors to ``LockUnavailable``, and both throw an
exception raised while a step ran (an interrupt, a cancellation, ``LockUnavailable``) into the
flow, so that a flow's clean-up is written once too; the async driver takes the steps that
follow such an exception shielded from a further cancellation. An exception is therefore an
interruption, after which a flow only cleans up: an outcome it goes on from (a busy answer, a
grant that came too late) comes back as a value.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar

from django_redis_lock import metrics
from django_redis_lock.backends import errors
from django_redis_lock.backends.base import Backend
from django_redis_lock.core.steps import Call, Flow, Listen, Step, Wait
from django_redis_lock.exceptions import LockNotReplicated, LockUnavailable
from django_redis_lock.runtime import runtime
from django_redis_lock.runtime.tickets import AsyncTicket, SyncTicket, WakeUps

T = TypeVar("T")
# What a script's step can fail with, thrown into the flow as _fail says.
_SCRIPT_FAILURES: errors.ErrorTypes = (*errors.CLIENT, LockNotReplicated)


def unavailable(what: str, error: Exception) -> LockUnavailable:
    """The LockUnavailable a client error becomes (raise it ``from`` the error)."""
    return LockUnavailable(f"{what}: {error}")


@contextmanager
def redis_errors(what: str) -> Iterator[None]:
    """Turn a client error inside the block into LockUnavailable (the cause chained)."""
    try:
        yield
    except errors.CLIENT as exc:
        raise unavailable(what, exc) from exc


def _fail(exc: Exception, what: str, backend: Backend) -> NoReturn:
    """Raise what a script's failure is thrown into the flow as: a Redis error as
    LockUnavailable (the error as its cause), a replica shortfall as it is, naming the lock."""
    if isinstance(exc, LockNotReplicated):
        exc.args = (f"Lock {what!r}: {exc}",)
        raise exc
    if metrics.observers():
        metrics.unavailable(str(getattr(backend, "alias", "")))
    raise unavailable(f"Redis failed for lock {what!r}", exc) from exc


class _Run:
    """One flow on its way: where it stands, and the listening it started."""

    def __init__(self, backend: Backend, flow: Flow[T], what: str) -> None:
        self.backend, self.flow, self.what = backend, flow, what
        self.listener: WakeUps | None = None
        self.secret = ""
        self.result: Any = None

    def next(self, reply: Any, error: BaseException | None) -> Step | None:
        """The flow's next step given the last one's outcome; None once it returned."""
        try:
            return self.flow.throw(error) if error is not None else self.flow.send(reply)
        except StopIteration as done:
            self.result = done.value
            return None

    def listen(self, step: Step, ticket: SyncTicket | AsyncTicket) -> None:
        """Start routing grants for the step's secret to ``ticket``."""
        assert isinstance(step, Listen)
        self.close()  # a flow that takes several names in turn listens for each in turn
        self.listener, self.secret = runtime().listener(self.backend), step.secret
        self.listener.register(step.secret, ticket, step.channel)
        self.listener.start()

    def close(self) -> None:
        if self.listener is not None:
            self.listener.unregister(self.secret)


def drive(backend: Backend, flow: Flow[T], what: str) -> T:
    """Take ``flow``'s steps with blocking calls; its result (``what``: for error messages)."""
    reply: Any = None
    error: BaseException | None = None
    run: _Run | None = None  # made by the first Listen step: most calls never listen
    ticket: SyncTicket | None = None
    try:
        while True:  # _Run.next inlined: this loop is the hot path of every blocking call
            try:
                step = flow.send(reply) if error is None else flow.throw(error)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            error = None
            try:
                if type(step) is Call:
                    try:
                        if step.acked and backend.wait_replicas:
                            reply = backend.run_acked(step.script, step.keys, step.args)
                        else:
                            reply = backend.run(step.script, step.keys, step.args)
                    except _SCRIPT_FAILURES as exc:  # into the flow
                        _fail(exc, what, backend)
                elif type(step) is Wait:
                    assert ticket is not None, "a flow waits only after it listens"
                    reply = ticket.wait(step.seconds)
                else:
                    ticket = SyncTicket()
                    run = run or _Run(backend, flow, what)
                    run.listen(step, ticket)
                    reply = None
            except BaseException as exc:  # the flow decides what an interruption undoes
                error = exc
    finally:
        if run is not None and run.listener is not None:
            run.close()


async def adrive(backend: Backend, flow: Flow[T], what: str) -> T:
    """:func:`drive` with awaits: the event loop runs on while a step waits."""
    run = _Run(backend, flow, what)
    try:
        try:
            result: T = await _steps(run, None, None)
        except _Interrupted as interrupted:  # what follows runs even if cancelled again
            result = await asyncio.shield(_steps(run, None, interrupted.error))
        return result
    finally:
        run.close()


class _Interrupted(Exception):
    def __init__(self, error: BaseException) -> None:
        self.error = error


async def _steps(run: _Run, reply: Any, error: BaseException | None) -> Any:
    """Take a flow's steps on the event loop; the first exception a step raises is handed
    to the caller as _Interrupted (to go on shielded), later ones to the flow."""
    shielded = error is not None
    ticket: AsyncTicket | None = None
    # This task's cancellations so far (Python 3.11+): a client library that caught one and
    # returned a reply all the same (seen with redis-py 8's asyncio client, under load) must
    # not make the waiter wait on as if nobody had cancelled it.
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    cancels = cancelling() if cancelling is not None else 0
    while (step := run.next(reply, error)) is not None:
        error = None
        try:
            if type(step) is Call:
                try:
                    backend = run.backend
                    if step.acked and backend.wait_replicas:
                        reply = await backend.arun_acked(step.script, step.keys, step.args)
                    else:
                        reply = await backend.arun(step.script, step.keys, step.args)
                except _SCRIPT_FAILURES as exc:
                    _fail(exc, run.what, backend)
                if cancelling is not None and cancelling() > cancels:
                    raise asyncio.CancelledError  # swallowed on the way: an interruption
            elif type(step) is Wait:
                assert ticket is not None, "a flow waits only after it listens"
                reply = await ticket.wait(step.seconds)
            else:
                ticket = AsyncTicket()
                run.listen(step, ticket)
                reply = None
        except BaseException as exc:
            if not shielded:
                raise _Interrupted(exc) from None
            error = exc
    return run.result
