"""How ``manage.py locks doctor`` reports: the settings the system checks refuse, then what the
servers say (``ops.doctor``), each finding once, wrapped to the terminal's width."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

from django.core.checks import ERROR as CHECK_ERROR
from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured

from django_redis_lock.checks import check_settings
from django_redis_lock.display import safe_text
from django_redis_lock.management.commands._output import terminal_width
from django_redis_lock.ops.doctor import ERROR, OK, WARNING, Finding, diagnose

#: The system checks whose subject the doctor asks the servers about itself, now: reachable
#: (W008), eviction (W010), replicas (W005, W006, W011), socket timeouts (W003, W007, W012),
#: listing (W002). Reported by both, they would be said twice.
ASKED_AGAIN = frozenset(f"django_redis_lock.W{n:03}" for n in (2, 3, 5, 6, 7, 8, 10, 11, 12))
#: Lines are as wide as the terminal, within these bounds (80 when it is not a terminal).
MIN_WIDTH, DEFAULT_WIDTH, MAX_WIDTH = 60, 80, 120


def findings(using: Any) -> list[Finding]:
    """The settings' findings (the system checks of this app, which a call from code or
    ``--skip-checks`` would not run), then the servers'."""
    found = list(_settings_findings())
    try:
        found += diagnose(using)
    except (ValueError, TypeError, ImproperlyConfigured) as exc:  # settings it cannot use
        subject = "REDIS_LOCK['CACHE']" if using is None else f"cache {using!r}"
        found.append(Finding(ERROR, "reachable", subject, str(exc)))
    return found


def _settings_findings() -> Iterator[Finding]:
    for message in check_settings():
        if message.id not in ASKED_AGAIN:
            yield _finding(message)


def _finding(message: CheckMessage) -> Finding:
    level = ERROR if message.level >= CHECK_ERROR else WARNING
    return Finding(level, "settings", message.id or "", str(message.msg), message.hint or "")


def width(stream: Any) -> int:
    """The width of the terminal ``stream`` writes to (see ``terminal_width``), within the
    bounds."""
    return min(MAX_WIDTH, max(MIN_WIDTH, terminal_width(stream, DEFAULT_WIDTH)))


def sentence(text: str) -> str:
    """``text`` ending in one period (messages and hints may end in one already)."""
    return text.rstrip().rstrip(".") + "."


def lines(finding: Finding, check_width: int, columns: int) -> list[str]:
    """A finding's lines, its level left out (the caller styles it): the check, then the
    subject and message wrapped to ``columns`` (with the level's), indented under their start;
    the fix, when there is one to make, as a paragraph of its own."""
    indent = " " * (len(WARNING) + 2 + check_width + 2)
    said = _wrapped(f"{finding.subject}: {sentence(finding.message)}", columns - len(indent))
    if finding.fix and finding.level != OK:
        said += _wrapped(f"Fix: {sentence(finding.fix)}", columns - len(indent))
    return [f"{finding.check:<{check_width}}  {said[0]}", *(indent + part for part in said[1:])]


def _wrapped(text: str, columns: int) -> list[str]:
    # Long words (an address, a path) are cut too: no line outgrows the terminal.
    return textwrap.wrap(safe_text(text), columns, break_on_hyphens=False)
