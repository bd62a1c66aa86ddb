"""What every exporter of lock metrics is: an :class:`Observer`, and the values it reports."""

from __future__ import annotations

from typing import Any

#: The outcomes of an acquire call.
ACQUIRED, BUSY, TIMEOUT, UNAVAILABLE = "acquired", "busy", "timeout", "unavailable"
#: Why a hold was lost: its renewals failed until its lease ended, or it was found gone (its
#: lease ran out, or an operator released it).
RENEWAL_FAILED, EXPIRED = "renewal_failed", "expired"


class Observer:
    """What an exporter does with each report; the base does nothing."""

    #: Whether :meth:`start_acquire` starts something (a span): else it is not called.
    traces = False

    def start_acquire(self, label: str, lock: Any, backend: Any) -> Any:
        """An acquire call begins, of ``lock`` on ``backend`` (its Redis: an ``alias``, a
        topology); what :meth:`end_acquire` gets back."""
        return None

    def end_acquire(
        self, label: str, lock: Any, started: Any, outcome: str | None, waited: float,
        error: BaseException | None,
    ) -> None:  # fmt: skip
        """It ended: ``outcome`` (None: interrupted by ``error``), after ``waited`` seconds."""

    def began(self, label: str, lock: Any) -> None:
        """A hold began."""

    def ended(self, label: str, lock: Any, held: float) -> None:
        """A hold ended by its release after ``held`` seconds."""

    def lost(self, label: str, lock: Any, cause: str, held: float) -> None:
        """A hold was found lost, ``held`` seconds after it began."""

    def renewal(self, outcome: str) -> None:
        """The watchdog renewed a lease ("renewed") or could not ("failed")."""

    def leading(self, label: str, leads: bool) -> None:
        """This process took (``leads``) or gave up the leadership ``label``."""

    def unique(self, task: str, outcome: str) -> None:
        """An enqueue or a start of the @unique task ``task`` ended with ``outcome``."""

    def rate(self, label: str, admitted: bool) -> None:
        """A call of the rate limit labelled ``label`` was admitted, or limited."""

    def cache_once(self, label: str, outcome: str) -> None:
        """A call of ``cache_once`` with the key labelled ``label``: "hit", "computed" or
        "avoided" (served the value another caller computed)."""

    def unavailable(self, alias: str) -> None:
        """A call could not reach the Redis of cache ``alias``, or it answered an error."""


class HoldRecord:
    """One hold as the metrics see it, kept by its lock from ``metrics.began()`` to
    ``metrics.ended()``: its ``lock`` label, when it began (monotonic seconds) and the
    observers that saw it begin. Its end goes to those observers, whatever METRICS says by
    then: a gauge of holds must come down."""

    __slots__ = ("began_at", "label", "observed")

    def __init__(self, label: str, began_at: float, observed: tuple[Observer, ...]) -> None:
        self.label, self.began_at, self.observed = label, began_at, observed
