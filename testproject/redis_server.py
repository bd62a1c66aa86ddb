"""The private redis-servers of the tests, the demo and dev.py: the test kit's
``django_redis_lock/testing/server.py``, loaded by its path (importing it by name would import
the package, and so Django, which dev.py may not have yet), and a group of them for the tests.

Standard library only, as that module is.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_NAME = "django_redis_lock.testing.server"


def _server_module() -> ModuleType:
    """django_redis_lock.testing.server, loaded once from its file under its own name (so that
    the package, imported later, finds it and its classes are the same)."""
    module = sys.modules.get(_NAME)
    if module is not None:
        return module
    spec = importlib.util.find_spec("django_redis_lock")  # finds it without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("django_redis_lock is not installed, nor in the working directory")
    path = Path(spec.submodule_search_locations[0]) / "testing" / "server.py"
    loader_spec = importlib.util.spec_from_file_location(_NAME, path)
    assert loader_spec is not None
    assert loader_spec.loader is not None
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[_NAME] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module


if TYPE_CHECKING:
    from django_redis_lock.testing.server import (
        HOST,
        PORT_ATTEMPTS,
        PROBE_INTERVAL,
        START_TIMEOUT,
        STOP_TIMEOUT,
        RedisServer,
        command,
        die_with_parent,
        find_embedded_redis_server,
        find_redis_server,
        free_port,
        ping,
    )

__all__ = [
    "HOST",
    "PORT_ATTEMPTS",
    "PROBE_INTERVAL",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "RedisServer",
    "RedisServerGroup",
    "command",
    "die_with_parent",
    "find_embedded_redis_server",
    "find_redis_server",
    "free_port",
    "ping",
]

if not TYPE_CHECKING:
    _module = _server_module()
    globals().update(
        {name: getattr(_module, name) for name in __all__ if name != "RedisServerGroup"}
    )


class RedisServerGroup:
    """Starts RedisServers on demand and stops all of them at the end (the `redis_factory`)."""

    def __init__(self, *, binary: str | None = None) -> None:
        """binary: the redis-server every server of the group runs (default: find one)."""
        self.binary = binary
        self.servers: list[RedisServer] = []

    def __call__(self, *, port: int | None = None, extra_args: Sequence[str] = ()) -> RedisServer:
        """Start a plain server."""
        return self._add(RedisServer(binary=self.binary, port=port, extra_args=extra_args))

    def replica(self, master: RedisServer, *, wait_sync: bool = True) -> RedisServer:
        """Start a replica of `master`; by default, return once it has synced."""
        server = self._add(RedisServer.replica(master.host, master.port, binary=self.binary))
        if wait_sync:
            server.wait_until_synced()
        return server

    def sentinel(self, master: RedisServer, master_name: str = "mymaster") -> RedisServer:
        """Start a Sentinel monitoring `master` under `master_name`."""
        return self._add(
            RedisServer.sentinel(master.host, master.port, master_name, binary=self.binary)
        )

    def __iter__(self) -> Iterator[RedisServer]:
        return iter(self.servers)

    def stop_all(self) -> None:
        """Stop every server started by this group, whatever state it is in."""
        while self.servers:
            self.servers.pop().stop()

    def _add(self, server: RedisServer) -> RedisServer:
        server.start()
        self.servers.append(server)
        return server
