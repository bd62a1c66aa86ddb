"""One connection of the sharded wake-ups (``shards.py``): to one primary of a cluster, with
the channels subscribed there."""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from django_redis_lock.backends.wire import Replies

#: The first pause before a node that failed is connected again (it doubles from there).
FIRST_BACKOFF_SECONDS = 0.1


class Shard:
    """The thread's connection to one primary, and the channels it subscribes there."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.name: str = node.name
        self.connection: Any = None
        self.replies: Replies | None = None
        self.sock: socket.socket | None = None
        #: Channels to be subscribed here; ``confirmed``: those the node confirmed.
        self.channels: set[str] = set()
        self.confirmed: set[str] = set()
        #: Channels this side unsubscribed: their ``sunsubscribe`` is no slot move.
        self.leaving: set[str] = set()
        self.backoff = FIRST_BACKOFF_SECONDS
        self.retry_at = 0.0
        self.heard = 0.0
        self.pinged: float | None = None

    def send(self, *command: str) -> None:
        assert self.connection is not None
        self.connection.send_command(*command)

    def close(self) -> None:
        if self.connection is not None:
            with contextlib.suppress(Exception):
                self.connection.disconnect()
        self.connection = self.replies = self.sock = None
        self.confirmed.clear()
        self.leaving.clear()


def redirected(exc: Exception) -> bool:
    """Whether an error reply sends a subscription elsewhere (MOVED, ASK): the client
    library's parser makes it a MovedError or AskError, hiredis's keeps the reply's text."""
    return type(exc).__name__ in ("MovedError", "AskError") or str(exc).startswith(
        ("MOVED ", "ASK ")
    )
