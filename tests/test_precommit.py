"""The pre-commit hooks (.pre-commit-config.yaml) run what `python3 dev.py lint` runs: each of
its checks, by name, in the project's virtualenv."""

from __future__ import annotations

from pathlib import Path

import pytest

import dev

CONFIG = Path(dev.ROOT, ".pre-commit-config.yaml")


def _hooks() -> list[dict[str, str]]:
    """The hooks of the configuration, each as its keys and values. The file is plain YAML of
    one ``key: value`` a line (no YAML library is a requirement of the project), which this
    reads line by line: a hook starts at its ``- id:``."""
    hooks: list[dict[str, str]] = []
    repos: list[str] = []
    for line in CONFIG.read_text().splitlines():
        text = line.split(" #", 1)[0].strip()
        if not text or text.startswith("#"):
            continue
        key, _, value = text.removeprefix("- ").partition(":")
        if key == "repo":
            repos.append(value.strip())
        elif key == "id":
            hooks.append({})
        if hooks and value.strip():
            hooks[-1][key] = value.strip()
    assert repos == ["local"], "the hooks are local: they download nothing"
    return hooks


def test_the_hooks_run_each_check_of_dev_py_lint_once() -> None:
    hooks = _hooks()
    assert [hook["id"] for hook in hooks] == list(dev.LINT_CHECKS)
    for hook in hooks:
        assert hook["entry"] == f"python3 dev.py lint {hook['id']}"
        assert hook["language"] == "system"  # dev.py runs it in the project's virtualenv
        assert hook["pass_filenames"] == "false"  # dev.py lint takes check names, not files


def test_lint_runs_the_checks_named() -> None:
    # Those two checks run docutils, a lint requirement: an sdist's test run has no lint tools.
    pytest.importorskip("docutils", reason="docutils (requirements/lint.txt) is not installed")
    assert dev.run_lint(["readme", "faults-page"]) == 0
    with pytest.raises(SystemExit) as exited:
        dev.run_lint(["ruff"])
    assert exited.value.code == 2
