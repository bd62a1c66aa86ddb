"""The operators' tools' tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _default_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and the doctor's lines take COLUMNS (pytest-xdist sets 80 in its workers): the
    tests see the default width unless they set one."""
    monkeypatch.delenv("COLUMNS", raising=False)
