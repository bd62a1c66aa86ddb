"""A PostgreSQL server of the tests' own: ``initdb`` in a temporary directory, ``postgres`` on
a free loopback port, stopped by its PID. Debian's binaries (``/usr/lib/postgresql/N/bin``) or
any on PATH; ``.ci/run`` installs them when absent.

As root (CI containers), the server runs as the ``postgres`` user (``nobody`` without one):
PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from testproject.redis_server import free_port

# The longest the server may take to accept connections, or to stop.
START_SECONDS = 60.0
STOP_SECONDS = 30.0


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: the newest Debian install, else PATH's."""
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version, reverse=True):
        if (folder / "initdb").exists() and (folder / "postgres").exists():
            return folder
    found = shutil.which("initdb")
    if found and (Path(found).resolve().parent / "postgres").exists():
        return Path(found).resolve().parent
    return None


def _version(folder: Path) -> float:
    try:
        return float(folder.parent.name)
    except ValueError:
        return 0.0


def missing() -> str | None:
    """Why no PostgreSQL can be started here (None: one can)."""
    if binaries() is None:
        return "no PostgreSQL here: install Debian's postgresql (initdb and postgres)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install -r requirements/test.txt)"
    return None


def _runs_as() -> tuple[int, int] | None:
    """The user and group ids the server runs as: another user than root (None: ours)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root, and neither a postgres nor a nobody user exists")


@contextlib.contextmanager
def postgres_server() -> Iterator[dict[str, object]]:
    """A running server with a database ``locks``; Django's DATABASES entry for it."""
    folder = binaries()
    assert folder is not None, missing()
    as_user = _runs_as()
    with tempfile.TemporaryDirectory(prefix="redis-lock-pg-") as root:
        data, sockets = Path(root, "data"), Path(root, "sockets")
        sockets.mkdir()
        if as_user is not None:
            os.chown(root, *as_user)
            os.chown(sockets, *as_user)
        user, group = as_user or (None, None)
        subprocess.run(
            [folder / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
             "--no-sync", "--locale=C"],
            check=True, capture_output=True, timeout=START_SECONDS, user=user, group=group,
        )  # fmt: skip
        port = free_port()
        log = open(Path(root, "server.log"), "wb")  # noqa: SIM115  (closed below)
        server = subprocess.Popen(
            [folder / "postgres", "-D", data, "-p", str(port), "-k", sockets,
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT, user=user, group=group,
        )  # fmt: skip
        try:
            _wait_ready(server, port, Path(root, "server.log"))
            _create_database(port)
            yield {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": "locks",
                "USER": "postgres",
                "HOST": "127.0.0.1",
                "PORT": str(port),
            }
        finally:
            server.send_signal(signal.SIGINT)  # a fast shutdown: clients are disconnected
            try:
                server.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(STOP_SECONDS)
            log.close()


def _connect(port: int, dbname: str = "postgres") -> Any:
    import psycopg

    return psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname=dbname, autocommit=True,
        connect_timeout=5,
    )  # fmt: skip


def _wait_ready(server: subprocess.Popen[bytes], port: int, log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + START_SECONDS
    while True:
        if server.poll() is not None:
            raise RuntimeError(
                f"PostgreSQL exited ({server.returncode}): {log.read_text()[-2000:]}"
            )
        try:
            _connect(port).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # the server says nothing when it is ready: ask again


def _create_database(port: int) -> None:
    connection = _connect(port)
    try:
        connection.execute("CREATE DATABASE locks")
    finally:
        connection.close()
