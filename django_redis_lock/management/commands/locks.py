"""``manage.py locks``: list, show, release and clear held locks; stats of hold and wait times.

Listing streams from SCAN, so memory stays flat however many locks are held; ``--json`` prints
one JSON array whose objects carry name, fencing_token, owner, label, acquired_at (ISO 8601)
and ttl.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redis_lock.display import counted, safe_json, safe_text
from django_redis_lock.exceptions import LockUnavailable
from django_redis_lock.management.commands import _doctor as doctor
from django_redis_lock.management.commands import _lead as lead_command
from django_redis_lock.management.commands._output import (
    AVOIDED_COLUMNS,
    COLUMNS,
    NARROWEST,
    RATE_COLUMNS,
    STATS_COLUMNS,
    TABLE_WIDTH,
    WIDTH_SAMPLE,
    as_json,
    bar,
    cells,
    columns,
    line,
    quoted,
    shown_fields,
    stats_cells,
    terminal_width,
    widths,
)
from django_redis_lock.ops import get_lock_manager
from django_redis_lock.ops.doctor import ERROR, OK, WARNING
from django_redis_lock.ops.manager import LockManager
from django_redis_lock.ops.records import LockInfo, Released, SeveralHolders
from django_redis_lock.stats import SORT_KEYS, sort_key

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


def _aliases(text: str) -> str | list[str]:
    """``--using``: one cache alias, or a quorum's separated by commas."""
    return [alias.strip() for alias in text.split(",")] if "," in text else text


def _accept_common_options(subcommand: CommandParser, parser: CommandParser) -> None:
    """Give ``subcommand`` the common options of ``parser`` (``--settings``, ``-v``, ``--using``),
    listed after its own: given after the subcommand they apply, else the values given before
    it (or the defaults) stand."""
    for action in parser._actions:  # noqa: SLF001  argparse has no public list of a parser's options
        if action.dest in _COMMON_OPTIONS:
            option = copy.copy(action)
            option.default = argparse.SUPPRESS
            subcommand._add_action(option)  # noqa: SLF001  argparse has no public way to add an Action object


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
        release = commands.add_parser(
            "release",
            help="Force-release one lock, or one holder of a semaphore; reset a rate limit.",
        )
        release.add_argument("name")
        release.add_argument(
            "--token",
            type=int,
            help="Only the hold with this fencing token (needed for a name with several "
            "holders: a semaphore, readers).",
        )
        release.add_argument(
            "--all",
            action="store_true",
            help="Every holder of a name with several (a semaphore's places, readers).",
        )
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
        lead = commands.add_parser(
            "lead",
            usage=f"manage.py locks {lead_command.USAGE}",
            help="Run a command only while this process leads NAME (one instance across "
            "machines); SIGTERM stops it and hands the leadership over at once.",
        )
        lead.add_argument("name")
        lead_command.add_options(lead)
        lead.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        self._lead_parser = lead
        for subcommand in (listing, show, release, clear, stats, doctor, lead):
            _accept_common_options(subcommand, parser)

    def execute(self, *args: Any, **options: Any) -> str | None:
        if options.get("subcommand") == "doctor":
            # The doctor runs this app's system checks itself and reports each finding once,
            # from a shell and from code alike: Django's run before it would say some twice.
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["subcommand"] == "doctor":
                return self._doctor(options)
            if options["subcommand"] == "lead":
                options, command = lead_command.split(self._lead_parser, options)
                say = self.stderr.write  # the command's own output keeps stdout
                raise SystemExit(lead_command.run(options, command, say))
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
        holds = self._held(manager, options["name"])
        if options["json"]:  # a lock's hold (a rate limit): an object; else an array
            shown = [as_json(info) for info in holds]
            single = len(holds) == 1 and holds[0].kind in ("lock", "rate")
            self.stdout.write(safe_json(shown[0] if single else shown, indent=2))
            return
        for i, info in enumerate(holds):
            if i:
                self.stdout.write("")
            for label, value in shown_fields(info):  # safe text
                self.stdout.write(f"{self.style.MIGRATE_LABEL(f'{label:>9}')}  {value}")

    def _release(self, manager: LockManager, options: dict[str, Any]) -> None:
        name, token = options["name"], options["token"]
        if options["all"]:
            if token is not None:
                raise CommandError("Pass --token or --all, not both.")
            released = manager.release_all(name)
        else:
            try:
                released = [r for r in [manager.force_release(name, token)] if r is not None]
            except SeveralHolders as exc:
                raise CommandError(
                    f"{quoted(name)} has {len(exc.tokens)} holders: pass --token to release "
                    f"one (their fencing tokens: {', '.join(map(str, exc.tokens))}), or --all "
                    "to release every one."
                ) from None
            except ValueError as exc:  # a token that fits no hold (past 64 bits)
                raise CommandError(str(exc)) from None
        if not released:
            held = f" with fencing token {token}" if token is not None else ""
            raise CommandError(f"No lock named {quoted(name)} is held{held}.")
        if len(released) > 1:
            self.stdout.write(self.style.SUCCESS(f"Released {len(released)} holders:"))
        for each in released:
            self.stdout.write(self._released(each))

    def _released(self, released: Released) -> str:
        """One line for one hold released: whose, which, and whether a waiter took it over."""
        info = released.info
        if info is not None and info.rate is not None:
            return (
                self.style.SUCCESS(f"Reset rate limit {quoted(released.name)} [{info.held_as}]")
                + f" ({info.rate.shown}): its next calls are admitted at once."
            )
        text = self.style.SUCCESS(
            f"Released {quoted(released.name)}"
            + (f" [{info.held_as}]" if info and info.held_as else "")
        ) + (
            f" (held by {safe_text(info.owner)}, fencing token {info.fencing_token})"
            if info
            else ", whose data this library did not write (not readable)"
        )
        taken = "; a waiting client took it over at once" if released.handed_over else ""
        return f"{text}{taken}."

    def _clear(self, manager: LockManager, options: dict[str, Any]) -> None:
        pattern = options["pattern"]
        if options["dry_run"]:
            count = 0
            for info in manager.list(pattern):  # each holder of a semaphore on its own line
                count += 1
                if info.rate is not None:
                    self.stdout.write(
                        f"would reset {safe_text(info.shown_name)}  ({info.rate.shown})"
                    )
                    continue
                self.stdout.write(
                    f"would release {safe_text(info.shown_name)}  (token {info.fencing_token}, "
                    f"held by {safe_text(info.owner)})"
                )
            self.stdout.write(f"{counted(count, 'lock')} would be released.")
            return
        total = None if options["yes"] else self._confirm(manager, pattern)
        if total == 0:
            self.stdout.write(f"No held lock matches {quoted(pattern)}.")
            return
        handed_over = 0

        def progress(released: int, handed: int) -> None:
            nonlocal handed_over
            handed_over = handed
            if self._on_terminal():
                shown = bar(released, total)
                self.stdout.write(f"\r{self.style.MIGRATE_LABEL('releasing')} {shown}", ending="")
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
                f"{quoted(pattern)}? Their holders lose them. [y/N] "
            )
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("Cancelled; nothing was released.")
        return count

    def _table_width(self) -> int:
        return max(NARROWEST, terminal_width(self.stdout, TABLE_WIDTH))

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
        rates = any(stats.admitted or stats.limited for stats in found)
        avoided = any(stats.avoided for stats in found)
        heads = (*STATS_COLUMNS, *RATE_COLUMNS[: 2 * rates], *AVOIDED_COLUMNS[:avoided])
        rows = [stats_cells(stats, rates, avoided) for stats in found]
        sized = widths(heads, rows, self._table_width())
        self.stdout.write(self.style.MIGRATE_HEADING(line(heads, sized)))
        for row in rows:
            self.stdout.write(line(row, sized))
        flagged = [stats for stats in found if stats.warnings]
        for stats in flagged:
            for warning in stats.warnings:
                self.stdout.write(self.style.WARNING(f"{quoted(stats.name)}: {warning}"))
        self.stdout.write(
            f"{counted(len(found), 'lock name')}; times are the upper bounds "
            "of their histogram buckets (or the longest hold, when shorter); suggested timeout: "
            "p99 hold x 2 + 1 s."
        )

    def _doctor(self, options: dict[str, Any]) -> None:
        found = doctor.findings(options["using"])
        if options["json"]:
            self.stdout.write(safe_json([finding.as_json() for finding in found], indent=2))
        else:
            styles = {OK: self.style.SUCCESS, WARNING: self.style.WARNING, ERROR: self.style.ERROR}
            check_width = max(len(finding.check) for finding in found)
            columns = doctor.width(self.stdout)
            for finding in found:
                first, *more = doctor.lines(finding, check_width, columns)
                self.stdout.write(f"{styles[finding.level](f'{finding.level:<7}')}  {first}")
                for line in more:
                    self.stdout.write(line)
            counts = {level: sum(f.level == level for f in found) for level in (OK, WARNING, ERROR)}
            self.stdout.write(
                f"{len(found)} items: {counts[OK]} ok, {counted(counts[WARNING], 'warning')}, "
                f"{counted(counts[ERROR], 'error')}."
            )
        errors = sum(finding.level == ERROR for finding in found)
        if errors:
            raise CommandError(f"The doctor found {counted(errors, 'error')}.", returncode=1)

    def _held(self, manager: LockManager, name: str) -> list[LockInfo]:
        holds = manager.holders(name)
        if not holds and manager.lock(name).locked():
            raise CommandError(
                f"The lock {quoted(name)} is held, but its data is not readable (this library "
                "did not write it); `locks release` frees it."
            )
        if not holds:
            raise CommandError(f"No lock named {quoted(name)} is held.")
        return holds

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
        heads: tuple[str, ...] = COLUMNS
        for info in locks:
            heads = columns(info)
            sample.append(cells(info))
            if len(sample) == WIDTH_SAMPLE:
                break
        if not sample:
            self.stdout.write("No held locks.")
            return
        sized = widths(heads, sample, self._table_width())
        self.stdout.write(self.style.MIGRATE_HEADING(line(heads, sized)))
        count = 0
        for row in itertools.chain(sample, (cells(info) for info in locks)):
            count += 1
            self.stdout.write(line(row, sized))
        self.stdout.write(f"{counted(count, 'held lock')}.")
