"""Real pytest runs of a small project's tests, in a process of their own: what the kit's
pytest plugin does in a user's project (its own settings, its own server, its own session)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
#: The longest one run may take.
RUN_SECONDS = 120.0
# What the outer run exports for itself, not for a user's project (tests/conftest.py).
_OURS = ("REDIS_URL", "DJANGO_REDIS_LOCK_TEST_STARTED_REDIS_URL", "PYTEST_ADDOPTS")


def write_project(directory: Path, files: Mapping[str, str]) -> None:
    """Write ``files`` (path: text) under ``directory``, with a pytest.ini that makes it the
    run's root (no setup.cfg of ours applies)."""
    for name, text in {"pytest.ini": "[pytest]\n", **files}.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def pytest_command(*args: str) -> list[str]:
    """``python -m pytest ARGS`` with this interpreter."""
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]


def environment(
    directory: Path, settings: str, paths: Sequence[Path] = (), **extra: str
) -> dict[str, str]:
    """The run's environment: this checkout's package first on the path, Django's settings
    from ``settings``, nothing of the outer run's Redis."""
    env = {key: value for key, value in os.environ.items() if key not in _OURS}
    env["PYTHONPATH"] = os.pathsep.join(str(path) for path in (directory, *paths, ROOT))
    env["DJANGO_SETTINGS_MODULE"] = settings
    env.update(extra)
    return env


def run_pytest(
    directory: Path,
    *args: str,
    settings: str = "settings",
    paths: Sequence[Path] = (),
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``directory``, bounded by RUN_SECONDS."""
    return subprocess.run(
        pytest_command(*args),
        cwd=directory,
        env=environment(directory, settings, paths, **extra),
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def redis_server_pid(url: str) -> int | None:
    """The PID of the redis-server listening on the port of ``url`` (read from /proc)."""
    port = str(urlsplit(url).port)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if "redis-server" in argv[0] and (port in argv or argv[0].endswith(f":{port}")):
            return int(entry.name)
    return None


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        status = (Path("/proc") / str(pid) / "status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
