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
        ``read``, ``write``, ``unique`` (with its mode: ``unique, window 60 s``)."""
        if self.unique:
            mode = unique_mode(self.label)
            return f"unique, {mode}" if mode else "unique"
        if self.kind == "lock":
            return "leader" if self.leadership else ""
        if self.kind == "semaphore":  # its limit unknown when the stored one is not a number
            return "semaphore" if self.limit is None else f"semaphore of {self.limit}"
        return self.kind

    @property
    def shown_name(self) -> str:
        """The name with what is held, for a table: ``reports [semaphore of 3]``."""
        return f"{self.name} [{self.held_as}]" if self.held_as else self.name


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
