"""A unique task's enqueue, written once as a flow, with a driver for sync and one for async
code (as the lock's own operations are, see ``core/drivers.py``).

The flow yields :class:`Do` steps (a method to call and its arguments); :func:`run` calls
the method, :func:`arun` awaits its ``a``-prefixed twin, and both send back the result or
throw the exception into the flow, so that what a failed send undoes is written once too.

When the task's id is known before it is sent (Celery's: given, or chosen here with Celery's
own id function) the key is taken with it in its label, and a duplicate reads it back at once:
its acquire, then one read. When the framework chooses the id as it sends (Django's tasks:
the backend makes it while it queues the task) the enqueue first takes the key's sending lock
(:func:`~django_redis_lock.unique.keys.sending_lock`), then the key, sends, writes the id into
the key and lets the sending lock go: a duplicate enqueue waits on that lock, woken by its
release, and then finds the id in the key; nothing polls.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import suppress
from typing import Any, NamedTuple, Protocol, TypeVar

from django_redis_lock.exceptions import LockError
from django_redis_lock.unique.keys import (
    Enqueuing,
    TaskKey,
    UniqueSpec,
    none,
    refused,
    report,
    sending_lock,
    state_label,
    task_of,
    under_way,
)

R = TypeVar("R")


class Do(NamedTuple):
    """One step of an enqueue: ``target.<method>(*args)``; in async code, awaited
    ``target.a<method>(*args)``."""

    target: Any
    method: str
    args: tuple[Any, ...] = ()


#: An enqueue: yields steps, receives their outcomes, returns the task's handle.
EnqueueFlow = Generator[Do, Any, R]


class Sender(Protocol):
    """How one framework sends a task and finds one already sent (each with its ``a``-twin
    where the framework has async code)."""

    def send(self) -> Any:
        """Send the task; its handle."""

    def sent_id(self, result: Any) -> str:
        """The id of the task ``send()`` sent."""

    def found(self, task_id: str) -> Any:
        """The handle of the task ``task_id``, already sent (or AlreadyQueued)."""


def enqueuing(
    spec: UniqueSpec, name: str, label: str, task_id: str | None, sender: Sender
) -> EnqueueFlow[Any]:
    """Take the key ``name``, then send the task (the key given back if that fails); on a
    duplicate, the handle of the task holding the key, or AlreadyQueued; with
    ``on_duplicate="replace"``, take the queued (or running) task's key over and send this one
    (the other, started later, does not run). ``task_id`` None: the framework chooses it as it
    sends (see the module)."""
    for _ in range(3):  # the holder may free the key between our try and our look
        key = TaskKey(spec, name, state_label(label, "queued", task_id))
        sending = None if task_id is not None else sending_lock(name, spec)
        if sending is not None and not (yield Do(sending, "acquire")):
            sending = None  # its holder is stuck past ID_WAIT: go on without it
        enqueue = Enqueuing(key, sending)
        try:
            if (yield Do(key, "acquire")):
                report(spec, "enqueued")
                return (yield from _sending(enqueue, label, task_id, sender))
            # A read of who holds it; a debounce takes a queued or running task's hold over
            # (its lease extended to the queued one's), which is then this task's.
            accept = replaceable if spec.on_duplicate == "replace" else none
            found, taken = yield Do(key, "take_over", (key.label or "", accept))
            if taken:
                report(spec, "replaced")
                return (yield from _sending(enqueue, label, task_id, sender))
        finally:
            yield Do(enqueue, "said")
        if found is None:
            continue  # freed meanwhile: try again
        report(spec, "throttled" if spec.until == "window" else "duplicate")
        holder_id = task_of(found)[1]
        if spec.on_duplicate == "raise" or holder_id is None:
            raise refused(spec, name, holder_id)
        return (yield Do(sender, "found", (holder_id,)))
    raise refused(spec, name, None)


def replaceable(label: str) -> bool:
    """Whether a debounce replaces the task of a key labelled ``label``: one queued or
    running, not a success kept (``keep_after_success``) nor one whose id is not known."""
    state, holder = task_of(label)
    return state in ("queued", "running") and holder is not None


def _sending(
    enqueue: Enqueuing, label: str, task_id: str | None, sender: Sender
) -> EnqueueFlow[Any]:
    """Send the task of the key ``enqueue`` took; give the key back if the send fails."""
    key = enqueue.key
    context = under_way.set(enqueue)  # a task run as it is sent takes this key over
    try:
        result = yield Do(sender, "send")
    except BaseException:
        with suppress(LockError):
            yield Do(key, "release")
        raise
    finally:
        under_way.reset(context)
    if task_id is None and key.held:  # its id is known only now: written where a duplicate looks
        yield Do(key, "take_over", (state_label(label, "queued", sender.sent_id(result)),))
    return result


class Calls:
    """A :class:`Sender` made of three functions (sync code only)."""

    def __init__(
        self, send: Callable[[], Any], sent_id: Callable[[Any], str], found: Callable[[str], Any]
    ) -> None:
        self.send, self.sent_id, self.found = send, sent_id, found


def enqueue_once(
    spec: UniqueSpec,
    name: str,
    label: str,
    task_id: str | None,
    send: Callable[[], R],
    sent_id: Callable[[R], str],
    found: Callable[[str], R],
) -> R:
    """:func:`enqueuing` in sync code, the task sent by ``send()``, its id ``sent_id(handle)``,
    a task already sent found by ``found(id)``."""
    result: R = run(enqueuing(spec, name, label, task_id, Calls(send, sent_id, found)))
    return result


def _advance(flow: EnqueueFlow[R], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """The flow's next step (False, step) given the last outcome, or (True, its result)."""
    try:
        return False, flow.throw(error) if error is not None else flow.send(reply)
    except StopIteration as done:
        return True, done.value


def run(flow: EnqueueFlow[R]) -> R:
    """Take ``flow``'s steps with blocking calls; its result."""
    done, step = _advance(flow, None, None)
    while not done:
        try:
            outcome: tuple[Any, BaseException | None] = (
                getattr(step.target, step.method)(*step.args),
                None,
            )
        except BaseException as exc:  # into the flow, which decides what it undoes
            outcome = None, exc
        done, step = _advance(flow, *outcome)
    return step  # type: ignore[no-any-return]


async def arun(flow: EnqueueFlow[R]) -> R:
    """:func:`run` with awaits: each step's ``a``-prefixed method."""
    reply: Any = None
    error: BaseException | None = None
    while not (advanced := _advance(flow, reply, error))[0]:
        step, error = advanced[1], None
        try:
            reply = await getattr(step.target, "a" + step.method)(*step.args)
        except BaseException as exc:
            reply, error = None, exc
    return advanced[1]  # type: ignore[no-any-return]
