"""A TCP proxy on loopback that the fault suite cuts and heals: a network partition between
processes of one machine.

``Proxy(target_port).start()`` listens on a free port of 127.0.0.1 and forwards every
connection it accepts to 127.0.0.1:``target_port``. Then:

``cut("reset")``
    every connection is closed with a reset (SO_LINGER 0: an RST, not a FIN) on both sides, and
    connections made until ``heal()`` are accepted and reset at once;
``cut("hold")``
    connections stay open but nothing passes either way: the proxy stops reading its sockets, so
    what is sent waits in them (as packets a network drops would be sent again and again), and
    connections made until ``heal()`` are accepted, not forwarded;
``heal()``
    everything flows again, what was held first.

The proxy's event loop runs in a thread of its own; the blocking calls above wait for it at most
CALL_TIMEOUT seconds each. Standard library only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

HOST = "127.0.0.1"
RESET: Literal["reset"] = "reset"
HOLD: Literal["hold"] = "hold"
MODES = (RESET, HOLD)
# The longest a blocking call waits for the proxy's thread, and a connection to the target.
CALL_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0
# SO_LINGER on, zero seconds: close() sends an RST and drops what was not sent.
RESET_ON_CLOSE = struct.pack("ii", 1, 0)

T = TypeVar("T")


class _End(asyncio.Protocol):
    """One end of a proxied connection: the client's, or the target's."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.transport: asyncio.Transport | None = None
        self.blocked = False  # the peer's write buffer is full: stop reading until it drains

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.link.made(self)

    def data_received(self, data: bytes) -> None:
        self.link.forward(self, data)

    def eof_received(self) -> bool:
        self.link.close()  # the other end gets what was forwarded, then a FIN
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close()

    def pause_writing(self) -> None:
        self.link.flow(self, blocked=True)

    def resume_writing(self) -> None:
        self.link.flow(self, blocked=False)

    def reset(self) -> None:
        """Close with an RST at once."""
        if self.transport is None or self.transport.is_closing():
            return
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        self.transport.abort()

    def reading(self, wanted: bool) -> None:
        """Read the socket, or leave what arrives in it."""
        transport = self.transport
        if transport is None or transport.is_closing() or transport.is_reading() == wanted:
            return
        if wanted:
            transport.resume_reading()
        else:
            transport.pause_reading()


class _Link:
    """A client's connection and the proxy's connection to the target for it."""

    def __init__(self, proxy: Proxy) -> None:
        self.proxy = proxy
        self.client = _End(self)
        self.upstream: _End | None = None
        self.closed = False
        # Read but not yet forwarded (from the client?, the bytes): before the target is
        # connected, or while the proxy holds. Python 3.10 may read a socket once although it
        # was paused in connection_made.
        self.pending: list[tuple[bool, bytes]] = []

    def made(self, end: _End) -> None:
        if end is self.client:
            self.proxy.links.add(self)
            if self.proxy.mode == RESET:
                self.reset()
                return
            end.reading(False)  # until the target is connected
            if self.proxy.mode is None:
                self.connect()
        self.update()

    def connect(self) -> None:
        """Connect to the target (once, when forwarding starts) in a task of the loop."""
        if self.upstream is None and not self.closed:
            self.upstream = _End(self)
            task = asyncio.get_running_loop().create_task(self._connect(self.upstream))
            self.proxy.tasks.add(task)
            task.add_done_callback(self.proxy.tasks.discard)

    async def _connect(self, end: _End) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: end, HOST, self.proxy.target), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError):
            self.reset()  # the client sees what it would have seen: a refused connection
            return
        if self.closed or self.proxy.mode == RESET:
            self.reset()

    def peer(self, end: _End) -> _End | None:
        return self.upstream if end is self.client else self.client

    def forward(self, end: _End, data: bytes) -> None:
        peer = self.peer(end)
        ready = peer is not None and peer.transport is not None
        if self.proxy.mode is None and ready and not self.pending:
            if peer is not None and peer.transport is not None and not peer.transport.is_closing():
                peer.transport.write(data)
        else:
            self.pending.append((end is self.client, data))

    def flush(self) -> None:
        """Forward what waited, in order, once both ends are connected and the proxy forwards."""
        upstream = self.upstream
        if self.proxy.mode is not None or upstream is None or upstream.transport is None:
            return
        pending, self.pending = self.pending, []
        for from_client, data in pending:
            peer = upstream if from_client else self.client
            if peer.transport is not None and not peer.transport.is_closing():
                peer.transport.write(data)

    def flow(self, end: _End, *, blocked: bool) -> None:
        """``end`` cannot take more for now (or can again): its peer stops reading meanwhile."""
        peer = self.peer(end)
        if peer is not None:
            peer.blocked = blocked
            self.update()

    def update(self) -> None:
        """Read both ends unless the proxy holds or a peer's buffer is full."""
        self.flush()
        upstream = self.upstream
        ready = upstream is not None and upstream.transport is not None
        for end in (self.client, upstream):
            if end is not None:
                end.reading(ready and self.proxy.mode is None and not end.blocked)

    def reset(self) -> None:
        self.closed = True
        self.proxy.links.discard(self)
        for end in (self.client, self.upstream):
            if end is not None:
                end.reset()

    def close(self) -> None:
        """A side ended: close both (each after writing what it was given)."""
        if self.closed:
            return
        self.closed = True
        self.proxy.links.discard(self)
        for end in (self.client, self.upstream):
            if end is not None and end.transport is not None:
                end.transport.close()


class Proxy:
    """A TCP proxy from a free port of 127.0.0.1 to 127.0.0.1:``target``; see the module."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0  # the listening port, once started
        self.mode: Literal["reset", "hold"] | None = None  # None: forwarding
        self.links: set[_Link] = set()  # touched in the loop's thread only
        self.tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.AbstractServer | None = None

    def __repr__(self) -> str:
        state = "stopped" if self._loop is None else self.mode or "forwarding"
        return f"<Proxy {HOST}:{self.port} -> {HOST}:{self.target} {state}>"

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) where clients connect."""
        return HOST, self.port

    def start(self) -> int:
        """Listen and forward; the listening port."""
        if self._loop is not None:
            raise RuntimeError(f"{self!r} is already started")
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name=repr(self), daemon=True)
        self._thread.start()
        try:
            self.port = self._call(self._listen())
        except BaseException:
            self.stop()
            raise
        return self.port

    def cut(self, mode: str) -> None:
        """Partition: ``"reset"`` or ``"hold"`` (see the module); until ``heal()``."""
        if mode not in MODES:
            raise ValueError(f"a cut is one of {', '.join(MODES)}, not {mode!r}")
        self._call(self._cut(RESET if mode == RESET else HOLD))

    def heal(self) -> None:
        """Forward again; what was held passes first."""
        self._call(self._cut(None))

    def stop(self) -> None:
        """Reset every connection, stop listening, end the thread (each step bounded)."""
        loop, thread = self._loop, self._thread
        if loop is None:
            return
        try:
            if thread is not None and thread.is_alive():
                with contextlib.suppress(TimeoutError, RuntimeError):
                    self._call(self._close())
                loop.call_soon_threadsafe(loop.stop)
                thread.join(CALL_TIMEOUT)
        finally:
            if thread is None or not thread.is_alive():
                loop.close()
            self._loop = self._thread = self._server = None

    def __enter__(self) -> Proxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- in the loop's thread ------------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the proxy's loop; its result (at most CALL_TIMEOUT s)."""
        if self._loop is None:
            coroutine.close()
            raise RuntimeError(f"{self!r} is not started")
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:  # TimeoutError itself from Python 3.11 on
            future.cancel()
            raise TimeoutError(f"{self!r} did not answer within {CALL_TIMEOUT:g} s") from None

    async def _listen(self) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Link(self).client, HOST, 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _cut(self, mode: Literal["reset", "hold"] | None) -> None:
        self.mode = mode
        for link in list(self.links):
            if mode == RESET:
                link.reset()
            else:
                if mode is None:
                    link.connect()  # connections accepted while held
                link.update()
        await asyncio.sleep(0)  # the aborted sockets close (and reset) before cut() returns

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self.links):
            link.reset()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.sleep(0)
