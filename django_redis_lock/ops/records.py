"""What the manager hands out: a held lock as operators see it (:class:`LockInfo`), a page of
them, a listing, a force release; and the reading of the scripts' replies into them, which
never trusts what Redis holds (anyone who can write to it chooses it)."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from django_redis_lock.backends.base import text_of
from django_redis_lock.validation import MAX_BURST, validate_rate

logger = logging.getLogger("django_redis_lock")

_UTC = datetime.timezone.utc


@dataclass(frozen=True)
class LockPage:
    """A page of held locks, and the cursor of the next page ("": none).

    The cursor is opaque text: hand it back to :meth:`LockManager.page` as it is.
    """

    locks: list[LockInfo]
    next_cursor: str
    #: Of a quorum's locks, the primaries that did not answer (cache alias: error); a lock they
    #: alone hold is not on the page.
    unanswered: dict[str, str] = dataclasses.field(default_factory=dict)


#: What a leadership's lock name starts with (``leader(name)`` holds ``leader:<name>``).
LEADER_PREFIX = "leader:"
#: What a unique task's key starts with (``@unique`` holds ``unique:<task name>:<key>``).
UNIQUE_PREFIX = "unique:"
# The mode a unique key's label starts with, in brackets ("[window 60 s] app.task queued as
# ..."): a few plain words, as @unique writes them; any other text is not a mode.
_UNIQUE_MODE = re.compile(r"\[([a-z0-9 .,+-]{1,80})\] ")


def unique_mode(label: object) -> str:
    """The mode a unique key's label starts with ("" when it names none: @unique's
    defaults, or a label someone else wrote)."""
    found = _UNIQUE_MODE.match(label) if isinstance(label, str) else None
    return found.group(1) if found else ""


@dataclass(frozen=True)
class LockInfo:
    """A held lock as operators see it."""

    name: str
    fencing_token: int
    owner: str
    label: str | None
    acquired_at: datetime.datetime
    #: Seconds of lease left; ``math.inf`` for a lock whose key lost its expiry (PERSIST by
    #: hand, a restore), which only a force release ends.
    ttl: float
    #: Of a quorum lock, the cache aliases of the primaries that hold it (empty otherwise).
    primaries: tuple[str, ...] = ()
    #: Of a quorum lock, the cache aliases of the primaries that did not answer when it was read
    #: (they may hold it too).
    unanswered: tuple[str, ...] = ()
    #: What is held: "lock", or one holder of a "semaphore", or the "read" or "write" side of
    #: a read/write lock (a name with several holders is listed once per holder).
    kind: str = "lock"
    #: A semaphore's limit (as its last acquire asked for); None otherwise.
    limit: int | None = None
    #: Of an active rate limit (kind "rate"), its rate and how full it is; None otherwise. A
    #: rate limit has no holder: its fencing token is 0, its owner "", its ``acquired_at`` the
    #: time it was read (the server's clock), its ``ttl`` the time until it has drained.
    rate: RateFill | None = None

    @property
    def leadership(self) -> bool:
        """Whether the lock is a leadership's (``leader(name)`` holds ``leader:<name>``): its
        fencing token is the leadership's epoch, its owner the leader."""
        return self.kind == "lock" and self.name.startswith(LEADER_PREFIX)

    @property
    def unique(self) -> bool:
        """Whether the lock is a unique task's key (``@unique`` holds ``unique:<...>``)."""
        return self.kind == "lock" and self.name.startswith(UNIQUE_PREFIX)

    @property
    def held_as(self) -> str:
        """What is held, for people: ``""`` for a lock, ``leader``, ``semaphore of 3``,
        ``read``, ``write``, ``unique`` (with its mode: ``unique, window 60 s``), ``rate 10/s``
        (with its burst: ``rate 10/s, burst 4``)."""
        if self.unique:
            mode = unique_mode(self.label)
            return f"unique, {mode}" if mode else "unique"
        if self.kind == "lock":
            return "leader" if self.leadership else ""
        if self.kind == "semaphore":  # its limit unknown when the stored one is not a number
            return "semaphore" if self.limit is None else f"semaphore of {self.limit}"
        if self.rate is not None:
            burst = f", burst {self.rate.burst}" if self.rate.burst else ""
            return f"rate {self.rate.rate}{burst}"
        return self.kind

    @property
    def shown_name(self) -> str:
        """The name with what is held, for a table: ``reports [semaphore of 3]``."""
        return f"{self.name} [{self.held_as}]" if self.held_as else self.name


@dataclass(frozen=True)
class RateFill:
    """An active rate limit as its state says (see ``scripts/rate.py``): calls in its bucket,
    which drains at the rate and holds ``burst + 1``, and callers queued beyond it (blocked
    callers that took a later turn and sleep until it comes)."""

    #: The rate ("10/s") and burst as its last admitted call asked for them.
    rate: str
    burst: int
    #: The calls in the bucket now (a fraction: it drains continuously), at most ``capacity``.
    fill: float
    #: How many calls the bucket holds: ``burst + 1``.
    capacity: int
    #: Callers holding a turn that has not come yet.
    queued: int

    @property
    def shown(self) -> str:
        """How full it is, for people: ``2.4 of 5 used``, ``5 of 5 used, 3 queued``."""
        queued = f", {self.queued} queued" if self.queued else ""
        return f"{self.fill:.3g} of {self.capacity} used{queued}"


@dataclass(frozen=True)
class Released:
    """A hold that a force release ended."""

    name: str
    #: The hold released, as a listing shows one; None when its data was not a lock's
    #: (written by something else than this library), which a release by name ends too.
    info: LockInfo | None
    #: Whether a waiting client took the lock over at once.
    handed_over: bool


# Integer text as the scripts write it ("5"), or as others may ("0005", "-5", "+7"); the
# scripts read the same text as the same number.
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Lua numbers are doubles: below this, the scripts compare fencing tokens exactly.
_EXACT_TOKENS = 2**53
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)


def _integer(value: object, limit: int | None = None) -> int | None:
    if not isinstance(value, str) or not _INTEGER.fullmatch(value):
        return None
    try:
        number = int(value)
    except ValueError:  # more digits than Python converts
        return None
    return number if limit is None or abs(number) < limit else None


def _moment(micros: int | None) -> datetime.datetime | None:
    """The aware UTC datetime ``micros`` microseconds after the epoch, if there is one."""
    try:
        return None if micros is None else EPOCH + datetime.timedelta(microseconds=micros)
    except OverflowError:
        return None


def info_of(name: str, fields: Sequence[object], pttl: int) -> LockInfo | None:
    """The LockInfo of a held lock's fields (token, owner, label, acquired-at), or None when
    they are not what this library writes: a token that is not an integer the scripts compare
    exactly, a time that is not one datetime can show."""
    token, owner, label, acquired_at = fields
    fencing_token = _integer(token, _EXACT_TOKENS)
    moment = _moment(_integer(acquired_at))
    if fencing_token is None or moment is None:
        return None
    return LockInfo(
        name=name,
        fencing_token=fencing_token,
        owner=owner if isinstance(owner, str) else "",
        label=label if isinstance(label, str) and label else None,
        acquired_at=moment,
        ttl=math.inf if pttl == -1 else pttl / 1000,
    )


_KINDS = {"s": "semaphore", "r": "read", "w": "write"}


def shared_infos(name: str, record: object) -> tuple[list[LockInfo], int]:
    """The holders of a semaphore or read/write lock from its SHARED_READ_MANY record
    ({limit, holders}), and how many of them cannot be shown truthfully."""
    if not (isinstance(record, list) and len(record) == 2 and isinstance(record[1], list)):
        return [], 0
    limit = _integer(record[0]) if isinstance(record[0], str) else None
    found: list[LockInfo] = []
    skipped = 0
    for holder in record[1]:
        if not (isinstance(holder, list) and len(holder) == 6 and isinstance(holder[4], int)):
            skipped += 1
            continue
        *fields, lease_ms, kind = holder
        info = info_of(name, fields, lease_ms)
        if info is None or not isinstance(kind, str) or kind not in _KINDS:
            skipped += 1
            continue
        kind_name = _KINDS[kind]
        found.append(
            dataclasses.replace(
                info, kind=kind_name, limit=limit if kind_name == "semaphore" else None
            )
        )
    return found, skipped


# Of a turn computed in microseconds with a fraction: a caller is queued past this margin.
_TURN_MARGIN = 1e-6


def rate_info(name: str, state: object) -> LockInfo | None:
    """The LockInfo (kind "rate") of a rate limit's state as RATE_READ_MANY reads it, [next,
    rate, burst, interval, now] as stored; None when it is not what the rate scripts write (a
    time or interval that is not a number in range, a rate or burst they do not accept)."""
    if not (isinstance(state, list) and len(state) == 5):
        return None
    tat, interval, now = (_decimal(each) for each in (state[0], state[3], state[4]))
    burst = _integer(state[2], MAX_BURST + 1)
    try:
        rate = validate_rate(state[1]).text
    except (TypeError, ValueError):
        return None
    if tat is None or interval is None or now is None or burst is None or burst < 0:
        return None
    if not (0 <= tat < _MAX_TIME and 1 <= interval <= _MAX_INTERVAL and 0 <= now < _MAX_TIME):
        return None
    moment = _moment(int(now))
    if moment is None:
        return None
    left = max(0.0, tat - now)
    calls, capacity = left / interval, burst + 1
    queued = max(0, math.ceil(calls - capacity - _TURN_MARGIN))
    fill = RateFill(rate, burst, min(calls, float(capacity)), capacity, queued)
    return LockInfo(name, 0, "", None, moment, ttl=left / 1e6, kind="rate", rate=fill)


# The scripts' bounds: a time below 9e15 µs (the year 2255), an interval from a microsecond
# (MAX_RATE_PER_SECOND) to a day.
_MAX_TIME, _MAX_INTERVAL = 9e15, 86_400e6
_DECIMAL = re.compile(r"[0-9]{1,16}(?:\.[0-9]{1,6})?")


def _decimal(value: object) -> float | None:
    """A non-negative number as the rate scripts write it ("1234.567"), else None."""
    return float(value) if isinstance(value, str) and _DECIMAL.fullmatch(value) else None


def warn_unanswered(unanswered: dict[str, str], members: int) -> None:
    if unanswered:
        logger.warning(
            "%d of %d primaries of the quorum did not answer the listing (%s): a lock held only "
            "on them is not listed.",
            len(unanswered),
            members,
            "; ".join(f"{alias}: {error}" for alias, error in unanswered.items()),
        )


def warn_skipped(count: int) -> None:
    if count:
        logger.warning(
            "Skipped %d held lock%s whose Redis data this library did not write (a name, hash "
            "tag, fencing token or time it cannot show); `manage.py locks release NAME` frees "
            "one.",
            count,
            "" if count == 1 else "s",
        )


class Listing(Iterator["LockInfo"]):
    """The held locks of a listing, read as they are iterated (see :meth:`LockManager.list`).

    ``unanswered`` maps the cache alias of each primary of a quorum that did not answer so far
    to its error: a lock only they hold is not listed (a majority answered, or the listing
    would have raised LockUnavailable). Always empty for one alias's locks.
    """

    def __init__(self, read: Callable[[Listing], Iterator[LockInfo]]) -> None:
        self.unanswered: dict[str, str] = {}
        self._locks = read(self)

    def __iter__(self) -> Listing:
        return self

    def __next__(self) -> LockInfo:
        return next(self._locks)


def released_of(
    name: str, held: Sequence[bytes | int | None], holders: Sequence[LockInfo] = ()
) -> Released:
    """The Released of a FORCE_RELEASE reply: token, owner, label, acquired-at, 1 or 2; the
    kind and limit of the hold are those of its twin among ``holders`` (read just before: the
    reply does not carry them), else a lock's."""
    *fields, how = (text_of(value) if isinstance(value, bytes) else value for value in held)
    info = info_of(name, fields, 0)
    token = None if info is None else info.fencing_token
    twin = next((each for each in holders if each.fencing_token == token), None)
    if info is not None and twin is not None:
        info = dataclasses.replace(info, kind=twin.kind, limit=twin.limit)
    return Released(name, info, handed_over=how == 2)


class SeveralHolders(ValueError):
    """A release by name (without a fencing token) of a name that several hold at once: the
    places of a semaphore, the readers of a read/write lock. Which one is the caller's choice."""

    def __init__(self, name: str, tokens: Sequence[int]) -> None:
        self.name = name
        #: The fencing tokens of the holders, in order.
        self.tokens = list(tokens)
        super().__init__(
            f"{name!r} has {len(self.tokens)} holders (fencing tokens "
            f"{', '.join(map(str, self.tokens))}): release one with force_release(name, "
            "fencing_token=N), or every one with release(name)."
        )
