"""What the locks' statistics say: hold and wait times per lock name, and TTL advice.

Each release records, in its own script (no extra round trip), how long the hold lasted (from
the start time the lock already stores, by the Redis server's clock) and how long its acquire
waited (measured by the acquiring process) into two histograms of a small hash per lock name,
with counters of acquisitions, busy answers, lost and forced holds (see ``scripts.BOUNDS_MS``).
The hash of a name used once expires a day and an hour later, of a name used again a week after
its last recorded use (renewed once an hour at most, so up to an hour sooner).
``REDIS_LOCK["STATS"] = False`` records nothing.

Percentiles are exact to the bucket: a p99 of 7 s means the 99th percentile hold fell in the
bucket that ends at 7 s (over 5 s, up to 7 s). The suggested timeout is the classic advice: the
p99 hold, twice, plus a margin for the network, within :data:`MIN_SUGGESTED` and
:data:`MAX_SUGGESTED`, once :data:`MIN_SAMPLES` holds are recorded.
"""

from __future__ import annotations

import bisect
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django_redis_lock.display import counted
from django_redis_lock.scripts import BOUNDS_MS
from django_redis_lock.scripts.stats import AVOIDED

#: Holds recorded before a name gets a suggested timeout (and ``timeout="auto"`` uses it).
MIN_SAMPLES = 20
#: Added to twice the p99 hold: the network and Redis's own time (seconds).
MARGIN = 1.0
#: The bounds of a suggested timeout (seconds).
MIN_SUGGESTED, MAX_SUGGESTED = 1.0, 24 * 3600.0
#: A timeout this many times the suggestion (and a minute more) is flagged as far too long.
TOO_LONG_FACTOR = 10
#: A hold this close to the timeout (a part of it) is flagged as near it.
NEAR_TIMEOUT = 0.8
#: The buckets' upper bounds in seconds; the last bucket (an hour or more) has none.
BOUNDS = tuple(bound / 1000 for bound in BOUNDS_MS)
#: Buckets per histogram: below the first bound, between each two, from the last on.
BUCKETS = len(BOUNDS_MS) + 1
#: The keys ``locks stats --sort`` and :func:`sort_key` know.
SORT_KEYS = (
    "name",
    "acquisitions",
    "busy",
    "lost",
    "hold_p50",
    "hold_p99",
    "hold_max",
    "wait_p50",
    "wait_p99",
    "timeout",
    "admitted",
    "limited",
    "avoided",
)


def bucket_of(ms: float) -> int:
    """The histogram bucket of a value in milliseconds (as the scripts put it)."""
    for index, bound in enumerate(BOUNDS_MS):
        if ms < bound:
            return index
    return len(BOUNDS_MS)


def bucket_label(index: int) -> str:
    """A bucket as text: its range, in the unit that reads best."""
    if index == 0:
        return f"< {duration(BOUNDS[0])}"
    if index >= len(BOUNDS):
        return f">= {duration(BOUNDS[-1])}"
    return f"{duration(BOUNDS[index - 1])}-{duration(BOUNDS[index])}"


def duration(seconds: float) -> str:
    """A time of the statistics for reading, to three figures: ms below a second, then s up to
    two minutes, then min up to two hours, then h; under the first bucket's bound (the
    histograms' resolution), ``< 1 ms``, whether a hold or a wait."""
    if seconds < BOUNDS[0]:
        return f"< {duration(BOUNDS[0])}"
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def percentile(counts: Sequence[int], fraction: float, largest: float | None) -> float | None:
    """The ``fraction`` percentile of a histogram, in seconds: the upper bound of the bucket it
    falls in (``largest``, the longest seen, in the last bucket or when smaller); 0 in the
    first bucket when no ``largest`` is known (a wait under a millisecond, as a hold's longest
    reads then); None when the histogram is empty."""
    total = sum(counts)
    if total == 0:
        return None
    rank = max(1, math.ceil(total * fraction))
    seen = 0
    for index, count in enumerate(counts):
        seen += count
        if seen >= rank:
            bound = BOUNDS[index] if index < len(BOUNDS) else None
            if index == 0 and largest is None:
                return 0.0
            if bound is None or (largest is not None and largest < bound):
                return largest
            return bound
    return largest  # pragma: no cover  (the loop reaches the rank)


# A counter as the scripts write it: ASCII digits (Python would read Arabic-Indic or fullwidth
# digits as a number too, which Redis cannot increment), fewer than 19 of them.
_COUNTER = re.compile(r"[0-9]{1,18}")


def _counter(value: object) -> int:
    """A counter as read back: anything that is not a non-negative integer reads as 0 (the
    hash may have been written by someone else)."""
    if value is None:  # most buckets: not written
        return 0
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if isinstance(text, str) and _COUNTER.fullmatch(text):
        return int(text)
    return 0


@dataclass(frozen=True)
class LockStats:
    """The statistics of one lock name, as recorded by its releases (and its rate limit's
    calls)."""

    name: str
    #: Holds recorded (at their release).
    acquisitions: int
    #: Acquires that found the lock held (each counted once, however long it then waited).
    busy: int
    #: Holds their holder found gone (expired, or released by something else than an operator)
    #: when it renewed, extended or released them.
    lost: int
    #: The hold and wait histograms: counts per bucket (see :func:`bucket_label`).
    holds: tuple[int, ...] = field(repr=False)
    waits: tuple[int, ...] = field(repr=False)
    #: The longest hold recorded, in seconds (None: none recorded).
    hold_max: float | None
    #: The lock's timeout as its last release had it, in seconds (None: not recorded).
    timeout: float | None
    #: Holds an operator released (``locks release``, ``clear``, the admin) that their holder
    #: then found gone: counted apart from ``lost``, never a sign of a short timeout.
    forced: int = 0
    #: Calls of the rate limit of this name it admitted, and limited (see ``rate_limit()``).
    admitted: int = 0
    limited: int = 0
    #: Callers of ``cache_once`` (lock ``cache_once:<key>``) served another's value on a miss.
    avoided: int = 0

    @cached_property
    def hold_p50(self) -> float | None:
        return percentile(self.holds, 0.5, self.hold_max)

    @cached_property
    def hold_p99(self) -> float | None:
        return percentile(self.holds, 0.99, self.hold_max)

    @cached_property
    def wait_p50(self) -> float | None:
        return percentile(self.waits, 0.5, None)

    @cached_property
    def wait_p99(self) -> float | None:
        return percentile(self.waits, 0.99, None)

    @cached_property
    def suggested_timeout(self) -> float | None:
        """The p99 hold, twice, plus :data:`MARGIN`, within the bounds, rounded up to a tenth
        of a second; None before :data:`MIN_SAMPLES` holds are recorded."""
        p99 = self.hold_p99
        if self.acquisitions < MIN_SAMPLES or p99 is None:
            return None
        suggested = min(MAX_SUGGESTED, max(MIN_SUGGESTED, 2 * p99 + MARGIN))
        return math.ceil(suggested * 10) / 10

    @cached_property
    def warnings(self) -> tuple[str, ...]:
        """What looks wrong with the timeout: too short (holds near or past it, lost holds)
        or far too long (a crashed holder would block the others much longer than the work
        takes)."""
        found = []
        if self.lost:
            found.append(
                f"too short? {counted(self.lost, 'hold')} lost (expired before their release)"
            )
        timeout, longest = self.timeout, self.hold_max
        if timeout and longest is not None and longest >= NEAR_TIMEOUT * timeout:
            found.append(
                f"too short? the longest hold ({duration(longest)}) came within "
                f"{100 - NEAR_TIMEOUT * 100:g} % of the timeout ({duration(timeout)}) or past it "
                "(auto-renewal kept it)"
            )
        suggested = self.suggested_timeout
        if timeout and suggested and timeout > TOO_LONG_FACTOR * suggested + 60:
            found.append(
                f"too long? a crashed holder blocks the others for {duration(timeout)}; the "
                f"work takes {duration(self.hold_p99 or 0)} (p99)"
            )
        return tuple(found)

    def expected_remaining(self, held: float) -> float | None:
        """Of a hold that has lasted ``held`` seconds, how long it typically lasts still: the
        median of the recorded holds longer than that, less ``held``; None without history."""
        if self.acquisitions < MIN_SAMPLES:
            return None
        longer = [  # the buckets that end after ``held``
            count if index >= len(BOUNDS) or BOUNDS[index] > held else 0
            for index, count in enumerate(self.holds)
        ]
        typical = percentile(longer, 0.5, self.hold_max)
        if typical is None:  # longer than any recorded: soon, as far as history tells
            return None
        return max(0.0, typical - held)

    def as_json(self) -> dict[str, Any]:
        """The JSON object ``locks stats --json`` prints."""
        return {
            "name": self.name,
            "acquisitions": self.acquisitions,
            "busy": self.busy,
            "lost": self.lost,
            "forced": self.forced,
            "admitted": self.admitted,
            "limited": self.limited,
            "avoided": self.avoided,
            "hold_p50": self.hold_p50,
            "hold_p99": self.hold_p99,
            "hold_max": self.hold_max,
            "wait_p50": self.wait_p50,
            "wait_p99": self.wait_p99,
            "timeout": self.timeout,
            "suggested_timeout": self.suggested_timeout,
            "warnings": list(self.warnings),
            "holds": dict(_histogram(self.holds)),
            "waits": dict(_histogram(self.waits)),
        }


def _histogram(counts: Sequence[int]) -> Iterable[tuple[str, int]]:
    return ((bucket_label(index), count) for index, count in enumerate(counts) if count)


# The fields of the histograms' buckets, in bucket order.
_HOLD_FIELDS = tuple(f"h{index}" for index in range(BUCKETS))
_WAIT_FIELDS = tuple(f"w{index}" for index in range(1, BUCKETS))


def parse(name: str, flat: Sequence[Any]) -> LockStats | None:
    """The LockStats of a statistics hash read as a flat list of fields and values (HGETALL);
    None when it has recorded nothing this library wrote."""
    fields: dict[str, object] = {
        key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key): value
        for key, value in zip(flat[::2], flat[1::2], strict=False)
    }
    get = fields.get
    acquisitions, busy, lost, forced = (_counter(get(key)) for key in "nblf")
    admitted, limited, avoided = _counter(get("ra")), _counter(get("rl")), _counter(get(AVOIDED))
    if not (acquisitions or busy or lost or forced or admitted or limited or avoided):
        return None
    holds = tuple(_counter(get(key)) for key in _HOLD_FIELDS)
    # Waits under a millisecond are not written: the holds recorded less the other waits.
    longer = [_counter(get(key)) for key in _WAIT_FIELDS]
    waits = (max(0, sum(holds) - sum(longer)), *longer)
    longest = _counter(fields["m"]) / 1000 if "m" in fields else None
    timeout = _counter(fields["t"]) / 1000 if "t" in fields else None
    return LockStats(
        name=name,
        acquisitions=acquisitions,
        busy=busy,
        lost=lost,
        holds=holds,
        waits=waits,
        hold_max=longest if sum(holds) else None,
        timeout=timeout or None,
        forced=forced,
        admitted=admitted,
        limited=limited,
        avoided=avoided,
    )


def weight(stats: LockStats | None) -> tuple[int, int, int, int]:
    """How much a LockStats recorded: acquisitions, then busy answers, then lost holds, then
    forced ones."""
    if stats is None:
        return (0, 0, 0, 0)
    return (stats.acquisitions, stats.busy, stats.lost, stats.forced)


def backed_by_majority(found: Sequence[LockStats | None], needed: int) -> LockStats | None:
    """Of the statistics of one name on the primaries of a quorum that answered (None: none
    there), the one a majority backs: ``needed`` primaries recorded at least as much. Any one
    primary may have been written by someone else; its counts alone decide nothing."""
    ordered = sorted(found, key=weight, reverse=True)
    return ordered[needed - 1] if len(ordered) >= needed else None


def sort_key(key: str) -> Any:
    """A key function for sorting LockStats by ``key`` (one of :data:`SORT_KEYS`): names
    alphabetically, every number largest first (unknown values last)."""
    if key not in SORT_KEYS:
        raise ValueError(f"Unknown sort key {key!r}; use one of: {', '.join(SORT_KEYS)}.")
    if key == "name":
        return lambda stats: stats.name

    def largest_first(stats: LockStats) -> tuple[bool, float, str]:
        value = getattr(stats, key)
        return (value is None, -(value or 0), stats.name)

    return largest_first


@dataclass
class StatsSummary:
    """What a view of many names' statistics shows, read in one pass with flat memory."""

    #: The first names by the sort key (at most the view's rows).
    rows: list[LockStats]
    #: The most contended names (by busy answers), most first.
    contended: list[LockStats]
    #: How many names were read, and how many of them have a timeout that looks wrong.
    read: int
    flagged: int
    #: Whether every matching name was read (False: the view read its most and stopped).
    complete: bool


def summarize(
    found: Iterable[LockStats], sort: str, rows: int, contended: int, read_at_most: int
) -> StatsSummary:
    """The :class:`StatsSummary` of ``found``, reading at most ``read_at_most`` of them and
    keeping only the ``rows`` first by ``sort`` and the ``contended`` most busy in memory."""
    key = sort_key(sort)
    first: list[tuple[Any, int, LockStats]] = []
    busiest: list[tuple[tuple[int, str], int, LockStats]] = []
    read = flagged = 0
    complete = True
    for at, stats in enumerate(found):
        if at == read_at_most:
            complete = False
            break
        read += 1
        flagged += bool(stats.warnings)
        _keep(first, (key(stats), at, stats), rows)
        if stats.busy:
            _keep(busiest, ((-stats.busy, stats.name), at, stats), contended)
    return StatsSummary(
        rows=[stats for *_, stats in first],
        contended=[stats for *_, stats in busiest],
        read=read,
        flagged=flagged,
        complete=complete,
    )


def _keep(kept: list[Any], entry: tuple[Any, int, LockStats], most: int) -> None:
    """Insert ``entry`` into the sorted ``kept`` if it is among the ``most`` smallest."""
    if len(kept) < most or entry[:2] < kept[-1][:2]:
        bisect.insort(kept, entry, key=lambda each: each[:2])
        del kept[most:]


class RecentStats:
    """LockStats read lately, per (backend, name): ``timeout="auto"`` and a busy view's
    Retry-After read a name's statistics at most once every :data:`RECENT_SECONDS` per
    process. Bounded: past :data:`RECENT_NAMES` names it starts afresh."""

    def __init__(self) -> None:
        self._found: dict[tuple[Any, str], tuple[float, LockStats | None]] = {}

    def get(self, key: tuple[Any, str]) -> tuple[bool, LockStats | None]:
        """(whether ``key`` was read lately, what was read)."""
        entry = self._found.get(key)
        if entry is None or time.monotonic() - entry[0] > RECENT_SECONDS:
            return False, None
        return True, entry[1]

    def put(self, key: tuple[Any, str], stats: LockStats | None) -> None:
        if len(self._found) >= RECENT_NAMES:
            self._found = {}
        self._found[key] = (time.monotonic(), stats)


#: How long statistics read for a lock are used before they are read again (seconds).
RECENT_SECONDS = 60.0
#: How many names' statistics a process keeps at most.
RECENT_NAMES = 4096
