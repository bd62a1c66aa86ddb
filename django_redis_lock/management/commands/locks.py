"""``manage.py locks``: list, show, release and clear held locks; stats of hold and wait times.

Listing streams from SCAN, so memory stays flat however many locks are held; ``--json`` prints
one JSON array whose objects carry name, fencing_token, owner, label, acquired_at (ISO 8601)
and ttl.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import math
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redis_lock.display import counted, safe_json, safe_text
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.ops import get_lock_manager
from django_redis_lock.ops.doctor import ERROR, OK, WARNING, diagnose
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.ops.records import LockInfo
from django_redis_lock.stats import SORT_KEYS, LockStats, duration, sort_key

# Rows whose widths set the table's columns; longer cells later are cut.
_WIDTH_SAMPLE = 500
_MAX_WIDTH = 60
_COLUMNS = ("NAME", "TTL", "OWNER", "LABEL", "ACQUIRED", "TOKEN")
# Options of the whole command (by dest): Django's common ones and --using. They are accepted
# after the subcommand as well, where users put them.
_COMMON_OPTIONS = frozenset(
    {
        "verbosity",
        "settings",
        "pythonpath",
        "traceback",
        "no_color",
        "force_color",
        "skip_checks",
        "using",
    }
)


def as_json(info: LockInfo) -> dict[str, Any]:
    """The JSON object of one held lock (ttl null: the key has no expiry)."""
    return {
        "name": info.name,
        "fencing_token": info.fencing_token,
        "owner": info.owner,
        "label": info.label,
        "acquired_at": info.acquired_at.isoformat(),
        "ttl": info.ttl if math.isfinite(info.ttl) else None,
        **({"primaries": list(info.primaries)} if info.primaries else {}),
        **({"unanswered": list(info.unanswered)} if info.unanswered else {}),
    }


def _aliases(text: str) -> str | list[str]:
    """``--using``: one cache alias, or a quorum's separated by commas."""
    return [alias.strip() for alias in text.split(",")] if "," in text else text


def _columns(info: LockInfo) -> tuple[str, ...]:
    """The table's columns: a quorum's locks add the primaries that hold each."""
    return (*_COLUMNS, "PRIMARIES") if info.primaries else _COLUMNS


def _cells(info: LockInfo) -> tuple[str, ...]:
    acquired = info.acquired_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    ttl = f"{info.ttl:.1f}s" if math.isfinite(info.ttl) else "no expiry"
    cells = [info.name, ttl, info.owner, info.label or "-", acquired, str(info.fencing_token)]
    if info.primaries:
        cells.append(", ".join(info.primaries))
    return tuple(safe_text(cell) for cell in cells)


_STATS_COLUMNS = (
    "NAME",
    "ACQ",
    "BUSY",
    "LOST",
    "FORCED",
    "HOLD P50",
    "P99",
    "MAX",
    "WAIT P50",
    "P99",
    "TIMEOUT",
    "SUGGESTED",
)


def _seconds(value: float | None) -> str:
    return "-" if value is None else duration(value)


def _stats_cells(stats: LockStats) -> tuple[str, ...]:
    suggested = _seconds(stats.suggested_timeout)
    cells = (
        stats.name,
        str(stats.acquisitions),
        str(stats.busy),
        str(stats.lost),
        str(stats.forced),
        _seconds(stats.hold_p50),
        _seconds(stats.hold_p99),
        _seconds(stats.hold_max),
        _seconds(stats.wait_p50),
        _seconds(stats.wait_p99),
        _seconds(stats.timeout),
        f"{suggested} !" if stats.warnings else suggested,
    )
    return tuple(safe_text(cell) for cell in cells)


def _bar(done: int, total: int | None, width: int = 30) -> str:
    """A progress bar when the total is known, else the count."""
    if not total:
        return f"{done}"
    filled = round(width * min(done, total) / total)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total}"


def _line(cells: Iterable[str], widths: list[int]) -> str:
    """One table line: each cell cut to its column's width, and padded."""
    padded = (
        (cell if len(cell) <= width else cell[: width - 1] + "…").ljust(width)
        for cell, width in zip(cells, widths, strict=True)
    )
    return "  ".join(padded).rstrip()


def _quoted(name: str) -> str:
    return f"'{safe_text(name)}'"


def _accept_common_options(subcommand: CommandParser, parser: CommandParser) -> None:
    """Give ``subcommand`` the common options of ``parser`` (``--settings``, ``-v``, ``--using``),
    listed after its own: given after the subcommand they apply, else the values given before
    it (or the defaults) stand."""
    for action in parser._actions:
        if action.dest in _COMMON_OPTIONS:
            option = copy.copy(action)
            option.default = argparse.SUPPRESS
            subcommand._add_action(option)


class Command(BaseCommand):
    """List, show, release and clear the locks of the REDIS_LOCK cache (or --using)."""

    help = "List, show, release and clear held Redis locks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--using",
            type=_aliases,
            help="The cache alias holding the locks, or a quorum's aliases separated by commas "
            "(default: REDIS_LOCK CACHE).",
        )
        commands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
        listing = commands.add_parser("list", help="List held locks.")
        listing.add_argument("--pattern", default="*", help="Glob on lock names (default: *).")
        listing.add_argument("--json", action="store_true", help="Print a JSON array.")
        show = commands.add_parser("show", help="Show one held lock.")
        show.add_argument("name")
        show.add_argument("--json", action="store_true", help="Print a JSON object.")
        release = commands.add_parser("release", help="Force-release one lock.")
        release.add_argument("name")
        clear = commands.add_parser("clear", help="Force-release every matching lock.")
        clear.add_argument("--pattern", default="*", help="Glob on lock names (default: *).")
        clear.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        clear.add_argument(
            "--dry-run", action="store_true", help="List what would be released; release nothing."
        )
        stats = commands.add_parser(
            "stats", help="Hold and wait times, busy and lost counts, and timeout advice."
        )
        stats.add_argument("--pattern", default="*", help="Glob on lock names (default: *).")
        stats.add_argument("--json", action="store_true", help="Print a JSON array.")
        stats.add_argument(
            "--sort",
            default="name",
            choices=SORT_KEYS,
            help="Sort by this (numbers largest first; default: name).",
        )
        doctor = commands.add_parser(
            "doctor",
            help="Check the live deployment item by item: eviction, persistence, replicas, "
            "timeouts, versions. Exits with status 1 on an error.",
        )
        doctor.add_argument("--json", action="store_true", help="Print a JSON array.")
        for subcommand in (listing, show, release, clear, stats, doctor):
            _accept_common_options(subcommand, parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["subcommand"] == "doctor":
                return self._doctor(options)
            manager = get_lock_manager(options["using"])
            getattr(self, f"_{options['subcommand']}")(manager, options)
        except LockUnavailable as exc:
            raise CommandError(f"Redis is unavailable: {exc}") from exc
        except (ValueError, TypeError, ImproperlyConfigured) as exc:
            raise CommandError(str(exc)) from exc

    def _list(self, manager: LockManager, options: dict[str, Any]) -> None:
        locks = manager.list(options["pattern"])
        if options["json"]:
            self._write_json_array(locks)
        else:
            self._write_table(locks)
        if locks.unanswered:  # a quorum's primaries that did not answer: said on stderr
            failed = "; ".join(f"{alias}: {error}" for alias, error in locks.unanswered.items())
            self.stderr.write(
                self.style.WARNING(
                    f"{len(locks.unanswered)} primar{'y' if len(locks.unanswered) == 1 else 'ies'}"
                    f" did not answer ({safe_text(failed)}): a lock held only there is not listed."
                )
            )

    def _show(self, manager: LockManager, options: dict[str, Any]) -> None:
        info = self._held(manager, options["name"])
        if options["json"]:
            self.stdout.write(safe_json(as_json(info), indent=2))
            return
        for label, value in zip(_columns(info), _cells(info), strict=True):  # cells are safe text
            self.stdout.write(f"{self.style.MIGRATE_LABEL(f'{label.lower():>9}')}  {value}")

    def _release(self, manager: LockManager, options: dict[str, Any]) -> None:
        released = manager.force_release(options["name"])
        if released is None:
            raise CommandError(f"No lock named {_quoted(options['name'])} is held.")
        info = released.info
        text = self.style.SUCCESS(f"Released {_quoted(released.name)}") + (
            f" (held by {safe_text(info.owner)}, fencing token {info.fencing_token})"
            if info
            else ", whose data this library did not write (not readable)"
        )
        taken = "; a waiting client took it over at once" if released.handed_over else ""
        self.stdout.write(f"{text}{taken}.")

    def _clear(self, manager: LockManager, options: dict[str, Any]) -> None:
        pattern = options["pattern"]
        if options["dry_run"]:
            count = 0
            for info in manager.list(pattern):
                count += 1
                self.stdout.write(
                    f"would release {safe_text(info.name)}  ({safe_text(info.owner)})"
                )
            self.stdout.write(f"{counted(count, 'lock')} would be released.")
            return
        total = None if options["yes"] else self._confirm(manager, pattern)
        if total == 0:
            self.stdout.write(f"No held lock matches {_quoted(pattern)}.")
            return
        handed_over = 0

        def progress(released: int, handed: int) -> None:
            nonlocal handed_over
            handed_over = handed
            if self._on_terminal():
                bar = _bar(released, total)
                self.stdout.write(f"\r{self.style.MIGRATE_LABEL('releasing')} {bar}", ending="")
                self.stdout.flush()

        released = manager.clear(pattern, progress=progress)
        if self._on_terminal() and released:
            self.stdout.write("")
        text = f"Released {counted(released, 'lock')}"
        if handed_over:
            text += f" ({handed_over} taken over at once by waiting clients)"
        self.stdout.write(self.style.SUCCESS(text + "."))

    def _confirm(self, manager: LockManager, pattern: str) -> int:
        """Ask on a terminal; the number of matching locks (0: nothing to ask about)."""
        if not (sys.stdin.isatty() and self._on_terminal()):
            raise CommandError("Not on a terminal: pass --yes to clear without confirmation.")
        count = sum(1 for _ in manager.list(pattern))
        if not count:
            return 0
        try:
            answer = input(
                f"Force-release {counted(count, 'lock')} matching "
                f"{_quoted(pattern)}? Their holders lose them. [y/N] "
            )
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("Cancelled; nothing was released.")
        return count

    def _on_terminal(self) -> bool:
        isatty = getattr(self.stdout, "isatty", None)
        return bool(isatty and isatty())

    def _stats(self, manager: LockManager, options: dict[str, Any]) -> None:
        found = sorted(manager.stats(options["pattern"]), key=sort_key(options["sort"]))
        if options["json"]:
            self.stdout.write(safe_json([stats.as_json() for stats in found], indent=2))
            return
        if not found:
            self.stdout.write("No statistics recorded for these locks.")
            return
        rows = [_stats_cells(stats) for stats in found]
        widths = [
            min(_MAX_WIDTH, max(len(column), *(len(row[i]) for row in rows)))
            for i, column in enumerate(_STATS_COLUMNS)
        ]
        self.stdout.write(self.style.MIGRATE_HEADING(_line(_STATS_COLUMNS, widths)))
        for row in rows:
            self.stdout.write(_line(row, widths))
        flagged = [stats for stats in found if stats.warnings]
        for stats in flagged:
            for warning in stats.warnings:
                self.stdout.write(self.style.WARNING(f"{_quoted(stats.name)}: {warning}"))
        self.stdout.write(
            f"{counted(len(found), 'lock name')}; times are the upper bounds "
            "of their histogram buckets (or the longest hold, when shorter); suggested timeout: "
            "p99 hold x 2 + 1 s."
        )

    def _doctor(self, options: dict[str, Any]) -> None:
        findings = diagnose(options["using"])
        if options["json"]:
            self.stdout.write(safe_json([finding.as_json() for finding in findings], indent=2))
        else:
            styles = {OK: self.style.SUCCESS, WARNING: self.style.WARNING, ERROR: self.style.ERROR}
            width = max(len(finding.check) for finding in findings)
            for finding in findings:
                level = styles[finding.level](f"{finding.level:<7}")
                fix = f" Fix: {finding.fix}." if finding.fix and finding.level != OK else ""
                line = f"{finding.check:<{width}}  {finding.subject}: {finding.message}.{fix}"
                self.stdout.write(f"{level}  {safe_text(line)}")
            counts = {
                level: sum(f.level == level for f in findings) for level in (OK, WARNING, ERROR)
            }
            self.stdout.write(
                f"{len(findings)} items: {counts[OK]} ok, {counted(counts[WARNING], 'warning')}, "
                f"{counted(counts[ERROR], 'error')}."
            )
        errors = sum(finding.level == ERROR for finding in findings)
        if errors:
            raise CommandError(f"The doctor found {counted(errors, 'error')}.", returncode=1)

    def _held(self, manager: LockManager, name: str) -> LockInfo:
        info = manager.get(name)
        if info is None and manager.lock(name).locked():
            raise CommandError(
                f"The lock {_quoted(name)} is held, but its data is not readable (this library "
                "did not write it); `locks release` frees it."
            )
        if info is None:
            raise CommandError(f"No lock named {_quoted(name)} is held.")
        return info

    def _write_json_array(self, locks: Iterable[LockInfo]) -> None:
        """Stream a JSON array, one object per line, without holding the list in memory."""
        locks = iter(locks)
        first = next(locks, None)  # errors (a bad pattern, Redis down) before any output
        self.stdout.write("[", ending="")
        separator = "\n"
        for info in itertools.chain([first] if first else [], locks):
            self.stdout.write(separator + safe_json(as_json(info)), ending="")
            separator = ",\n"
        self.stdout.write("\n]")

    def _write_table(self, locks: Iterator[LockInfo]) -> None:
        """Columns sized from the first rows, then streamed; an empty listing says so."""
        sample: list[tuple[str, ...]] = []
        columns: tuple[str, ...] = _COLUMNS
        for info in locks:
            columns = _columns(info)
            sample.append(_cells(info))
            if len(sample) == _WIDTH_SAMPLE:
                break
        if not sample:
            self.stdout.write("No held locks.")
            return
        widths = [
            min(_MAX_WIDTH, max(len(column), *(len(row[i]) for row in sample)))
            for i, column in enumerate(columns)
        ]
        self.stdout.write(self.style.MIGRATE_HEADING(_line(columns, widths)))
        count = 0
        for row in itertools.chain(sample, (_cells(info) for info in locks)):
            count += 1
            self.stdout.write(_line(row, widths))
        self.stdout.write(f"{counted(count, 'held lock')}.")
