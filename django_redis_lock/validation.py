"""The rules every input follows, in one place: lock(), @locked, the manager and the checks.

Each function returns the value it accepts (converted where that is its job) or raises
``TypeError``/``ValueError`` with a message that names what was wrong, so that a refused call
loses nothing and says why.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import NamedTuple

#: The longest lock name accepted, in characters.
MAX_NAME_LENGTH = 1024
#: The longest label accepted, in characters (labels are shown to operators).
MAX_LABEL_LENGTH = 256
#: The longest lock name pattern accepted, in characters: a name's, its characters escaped.
MAX_PATTERN_LENGTH = 2 * MAX_NAME_LENGTH
#: The owner text stored with a hold is cut to this many characters (long thread names).
MAX_OWNER_LENGTH = 256
#: The shortest lease, extension or tombstone accepted, in seconds (a millisecond).
MIN_TIMEOUT = 0.001
#: The longest lease, extension or tombstone accepted, in seconds (a year).
MAX_TIMEOUT = 365 * 24 * 3600
#: SCAN cursors are unsigned 64-bit numbers.
MAX_CURSOR = 2**64 - 1
# A page cursor: which primary (by the first slot it serves), and where SCAN stands on it.
_CURSOR = re.compile(r"([0-9]{1,5})-([0-9]{1,20})", re.ASCII)


def _text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise TypeError(f"A lock {what} must be a str, not {type(value).__name__}.")
    if len(value) > limit:
        raise ValueError(f"A lock {what} is at most {limit} characters; this one has {len(value)}.")
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise ValueError(f"A lock {what} must be valid Unicode text: {exc}") from None
    return value


def validate_name(name: object) -> str:
    """``name`` if it is a usable lock name: a non-empty str of at most MAX_NAME_LENGTH."""
    if name == "":
        raise ValueError("A lock name must not be empty.")
    return _text(name, "name", MAX_NAME_LENGTH)


def holding_options(
    blocking: object, blocking_timeout: object, auto_renew: object, default_renew: bool
) -> tuple[bool, float | None, bool]:
    """A lock's ``blocking``, ``blocking_timeout`` and ``auto_renew`` (None: ``default_renew``,
    REDIS_LOCK AUTO_RENEW), checked, and checked together."""
    wait, limit = validate_flag(blocking, "blocking"), validate_blocking_timeout(blocking_timeout)
    refuse_contradiction(wait, limit)
    renew = default_renew if auto_renew is None else validate_flag(auto_renew, "auto_renew")
    return wait, limit, renew


def extend_options(
    additional_time: object, replace_ttl: object, default_ms: int
) -> tuple[int, str]:
    """extend()'s milliseconds (None: ``default_ms``, the timeout) and EXTEND's mode."""
    ms = (
        default_ms if additional_time is None else seconds_to_ms(additional_time, "additional_time")
    )
    return ms, "replace" if validate_flag(replace_ttl, "replace_ttl") else "add"


def validate_names(names: object) -> tuple[str, ...]:
    """``names`` (a list, tuple or set of lock names, each as :func:`validate_name` wants it,
    no two alike) as a sorted tuple: the one order every caller takes them in."""
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise TypeError(
            f"names must be a list, tuple or set of lock names, not {type(names).__name__}"
            f" ({names!r})."
        )
    if not names:
        raise ValueError("names must name at least one lock.")
    checked = sorted(validate_name(name) for name in names)
    if len(set(checked)) != len(checked):
        twice = sorted(name for name, count in Counter(checked).items() if count > 1)
        raise ValueError(f"names must not repeat a lock name: {', '.join(map(repr, twice))}.")
    return tuple(checked)


#: The most holders a semaphore may let in at once (each operation reads its holders).
MAX_LIMIT = 1000


def validate_limit(limit: object) -> int:
    """``limit`` if it is a semaphore's limit: a whole number from 1 to MAX_LIMIT."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be a whole number of holders, not {limit!r}.")
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be from 1 to {MAX_LIMIT}, not {limit}.")
    return limit


class Rate(NamedTuple):
    """A rate as :func:`validate_rate` accepts it: ``calls`` per ``period`` seconds."""

    calls: int
    period: float
    #: As given ("100/s"), for messages and listings.
    text: str

    @property
    def interval(self) -> float:
        """The time between two calls at this rate, in seconds."""
        return self.period / self.calls


#: A rate's periods, by the letter after its slash.
RATE_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The most calls a rate may allow per second (one every microsecond: the server clock's step).
MAX_RATE_PER_SECOND = 1_000_000
#: The most calls a burst may let through at once above the rate.
MAX_BURST = 1_000_000
_RATE = re.compile(r"\s*([0-9]{1,12})\s*/\s*([smhd])\s*", re.ASCII)
_RATE_FORMS = '"N/s", "N/m", "N/h" or "N/d" with N a whole number above 0, such as "100/s"'


def validate_rate(rate: object) -> Rate:
    """``rate`` ("100/s", "10/m", "5000/h", "1000/d") as a :class:`Rate`."""
    if isinstance(rate, (bool, int, float)):
        raise ValueError(f"rate {rate!r} is a bare number: give calls per period as {_RATE_FORMS}.")
    if not isinstance(rate, str):
        raise TypeError(f'rate must be a str such as "100/s", not {type(rate).__name__}.')
    found = _RATE.fullmatch(rate)
    if found is None:
        raise ValueError(f"rate {rate!r} is not a rate: give {_RATE_FORMS}.")
    count, period = int(found[1]), RATE_PERIODS[found[2]]
    if count == 0:
        raise ValueError(f"rate {rate!r} admits nothing: give {_RATE_FORMS}.")
    if count / period > MAX_RATE_PER_SECOND:
        raise ValueError(
            f"rate {rate!r} is above {MAX_RATE_PER_SECOND:,} calls a second, more than the "
            "server's clock can tell apart."
        )
    return Rate(count, period, f"{count}/{found[2]}")


def validate_burst(burst: object) -> int:
    """``burst`` as the calls a rate limit lets through at once above its rate: None (0) or a
    whole number from 0 to MAX_BURST."""
    if burst is None:
        return 0
    if isinstance(burst, bool) or not isinstance(burst, int):
        raise TypeError(f"burst must be a whole number of calls or None, not {burst!r}.")
    if not 0 <= burst <= MAX_BURST:
        raise ValueError(f"burst must be from 0 to {MAX_BURST:,} calls, not {burst}.")
    return burst


def validate_fencing_token(token: object) -> int | None:
    """``token`` if it can name a hold: None (whichever) or a whole number (one a listing
    showed, even of data another program wrote: so negative ones too)."""
    if token is None:
        return None
    if isinstance(token, bool) or not isinstance(token, int):
        raise TypeError(f"fencing_token must be a whole number or None, not {token!r}.")
    if abs(token) >= 2**63:
        raise ValueError(f"fencing_token {token} is no token: it does not fit 64 bits.")
    return token


def validate_template(template: object) -> str | None:
    """``template`` if it is a usable name template (a metrics label): None, or a non-empty
    str of at most MAX_NAME_LENGTH."""
    if template == "":
        raise ValueError("A lock name template must not be empty: pass None for none.")
    return None if template is None else _text(template, "template", MAX_NAME_LENGTH)


def validate_label(label: object) -> str | None:
    """``label`` if it is a usable label: None, or a str of at most MAX_LABEL_LENGTH."""
    return None if label is None else _text(label, "label", MAX_LABEL_LENGTH)


# A tuple, built once: ``int | float`` in an isinstance call builds a union at every call.
_NUMBERS = (int, float)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def seconds_to_ms(value: object, what: str) -> int:
    """A number of seconds from MIN_TIMEOUT to MAX_TIMEOUT, as whole milliseconds."""
    if isinstance(value, bool) or not isinstance(value, _NUMBERS):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}.")
    if not (math.isfinite(value) and MIN_TIMEOUT <= value <= MAX_TIMEOUT):
        raise ValueError(
            f"{what} must be a number of seconds from {MIN_TIMEOUT} up to {MAX_TIMEOUT}, "
            f"not {value!r}."
        )
    return round(value * 1000)


#: The shortest and longest REDIS_LOCK["HANDOVER_LEASE"], in seconds: the new holder's watchdog
#: must lengthen it within a third of it, and a waiter that died holds the others up that long.
MIN_HANDOVER_LEASE, MAX_HANDOVER_LEASE = 0.1, 3600.0


def handover_lease_ms(value: object) -> int:
    """REDIS_LOCK["HANDOVER_LEASE"] in milliseconds, if it is usable."""
    what = "REDIS_LOCK['HANDOVER_LEASE']"
    ms = seconds_to_ms(value, what)
    if not MIN_HANDOVER_LEASE * 1000 <= ms <= MAX_HANDOVER_LEASE * 1000:
        raise ValueError(
            f"{what} must be from {MIN_HANDOVER_LEASE} to {MAX_HANDOVER_LEASE} seconds, "
            f"not {value!r}."
        )
    return ms


#: The most replicas REDIS_LOCK["WAIT_REPLICAS"] may ask to acknowledge a grant.
MAX_WAIT_REPLICAS = 100


def wait_replicas(value: object) -> int:
    """REDIS_LOCK["WAIT_REPLICAS"], if it is usable: how many replicas acknowledge a grant."""
    what = "REDIS_LOCK['WAIT_REPLICAS']"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a whole number of replicas, not {value!r}.")
    if not 0 <= value <= MAX_WAIT_REPLICAS:
        raise ValueError(f"{what} must be from 0 (no WAIT) to {MAX_WAIT_REPLICAS}, not {value}.")
    return value


#: ``timeout="auto"``: the suggested timeout of the lock's statistics, once known.
AUTO = "auto"


def validate_timeout(value: object, what: str) -> int | None:
    """A lock timeout in milliseconds, or None for ``"auto"`` (see stats.py)."""
    if value == AUTO and isinstance(value, str):
        return None
    if isinstance(value, str):
        raise TypeError(f'{what} must be a number of seconds or "auto", not {value!r}.')
    return seconds_to_ms(value, what)


def validate_blocking_timeout(value: object) -> float | None:
    """``value`` as seconds to wait at most: None (no limit), or zero or more."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, _NUMBERS):
        raise TypeError(
            f"blocking_timeout must be a number of seconds or None, not {type(value).__name__}."
        )
    if math.isnan(value) or value < 0:
        raise ValueError(f"blocking_timeout must be zero or more seconds, not {value!r}.")
    if math.isinf(value):
        raise ValueError("blocking_timeout=inf: pass None to wait without limit.")
    return float(value)


def refuse_contradiction(wait: bool, limit: float | None) -> None:
    """A ValueError for ``blocking=False`` with a ``blocking_timeout`` that asks to wait."""
    if not wait and limit:
        raise ValueError(
            f"blocking=False with blocking_timeout={limit!r}: a lock that does not wait has no "
            "wait to limit. Pass blocking_timeout alone to wait that long, or blocking=False alone."
        )


def wait_options(
    blocking: object, blocking_timeout: object, default_wait: bool, default_limit: float | None
) -> tuple[bool, float | None]:
    """Whether to wait, and for how long at most, from acquire()'s arguments (None: the
    Lock's own, ``default_wait`` and ``default_limit``)."""
    if blocking is None and blocking_timeout is None:
        return default_wait, default_limit
    wait = default_wait if blocking is None else validate_flag(blocking, "blocking")
    if blocking_timeout is None:
        return wait, default_limit
    limit = validate_blocking_timeout(blocking_timeout)
    refuse_contradiction(wait, limit)
    return wait, limit


def validate_flag(value: object, what: str) -> bool:
    """``value`` if it is True or False."""
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, not {value!r}.")
    return value


def validate_optional_flag(value: object, what: str) -> bool | None:
    """``value`` if it is True, False or None (None: the setting decides)."""
    return None if value is None else validate_flag(value, what)


#: Where locks live: a cache alias, a quorum of them (a tuple), or None for REDIS_LOCK CACHE.
Using = str | tuple[str, ...] | None
#: The fewest cache aliases a quorum lock may use.
MIN_QUORUM = 3


def validate_using(using: object, what: str = "using") -> Using:
    """``using`` if it can name a cache alias (a str) or a quorum of at least three distinct
    ones (a list or tuple of str, as a tuple), or None for the REDIS_LOCK CACHE."""
    if using is None or isinstance(using, str):
        return using
    if not isinstance(using, (list, tuple)):
        raise TypeError(
            f"{what} must be a cache alias (str), a list of at least {MIN_QUORUM} aliases (a "
            f"quorum lock) or None, not {type(using).__name__}."
        )
    for alias in using:
        if not isinstance(alias, str):
            raise TypeError(
                f"{what} lists cache aliases (str), not {type(alias).__name__}: {using!r}."
            )
    if len(using) < MIN_QUORUM:
        raise ValueError(
            f"A quorum lock needs at least {MIN_QUORUM} cache aliases, each an independent Redis "
            f"primary ({what} has {len(using)}: {list(using)!r}); a majority of them must grant "
            "it, so that it survives a minority of them failing."
        )
    duplicates = sorted({alias for alias in using if using.count(alias) > 1})
    if duplicates:
        raise ValueError(
            f"{what} names the cache alias{'es' if len(duplicates) > 1 else ''} "
            f"{', '.join(map(repr, duplicates))} more than once: each primary of a quorum "
            "counts once."
        )
    return tuple(using)


def validate_pattern(pattern: object) -> str:
    """``pattern`` if it is a usable Redis glob (``*``, ``?``, ``[...]``, ``\\`` escapes)."""
    if not isinstance(pattern, str):
        raise TypeError(f"A lock name pattern must be a str, not {type(pattern).__name__}.")
    if not pattern:
        raise ValueError("A lock name pattern must not be empty; '*' matches every lock.")
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(
            f"A lock name pattern is at most {MAX_PATTERN_LENGTH} characters (names are at most "
            f"{MAX_NAME_LENGTH}); this one has {len(pattern)}."
        )
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[" and not in_class:
            in_class = True
        elif char == "]" and in_class:
            in_class = False
    if escaped:
        raise ValueError(f"The pattern {shorten(repr(pattern), 80)} ends with a lone backslash.")
    if in_class:
        raise ValueError(f"The pattern {shorten(repr(pattern), 80)} has a '[' without its ']'.")
    return pattern


def validate_cursor(cursor: object) -> tuple[int, int]:
    """The server (the first hash slot it serves; 0 for one server) and SCAN cursor a page
    cursor stands for: ``""`` for the first page, else a ``LockPage.next_cursor``."""
    if not isinstance(cursor, str):
        raise TypeError(
            f"A page cursor is a str: '' for the first page, then the next_cursor of the page "
            f"before; not {cursor!r}."
        )
    if cursor == "":
        return 0, 0
    found = _CURSOR.fullmatch(cursor)
    if found is None or int(found[2]) > MAX_CURSOR:
        raise ValueError(f"{shorten(repr(cursor), 80)} is not a page cursor of this library.")
    return int(found[1]), int(found[2])


#: The most locks a page of a listing may be asked for.
MAX_PAGE_SIZE = 10_000


def validate_page_size(size: object) -> int:
    """``size`` if it is a usable page size: a whole number from 1 to MAX_PAGE_SIZE."""
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"A page size is a whole number of locks, not {size!r}.")
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise ValueError(f"A page size is from 1 to {MAX_PAGE_SIZE} locks, not {size}.")
    return size


def page_cursor(first_slot: int, scan_cursor: int) -> str:
    """The page cursor of SCAN ``scan_cursor`` on the primary whose first slot is ``first_slot``."""
    return f"{first_slot}-{scan_cursor}"
