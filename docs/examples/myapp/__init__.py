"""The application the examples lock for: each call is recorded in ``calls``."""

from __future__ import annotations

calls: list[tuple[str, object]] = []


def record(what: str, value: object = None) -> None:
    calls.append((what, value))
