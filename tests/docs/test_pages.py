"""The documentation's code comes from tested files, and its commands are ones the command
takes: no page can show an example that drifted from the product."""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

import pytest

from django_redis_lock.management.commands.locks import Command

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
PAGES = sorted(path for path in DOCS.rglob("*.rst") if "_build" not in path.parts)
TESTS = Path(__file__).resolve().parent

# A literal block's first line that is Python code, not a command or its output.
PYTHON_LINE = re.compile(r"^(from |import |def |async def |class |@|[A-Z_]+ = |with |for )")


def _blocks(text: str) -> list[tuple[str, str]]:
    """(how the block is introduced, its dedented body) of each literal block of a page."""
    blocks = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith((".. code-block::", ".. code::")):
            kind = stripped
        elif stripped.endswith("::") and not stripped.startswith(".."):
            kind = "::"
        else:
            continue
        body = []
        for following in lines[i + 1 :]:
            if following.strip() and not following.startswith((" ", "\t")):
                break
            body.append(following)
        blocks.append((kind, textwrap.dedent("\n".join(body)).strip()))
    return blocks


def _code(text: str) -> str:
    """The code of a block without the options (``:caption:``...) a directive may have."""
    return "\n".join(line for line in text.splitlines() if not re.match(r"^:\w[\w-]*:", line))


@pytest.mark.parametrize("page", [*PAGES, ROOT / "README.rst"], ids=lambda path: path.name)
def test_python_on_a_page_comes_from_a_tested_file(page: Path) -> None:
    """A page shows Python only through literalinclude (of docs/examples/, which tests run);
    the README, which PyPI shows without includes, only blocks that test_readme.py runs."""
    for kind, body in _blocks(page.read_text()):
        code = _code(body)
        if kind == "::" and not any(PYTHON_LINE.match(line) for line in code.splitlines()):
            continue  # a command's output, a key layout, a tree
        if kind != "::" and "python" not in kind:
            continue
        if page.name == "README.rst":
            assert kind == ".. code-block:: python", f"README.rst: Python not run:\n{code}"
            continue
        pytest.fail(f"{page.name}: Python not from a tested file:\n{code}")


def test_every_example_is_shown_and_tested() -> None:
    shown = "\n".join(page.read_text() for page in PAGES)
    # The docs' tests, and those beside the features they show (topologies, metrics).
    tests = "\n".join(path.read_text() for path in TESTS.glob("*.py")) + "\n".join(
        path.read_text() for path in (ROOT / "tests").glob("*/test_*.py")
    )
    for example in sorted(EXAMPLES.glob("*.py")):
        assert f"examples/{example.name}" in shown, f"{example.name} is on no page"
        assert f'"{example.stem}"' in tests, f"{example.name} is run by no test"


def _commands() -> list[tuple[str, str]]:
    """Every ``manage.py locks`` command line shown in the docs and the README."""
    found = []
    for page in [*PAGES, ROOT / "README.rst"]:
        for line in page.read_text().splitlines():
            match = re.search(r"\$ python3? manage\.py locks (.*)$", line)
            if match:
                found.append((page.name, match[1]))
    return found


@pytest.mark.parametrize(("page", "arguments"), _commands())
def test_every_command_shown_is_one_the_command_takes(page: str, arguments: str) -> None:
    parser = Command().create_parser("manage.py", "locks")
    try:
        parser.parse_args(shlex.split(arguments))
    except SystemExit as exc:
        pytest.fail(f"{page}: manage.py locks {arguments} is refused ({exc})")


def test_the_pages_are_in_the_table_of_contents() -> None:
    listed = (DOCS / "index.rst").read_text() + (DOCS / "performance.rst").read_text()
    for page in PAGES:
        name = page.relative_to(DOCS).with_suffix("").as_posix()
        if name != "index":
            assert re.search(rf"^\s+{re.escape(name)}$", listed, re.MULTILINE), name


@pytest.mark.parametrize(
    "shown",
    [*sorted(EXAMPLES.glob("*.py")), ROOT / "README.rst"],
    ids=lambda path: path.name,
)
def test_no_example_imports_the_demo_project(shown: Path) -> None:
    """What a reader pastes imports the product and their own app (``myapp``, whose stand-in
    the tests provide), never testproject, which they do not have."""
    imports = re.findall(r"^\s*(?:from|import) (\S+)", shown.read_text(), re.MULTILINE)
    assert not [name for name in imports if name.split(".")[0] in ("testproject", "tests")]
