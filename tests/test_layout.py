"""The package's shape, kept: layers that import only downwards, no import circle, no module
over 400 lines, no block of code written twice (issue 22), no module reaching into another
object's private attributes or importing another module's private names (issue 37).

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
    frozenset({"core", "rate", "many"}),
    frozenset({"ops"}),
    frozenset({"locked", "unique", "fencing", "leader", "cached"}),
    frozenset({"admin", "management", "checks", "apps", "models", "migrations", "__init__"}),
    frozenset({"testing"}),
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


#: Private attributes of other libraries the package must read, each for its reason (the same
#: lines tell ruff's SLF001 why, in their noqa comment). Any other ``x._name`` with ``x`` not
#: ``self`` or ``cls`` reaches into this package's own objects: give it a public seam instead.
THIRD_PARTY_PRIVATE = {
    "_meta": "Django's documented Model _meta API",
    "_state": "Django's documented model instance state (and celery._state)",
    "_db": "Django's queryset: the database it was routed to",
    "_params": "Django's cache: the options it was made with",
    "_cache": "Django's RedisCache: its client, which it exposes no other way",
    "_request": "Django REST framework's Request: the HttpRequest it wraps",
    "_get_running_loop": "asyncio: the running loop, without raising",
    "_actions": "argparse: a parser's options",
    "_add_action": "argparse: add an Action object",
    "_get_current_object": "Celery's proxy: the object behind it",
    "_get_active_apps": "Celery's app registry",
    "_set_current_app": "Celery's app registry",
    "_tls": "Celery's app registry",
    "_sock": "redis-py/valkey-py connection: whether it is connected",
    "_writer": "redis-py/valkey-py asyncio connection: its stream",
    "_reader": "redis-py/valkey-py asyncio connection: its stream",
    "_connections": "redis-py/valkey-py asyncio cluster node: its connections",
    "_require_full_coverage": "redis-py cluster: an option kept only on its nodes manager",
    "_dynamic_startup_nodes": "redis-py cluster: an option kept only on its nodes manager",
    "_replace": "a named tuple's documented API",
    "_retries": "redis-py/valkey-py Retry: how many retries it makes",
}
# getattr(x, "_name") and its kin reach as ``x._name`` does.
_BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(module: str, path: Path, known: dict[str, Path]) -> list[str]:
    """Where ``module`` reads or writes another object's private attribute (``x._name``, or
    ``getattr(x, "_name")``, ``x`` not ``self``, ``cls`` or ``super()``), or imports another
    module's private name; third-party internals aside (:data:`THIRD_PARTY_PRIVATE`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.expr, ast.stmt)):  # the nodes that have a line
            continue
        target: ast.expr | None = None
        name = ""
        if isinstance(node, ast.Attribute):
            target, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _BY_NAME
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            target, name = node.args[0], node.args[1].value
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(NAME):
            for alias in node.names:  # a module named _x (Django skips it as a command) is fine
                if _private(alias.name) and f"{node.module}.{alias.name}" not in known:
                    found.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
            continue
        if target is None or not _private(name) or name in THIRD_PARTY_PRIVATE:
            continue
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            continue
        if isinstance(target, ast.Call) and getattr(target.func, "id", None) == "super":
            continue
        found.append(f"{module}:{node.lineno} reaches {ast.unparse(target)}.{name}")
    return found


def test_no_module_reaches_into_another_objects_private_attributes() -> None:
    """A room uses another room's front door: a public seam, not ``x._name``."""
    known = modules()
    reaches = [
        reach for module, path in known.items() for reach in private_reaches(module, path, known)
    ]
    assert reaches == []
