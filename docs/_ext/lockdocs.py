"""Reference pages made from the code, so that they cannot drift from it.

``.. lock-settings::``
    every key of ``REDIS_LOCK``: its default (``conf.DEFAULTS``) and its documentation (the
    ``#:`` comment of its attribute in ``conf.LockSettings``);
``.. system-checks::``
    every system check id with what it reports (``checks.CHECKS``);
``.. locks-command::``
    each subcommand of ``manage.py locks`` with its arguments and their help (its parser).
"""

from __future__ import annotations

import argparse
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class _Generated(SphinxDirective):
    """A directive whose content is reStructuredText made by :meth:`lines`."""

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section() if self.in_section() else nodes.container()
        content = StringList(self.lines(), source=f"<{self.name}>")
        nested_parse_with_titles(self.state, content, container)
        return list(container.children)

    def in_section(self) -> bool:
        return True


class LockSettings(_Generated):
    """Every REDIS_LOCK key, in the order of conf.DEFAULTS."""

    def lines(self) -> list[str]:
        from django_redis_lock.conf import DEFAULTS

        docs = ModuleAnalyzer.for_module("django_redis_lock.conf").find_attr_docs()
        self.env.note_dependency(ModuleAnalyzer.for_module("django_redis_lock.conf").srcname)
        lines: list[str] = []
        for key, default in DEFAULTS.items():
            doc = docs.get(("LockSettings", key))
            if not doc:
                raise self.error(f"REDIS_LOCK[{key!r}] has no #: documentation in conf.py")
            lines += [".. _setting-" + key.lower().replace("_", "-") + ":", "", key]
            lines += ["-" * len(key), "", f"Default: ``{default!r}``", "", *doc, ""]
        return lines


class SystemChecks(_Generated):
    """Every system check id, errors first."""

    def lines(self) -> list[str]:
        from django_redis_lock import checks

        self.env.note_dependency(checks.__file__)
        lines = [".. list-table::", "   :header-rows: 1", "   :widths: 12 10 78", ""]
        lines += ["   * - Id", "     - Level", "     - Reported when"]
        for check, text in checks.CHECKS.items():
            level = "Error" if check.startswith("E") else "Warning"
            lines += [
                f"   * - .. _check-{check.lower()}:",
                "",
                f"       ``django_redis_lock.{check}``",
                f"     - {level}",
                f"     - {text}",
            ]
        return lines

    def in_section(self) -> bool:
        return False


class LocksCommand(_Generated):
    """manage.py locks: its own options, then each subcommand's."""

    def lines(self) -> list[str]:
        from django.core.management.base import BaseCommand

        from django_redis_lock.management.commands import locks

        self.env.note_dependency(locks.__file__)
        parser = locks.Command().create_parser("manage.py", "locks")
        common = {
            option
            for action in BaseCommand().create_parser("manage.py", "x")._actions
            for option in action.option_strings
        }
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        helps = {choice.dest: choice.help for choice in subparsers._choices_actions}
        lines = ["Options of ``locks`` itself (before or after the subcommand):", ""]
        lines += _arguments(parser, common)
        for name, subparser in subparsers.choices.items():
            title = f"locks {name}"
            lines += [f".. _command-{name}:", "", title, "-" * len(title), ""]
            lines += [str(helps.get(name) or ""), "", ".. code-block:: text", ""]
            usage = subparser.format_usage().strip().removeprefix("usage: ")
            lines += ["   " + line for line in usage.splitlines()] + [""]
            lines += _arguments(subparser, common | _own(parser))
        return lines


def _own(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _arguments(parser: argparse.ArgumentParser, skip: set[str]) -> list[str]:
    """A definition list of the parser's arguments, without those in ``skip``."""
    lines: list[str] = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings and set(action.option_strings) <= skip:
            continue
        names = action.option_strings or [action.dest.upper()]
        shown = ", ".join(f"``{name}``" for name in names)
        if action.choices and action.option_strings:
            shown += " {" + ", ".join(map(str, action.choices)) + "}"
        text = action.help or ""
        if action.dest not in ("json", "yes", "dry_run") and action.default not in (None, False):
            text = text if "default" in text else f"{text} (default: {action.default})"
        text = text or "The lock name (exact: glob characters are literal)."
        lines += [shown, "   " + text.replace("\\", "\\\\").replace("*", "\\*"), ""]
    return lines


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("lock-settings", LockSettings)
    app.add_directive("system-checks", SystemChecks)
    app.add_directive("locks-command", LocksCommand)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
