"""The package's shape, kept: layers that import only downwards, no import circle, no module
over 400 lines, no block of code written twice (issue 22).

Read from the source with ``ast``, imports inside functions included, so that a shortcut taken
to dodge a circle shows here too.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections import defaultdict
from pathlib import Path

import pytest

import django_redis_lock

# The package imported (the checkout's, or the one installed from an sdist under test).
PACKAGE = Path(django_redis_lock.__file__).resolve().parent
NAME = PACKAGE.name

#: The layers, bottom first: a module may import its own layer's and those below, never above.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"exceptions", "signals", "conf", "validation", "display"}),
    frozenset({"scripts"}),
    frozenset({"stats"}),
    frozenset({"metrics"}),
    frozenset({"backends"}),
    frozenset({"runtime"}),
    frozenset({"core"}),
    frozenset({"ops"}),
    frozenset({"locked", "unique", "fencing", "leader"}),
    frozenset({"admin", "management", "checks", "apps", "models", "migrations", "__init__"}),
)
#: The longest a module may be, in lines.
MAX_LINES = 400
#: A block is this many code lines (comments, blank lines and imports aside).
BLOCK_LINES = 6


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def layer(module: str) -> int:
    """The layer of a module: of its first name under the package (the face: the top)."""
    first = module.split(".")[1] if "." in module else "__init__"
    for index, names in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS")


def imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its source."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                )
            for alias in node.names:  # a submodule by name, else a name of the module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in found if name in known and name != module}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imports(module, path, known) for module, path in known.items()}


def test_every_import_goes_down_the_layers_or_stays_in_its_own() -> None:
    upward = [
        f"{module} ({layer(module)}) imports {target} ({layer(target)})"
        for module, targets in graph().items()
        for target in sorted(targets)
        if layer(target) > layer(module)
    ]
    assert upward == []


def test_no_import_circle() -> None:
    edges = graph()
    circles: list[list[str]] = []
    # Tarjan's strongly connected components: a component of more than one module is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in edges[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in edges:
        if module not in index:
            visit(module)
    assert circles == []


@pytest.mark.parametrize("module", sorted(modules()))
def test_no_module_is_too_long(module: str) -> None:
    lines = len(modules()[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines: split it by what it does"


# Lines too thin to make a block alike: a name and a comma (in a list of imports or options),
# punctuation, a lone keyword.
_THIN = re.compile(r"[\w.]+,?|[\W_]*|(?:pass|else:|try:|finally:|return|continue|break)")


def code_lines(path: Path) -> list[tuple[int, str]]:
    """The lines that count, numbered: no blank line, comment, import, docstring, nor a line
    of punctuation or a lone keyword."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skipped.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                skipped.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.split("  #")[0].strip()
        if number in skipped or not text or text.startswith("#"):
            continue
        if _THIN.fullmatch(text):
            continue
        found.append((number, " ".join(text.split())))
    return found


def test_no_block_of_code_is_written_twice() -> None:
    """Six code lines alike in two places: one piece of code should serve both."""
    seen: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for module, path in modules().items():
        lines = code_lines(path)
        for at in range(len(lines) - BLOCK_LINES + 1):
            window = lines[at : at + BLOCK_LINES]
            digest = hashlib.sha1("\n".join(text for _, text in window).encode()).hexdigest()
            seen[digest].append((module, window[0][0]))
    repeated = []
    for places in seen.values():
        distinct = [places[0]]
        for module, line in places[1:]:  # overlapping windows of one run count once
            if all(module != other or abs(line - at) > BLOCK_LINES for other, at in distinct):
                distinct.append((module, line))
        if len(distinct) > 1:
            repeated.append(", ".join(f"{module}:{line}" for module, line in distinct))
    assert repeated == []


def test_the_core_knows_backends_by_their_protocol_only() -> None:
    """The lock core asks a backend what it can do (``backends.base``), never which topology
    it is: no module of core/ imports a topology's module (issue 37)."""
    topologies = {"single", "cluster", "quorum", "quorum_replies"}
    reaches = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        if module.startswith(f"{NAME}.core.")
        for target in sorted(targets)
        if target.rpartition(".")[2] in topologies and ".backends." in target
    ]
    assert reaches == []
