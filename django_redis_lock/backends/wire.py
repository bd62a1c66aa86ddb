"""The Redis protocol on a connection of the client library: packing a lock's commands, and
reading a subscribed connection straight off its socket with hiredis's parser where that can
be done, else through the client library's ``read_response``.

A lock's scripts take a dozen arguments; the client library's packer handles any command and
costs twice what packing these takes here (with hiredis: its ``pack_command``, called
directly; without: :func:`bulk`), on every call of a lock.

The wake-up channel (``runtime.listener``) reads one kind of reply, a published message, and
a wait for a grant ends in one such read. The client library's read of a push reply goes
through its push handling and bookkeeping, which on a small machine costs as much again as
the read itself (about 12 µs); hiredis's parser fed from the socket does only the read.

Only for a connection that nothing else reads, from its first reply on: bytes taken by one
parser are never seen by the other. The client library still connects it (address, TLS,
credentials, database, Sentinel) and sends on it; the handshake's replies are all read by then.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Sequence
from typing import Any, Protocol

from django_redis_lock.backends import errors
from django_redis_lock.backends.base import read_options, timed_reads

try:
    import hiredis
except ImportError:  # an extra: the client library's own parser reads then
    hiredis = None  # type: ignore[assignment]

# The encodings hiredis's packer writes text in (it knows no other).
_HIREDIS_ENCODINGS = ("utf-8", "utf8", "UTF-8")
#: What a read returns when no reply came in time.
NOTHING: Any = object()
# Bytes taken from the socket per read: many replies' worth, as the client library takes.
_BUFFER_BYTES = 65536
# What a read that found no data raises: a timeout, or (without one) a socket with none.
_NO_DATA = (TimeoutError, BlockingIOError, ssl.SSLWantReadError)


def bulk(parts: Sequence[Any], encoding: str = "utf-8", encoding_errors: str = "strict") -> bytes:
    """``parts`` as the Redis protocol sends the elements of a command (bulk strings), as the
    client's own packer makes them from the short arguments of a lock's scripts, in a fraction
    of its time: a quorum packs each step once per primary, and its arguments once for all."""
    out = []
    for part in parts:
        if isinstance(part, str):
            data = part.encode(encoding, encoding_errors)
        elif isinstance(part, bytes):
            data = part
        elif isinstance(part, int) and not isinstance(part, bool):
            data = b"%d" % part
        elif isinstance(part, float):
            data = repr(part).encode()
        else:
            raise TypeError(f"Cannot send {type(part).__name__} to Redis: {part!r}")
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def pack_command(command: Sequence[Any], encoding: str, encoding_errors: str) -> bytes:
    """``command`` packed as the client library packs it (for a connection that encodes text
    as ``encoding`` with ``encoding_errors``): by hiredis where it packs the same, else by
    :func:`bulk`."""
    if hiredis is not None and encoding in _HIREDIS_ENCODINGS and encoding_errors == "strict":
        packed: bytes = hiredis.pack_command(tuple(command))
        return packed
    return b"*%d\r\n" % len(command) + bulk(command, encoding, encoding_errors)


class Replies(Protocol):
    """The replies of one subscribed connection, in order."""

    def read(self, seconds: float | None) -> Any:
        """The next reply, or :data:`NOTHING` when none came within ``seconds`` (0: only one
        already there; None: the connection's read timeout). An error reply, or a failed
        connection, raises."""


def replies_of(connection: Any, read_timeout: float) -> Replies:
    """How to read ``connection`` (connected, its handshake done, nothing read since): from its
    socket when hiredis is installed and the connection has one, else through the client."""
    sock = getattr(connection, "_sock", None)
    if hiredis is None or not isinstance(sock, socket.socket):
        return ClientReplies(connection)
    return SocketReplies(sock, read_timeout)


class SocketReplies:
    """Replies parsed by hiredis from the socket's bytes (see the module). Between reads the
    socket keeps the connection's read timeout, which its sends go by too."""

    __slots__ = ("_buffer", "_parser", "_read_timeout", "_sock")

    def __init__(self, sock: socket.socket, read_timeout: float) -> None:
        self._sock = sock
        self._parser = hiredis.Reader()
        self._buffer = bytearray(_BUFFER_BYTES)
        self._read_timeout = read_timeout

    def read(self, seconds: float | None) -> Any:
        parser, sock = self._parser, self._sock
        reply = parser.gets()
        while reply is False:  # not a whole reply yet
            timeout = self._read_timeout if seconds is None else seconds
            if timeout != self._read_timeout:
                sock.settimeout(timeout)
            try:
                count = sock.recv_into(self._buffer)
            except _NO_DATA:
                return NOTHING
            finally:
                if timeout != self._read_timeout:
                    sock.settimeout(self._read_timeout)
            if not count:
                raise ConnectionError("Redis closed the connection.")
            parser.feed(self._buffer, 0, count)  # type: ignore[arg-type]  # any buffer
            reply = parser.gets()
        if isinstance(reply, Exception):  # an error reply (hiredis.ReplyError)
            raise reply
        return reply


class ClientReplies:
    """Replies read through the client library's ``read_response``."""

    __slots__ = ("_connection", "_options", "_timed")

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        # What its read_response takes (see backends.base).
        self._options = read_options(connection)
        self._timed = timed_reads(connection)

    def read(self, seconds: float | None) -> Any:
        connection, options = self._connection, self._options
        try:
            if seconds is None:  # the connection's own read timeout
                return connection.read_response(**options)
            if seconds > 0 and self._timed:  # one read, as redis-py 8 can
                return connection.read_response(timeout=seconds, **options)
            if connection.can_read(timeout=seconds):
                return connection.read_response(**options)
        except errors.TIMEOUT:
            pass
        return NOTHING
