"""The exceptions of the client libraries a lock may talk through, grouped by what they mean.

A cache alias reaches Redis through redis-py or, on django-valkey, through valkey-py: a fork of
redis-py whose exceptions share names but not classes, so ``except redis.RedisError`` does not
catch them. Cluster clients also raise routing errors that derive from neither library's base
error (a slot no node serves). Code that handles client errors uses these tuples, and so no raw
client error escapes a lock call as anything but ``LockUnavailable``.
"""

from __future__ import annotations

from types import ModuleType

import redis.exceptions

ErrorTypes = tuple[type[Exception], ...]


def _valkey() -> ModuleType | None:
    try:
        import valkey.exceptions
    except ImportError:  # valkey-py is optional: only django-valkey caches need it
        return None
    return valkey.exceptions


def _both(redis_name: str, valkey_name: str | None = None) -> ErrorTypes:
    """The exception called ``redis_name`` in redis-py and ``valkey_name`` in valkey-py."""
    found: list[type[Exception]] = [getattr(redis.exceptions, redis_name)]
    valkey = _valkey()
    if valkey is not None:
        found.append(getattr(valkey, valkey_name or redis_name))
    return tuple(found)


#: Any failure of a client call: the server's answer, the connection, the cluster's routing.
CLIENT = (
    _both("RedisError", "ValkeyError")
    + _both("RedisClusterException", "ValkeyClusterException")
    + _both("ChildDeadlockedError")
)
#: A connection that failed (refused, reset, closed) or could not be made.
CONNECTION = _both("ConnectionError")
#: A reply that did not come within the socket timeout.
TIMEOUT = _both("TimeoutError")
#: An error reply of the server.
RESPONSE = _both("ResponseError")
#: The server does not know a script's SHA (restarted, failed over, SCRIPT FLUSH).
NO_SCRIPT = _both("NoScriptError")
#: A write sent to a replica: the primary the client knew was demoted.
READ_ONLY = _both("ReadOnlyError")
#: Error replies of a cluster that is failing over or resharding: try again later.
CLUSTER_AWAY = (
    _both("ClusterDownError") + _both("TryAgainError") + _both("AskError")  # MovedError is one
)


def elsewhere(error: Exception) -> bool:
    """Whether a cluster node's error reply sends the call elsewhere or asks it to wait: MOVED,
    ASK, CLUSTERDOWN, TRYAGAIN. The client library's cluster parser makes them errors of
    their own; a plain connection's keeps the reply's text."""
    if isinstance(error, CLUSTER_AWAY) or type(error).__name__ == "MovedError":
        return True
    return str(error).startswith(("MOVED ", "ASK ", "CLUSTERDOWN ", "TRYAGAIN "))
