"""Run the documentation's examples (docs/examples/): their modules import as the pages show
them (``import views``, ``from myapp.work import ...``), and settings examples are run with
their addresses replaced by the test servers' ones."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
SENTINELS = '[("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26379)]'


def example(name: str) -> ModuleType:
    """The example module ``docs/examples/<name>.py``, imported."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def example_settings(name: str, replace: dict[str, str], **names: Any) -> dict[str, Any]:
    """The settings ``docs/examples/<name>.py`` defines, its text run with each key of
    ``replace`` replaced by its value (each must occur) and ``names`` defined."""
    text = (EXAMPLES / f"{name}.py").read_text()
    for old, new in replace.items():
        assert old in text, f"{old!r} is not in the example {name}"
        text = text.replace(old, new)
    namespace: dict[str, Any] = dict(names)
    exec(compile(text, str(EXAMPLES / f"{name}.py"), "exec"), namespace)
    return {key: value for key, value in namespace.items() if key.isupper()}


def calls() -> list[tuple[str, object]]:
    """What the examples' application did, since the last :func:`forget`."""
    return example("myapp").calls  # type: ignore[no-any-return]


def forget() -> None:
    calls().clear()
