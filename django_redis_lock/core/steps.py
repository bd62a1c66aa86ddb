"""The steps a lock's flow yields to its driver (see ``drivers.py``), and the flow's type."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple, TypeVar

from django_redis_lock.scripts import ScriptName

T = TypeVar("T")


# NamedTuples: a step is made on every call, and a frozen dataclass's __init__ costs more.
class Call(NamedTuple):
    """Run a lock script; its reply comes back.

    ``acked``: a grant or a lease its caller relies on; with REDIS_LOCK["WAIT_REPLICAS"] the
    driver has it acknowledged by that many replicas (``WAIT``, pipelined) or throws
    ``LockNotReplicated`` (whose ``reply`` is the script's) into the flow.
    """

    script: ScriptName
    keys: Sequence[str]
    args: Sequence[Any]
    acked: bool = False


class Listen(NamedTuple):
    """Route grants for ``secret``, queued with ``channel``, to this call from now on; None
    comes back."""

    secret: str
    channel: str = ""


class Wait(NamedTuple):
    """Wait at most ``seconds`` for a message for the listened secret (None: none came)."""

    seconds: float


Step = Call | Listen | Wait
#: An operation: yields steps, receives their outcomes, returns its result.
Flow = Generator[Step, Any, T]
