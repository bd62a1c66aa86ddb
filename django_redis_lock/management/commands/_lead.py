"""``manage.py locks lead NAME [--timeout S] [--grace S] [--label L] -- COMMAND [ARGS...]``: the
arguments read, checked before anything is held, and the supervisor run (``leader.supervisor``).

Argparse cannot be trusted with a command line after ``--`` that has options of its own (it
drops a second ``--`` and reads the first as the end of the subcommand's options), so everything
after NAME is taken as it is and split here at the first ``--``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_redis_lock.leader import Leadership
from django_redis_lock.leader.supervisor import Supervisor

#: The grace a child has between SIGTERM and SIGKILL, by default (seconds).
DEFAULT_GRACE = 10.0
#: How ``lead`` is shown in ``--help``.
USAGE = "lead NAME [--timeout S] [--grace S] [--label L] -- COMMAND [ARGS...]"


def add_options(parser: CommandParser) -> None:
    """The options ``lead`` takes, before NAME or between NAME and ``--``."""
    parser.add_argument("--timeout", type=_seconds, help="The leadership's lease (seconds).")
    parser.add_argument(
        "--grace",
        type=_seconds,
        default=DEFAULT_GRACE,
        help=f"Seconds between SIGTERM and SIGKILL to the command (default {DEFAULT_GRACE:g}).",
    )
    parser.add_argument("--label", help="Shown to operators (default: the command line).")


def _seconds(text: str) -> float:
    value = float(text)  # ValueError: argparse's "invalid _seconds value"
    if not (math.isfinite(value) and value > 0):
        raise ValueError(text)
    return value


def split(parser: CommandParser, options: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The options (those given after NAME too) and the command line, or CommandError (exit
    status 2) when there is no command."""
    rest: Sequence[str] = options.get("rest") or []
    if "--" in rest:
        at = list(rest).index("--")
        between, command = list(rest[:at]), list(rest[at + 1 :])
    elif rest and not rest[0].startswith("-"):
        between, command = [], list(rest)
    else:
        between, command = list(rest), []
    if between:  # options between NAME and "--": read as if given before NAME
        late = vars(parser.parse_args([*between, options["name"]]))
        options = {**options, **{key: late[key] for key in ("timeout", "grace", "label")}}
    if not command:
        raise CommandError(f"Give the command to run after '--': locks {USAGE}", returncode=2)
    return options, command


def run(options: dict[str, Any], command: list[str], say: Any) -> int:
    """Lead ``options["name"]`` and run ``command`` while leading; the command's exit code.
    A bad name, lease or alias is a CommandError (status 2) before anything is held."""
    label = options["label"] or " ".join(command)
    try:
        leadership = Leadership(
            options["name"],
            timeout=options["timeout"],
            label=label[:256],
            using=options["using"],
        )
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc), returncode=2) from exc
    except Exception as exc:  # an alias that is not a cache: ImproperlyConfigured and others
        raise CommandError(f"Cannot lead {options['name']!r}: {exc}", returncode=2) from exc
    return Supervisor(leadership, command, grace=options["grace"], say=say).run()
