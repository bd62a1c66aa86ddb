#!/usr/bin/env python
"""Django's command-line utility for the demo project (testproject)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run a management command with testproject's settings unless told otherwise."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    try:
        from django.core.management import execute_from_command_line
    except ImportError as exc:
        raise ImportError(
            "Couldn't import Django. Run `python3 dev.py demo` (it sets up .venv), or activate "
            "a virtual environment where this project is installed."
        ) from exc
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
