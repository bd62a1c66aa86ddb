"""What every backend has and does: the keys of a lock, the scripts as they are run, and the
interface the lock core, the runtime and the watchdog rely on (:class:`Backend`).

A backend is where the locks of a cache alias (or of a quorum of aliases) reach Redis: one
server or a Sentinel primary (``single.py``), a Redis Cluster (``cluster.py``), or a quorum of
independent primaries (``quorum.py``). ``backends/__init__.py`` picks the one a setting asks for.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from django_redis_lock.backends import errors
from django_redis_lock.backends.clients import Client
from django_redis_lock.scripts import ScriptName

#: Marks where a lock name sits in a key built by the cache's key function.
NAME_MARK = "\x00name\x00"
#: Hex digits of the per-name hash tag: 48 bits keep collisions (harmless) rare.
TAG_LENGTH = 12
#: Length of "{<tag>}:l:", the text between the namespace and the name in a lock key.
TAG_FRAME = TAG_LENGTH + 5


@dataclass(frozen=True)
class LockKeys:
    """The Redis keys of one lock; they share a Cluster hash tag so one script can use all."""

    lock: str
    queue: str
    waiters: str
    #: The hold and wait statistics of the lock (see ``stats.py``).
    stats: str
    #: What the scripts' names start with: "" for a lock's, "shared_" for a semaphore's or a
    #: read/write lock's (``lock`` is then its holders hash).
    family: str = ""
    #: The keys in the order every script takes them.
    all: tuple[str, str, str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "all", (self.lock, self.queue, self.waiters, self.stats))

    def script(self, name: str) -> ScriptName:
        """The name of this family's script ``name`` ("acquire", "release"...)."""
        return self.family + name


class LuaScript:
    """A Lua script of the lock, run with EVALSHA (with EVAL, which also loads it, when the
    server lost its scripts: a restart, a failover, SCRIPT FLUSH), on a sync or async client.

    The call goes straight to the client's ``execute_command``, so its retries and connection
    handling apply; redis-py's ``Script`` adds layers per call that cost about a tenth of an
    uncontended acquire and release.
    """

    __slots__ = ("_sha", "sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()
        self._sha = self.sha.encode()  # bytes go through the client's encoder untouched

    def run(self, client: Client, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run it on a sync client; its reply."""
        try:
            return client.execute_command("EVALSHA", self._sha, len(keys), *keys, *args)
        except errors.NO_SCRIPT:
            return client.execute_command("EVAL", self.source, len(keys), *keys, *args)

    async def arun(self, client: Client, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run it on an asyncio client; its reply."""
        command = ("EVALSHA", self._sha, len(keys), *keys, *args)
        try:
            return await client.execute_command(*command)
        except errors.NO_SCRIPT:
            return await client.execute_command("EVAL", self.source, *command[2:])


def _utf8(key: str | bytes) -> bytes:
    return key if isinstance(key, bytes) else key.encode()


class EncodedKeys:
    """The keys of lock scripts as the client sends them, encoded once per key tuple: the
    client's encoder passes bytes through, and encoding a lock's four long keys on every call
    costs a noticeable part of an uncontended cycle."""

    #: Key tuples remembered at most; then the memory starts afresh (names used once, one per
    #: URL or user, must not make it grow without bound).
    LIMIT = 4096

    def __init__(self, client: Client) -> None:
        encoder = getattr(client, "get_encoder", None)
        self._encode: Any = encoder().encode if encoder is not None else _utf8
        self._known: dict[tuple[str | bytes, ...], tuple[bytes, ...]] = {}

    def __call__(self, keys: Sequence[str | bytes]) -> Sequence[str | bytes]:
        """``keys``, encoded (a tuple is remembered; a list, as listing sends, is not)."""
        if type(keys) is not tuple:
            return keys
        found = self._known.get(keys)
        if found is None:
            if len(self._known) >= self.LIMIT:
                self._known.clear()
            found = self._known[keys] = tuple(self._encode(key) for key in keys)
        return found


class Late(NamedTuple):
    """What an acquire's ``run`` of a backend may answer besides a fencing token or a busy
    reply: the lock was granted too late to trust (a quorum's majority answered after the
    lease ran out, and the grants were given back). The acquire tries again while it may
    wait, else raises LateGrant(message)."""

    message: str


class Backend(Protocol):
    """What the lock core, the runtime, the watchdog and the system checks rely on of a
    backend, whatever its topology."""

    #: The cache alias (a quorum's: its aliases, joined).
    alias: str
    #: The lease a lock handed to a waiter starts with (REDIS_LOCK["HANDOVER_LEASE"]), in ms.
    handover_lease_ms: int
    #: Replicas that must acknowledge a grant, and how long they may take (ms).
    wait_replicas: int
    wait_timeout_ms: int
    #: Whether the primary is found through Sentinel, and so may move.
    sentinel: bool
    #: Whether waiters queue on the server, first come first served (a quorum's retry instead).
    queues: bool
    #: Whether lock names with a Redis hash tag (``{...}``) put their keys in its slot
    #: (REDIS_LOCK["HASH_TAGS"]): names with the same tag then share a cluster slot.
    hash_tags: bool

    def one_script(self, keys: Sequence[LockKeys]) -> bool:
        """Whether one script may use the keys of all these locks: on one server; on a
        cluster, when they share a slot (``lock_many`` then takes its names in one round trip,
        else one by one)."""
        ...

    @property
    def listable(self) -> bool:
        """Whether lock names can be read back from keys (a hashing KEY_FUNCTION hides them)."""
        ...

    def keys_for(self, name: str) -> LockKeys:
        """The Redis keys of the lock ``name`` (cached)."""
        ...

    def shared_keys_for(self, name: str, kind: str = "s") -> LockKeys:
        """The Redis keys of the semaphore (``kind`` "s") or read/write lock ("r" or "w")
        ``name`` (cached); a backend that cannot hold one raises ImproperlyConfigured."""
        ...

    def rate_keys_for(self, name: str) -> tuple[str, str]:
        """The Redis keys of the rate limit ``name``: its state and its statistics (cached); a
        backend that cannot hold one raises ImproperlyConfigured."""
        ...

    def parts(self, keys: LockKeys, script: ScriptName) -> list[tuple[Backend, LockKeys, str]]:
        """Where a call of ``script`` on ``keys`` goes, as (one-server backend, keys, script)."""
        ...

    def listens_on(self) -> Sequence[Backend]:
        """The one-server backends on whose channels the grants of this backend's locks arrive."""
        ...

    def run(self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]) -> Any:
        """Run one of the lock's scripts; its reply (an acquire's may be a :class:`Late`)."""
        ...

    async def arun(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run` on the running event loop."""
        ...

    def run_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run`, acknowledged by ``wait_replicas`` replicas."""
        ...

    async def arun_acked(
        self, script: ScriptName, keys: Sequence[str | bytes], args: Sequence[Any]
    ) -> Any:
        """:meth:`run_acked` on the running event loop."""
        ...

    def servers(self) -> list[tuple[str, Any]]:
        """The servers that grant its locks, as (cache alias, connection pool)."""
        ...

    def check_async(self) -> None:
        """ImproperlyConfigured when async locks cannot do what sync ones do."""
        ...

    def close(self) -> None:
        """Let go of what it holds: the settings changed."""
        ...


def connection_of(pool: Any, read_timeout: float) -> Any:
    """A new connection configured like ``pool``'s, outside it, reading with ``read_timeout``."""
    return pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": read_timeout})


def read_options(connection: Any) -> dict[str, bool]:
    """What a reader of a pub/sub connection passes to its ``read_response``.

    ``push_request=True``: on RESP3 a published message is a push reply, which the connection
    would otherwise hand to its push handler instead of returning it. redis-py 5.0's
    SentinelManagedConnection takes no such argument (it raises TypeError): it reads RESP2
    unless told otherwise, where messages are ordinary replies."""
    options = {"disconnect_on_error": False}
    if _takes(connection.read_response, "push_request"):
        options["push_request"] = True
    return options


def _takes(method: Any, name: str, *, or_any: bool = True) -> bool:
    """Whether ``method`` takes the keyword argument ``name``, or (``or_any``) any keyword
    argument at all; False when its signature cannot be read."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or (or_any and p.kind is p.VAR_KEYWORD) for p in parameters)


def timed_reads(connection: Any) -> bool:
    """Whether ``connection.read_response`` takes a ``timeout`` of its own (redis-py 8 and
    later): one read then, where an older one needs ``can_read(timeout)`` first."""
    return _takes(connection.read_response, "timeout", or_any=False)


def demoted(error: Exception) -> bool:
    """Whether a script failed because its server answered READONLY: a primary demoted by a
    failover. A Sentinel-managed connection hangs up and raises a connection error over it;
    Redis 6.2 reports it inside the script's error (``-READONLY``), which the client passes
    on as it is: the caller hangs up then."""
    if isinstance(error.__context__, errors.READ_ONLY):
        return True
    return isinstance(error, errors.RESPONSE) and "-READONLY " in str(error)


def tag(name: str, hash_tags: bool = False) -> str:
    """The Redis Cluster hash tag of the keys of lock ``name``: a hash of the whole name, or
    with ``hash_tags`` of the name's own hash tag when it has one (:func:`hash_tag_of`)."""
    tagged = hash_tag_of(name) if hash_tags else None
    text = name if tagged is None else tagged
    return hashlib.blake2b(text.encode(), digest_size=TAG_LENGTH // 2).hexdigest()


def hash_tag_of(name: str) -> str | None:
    """The hash tag Redis Cluster would read in ``name``: the text between its first ``{``
    and the first ``}`` after it, when not empty; else None."""
    opening = name.find("{")
    closing = name.find("}", opening + 1) if opening >= 0 else -1
    return name[opening + 1 : closing] if closing > opening + 1 else None


def glob_escape(text: str) -> str:
    """``text`` as a Redis glob pattern that matches only itself."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def flat_lists(found: list[Any]) -> list[list[Any]]:
    """STATS_READ_MANY's arrays, an empty one (which cjson writes as {}) as []."""
    return [each if isinstance(each, list) else [] for each in found]


def listed(found: Any) -> list[Any]:
    """A JSON array of a script's reply as a list (an empty one, which cjson writes as {},
    as []), its false entries as None."""
    return [each or None for each in found] if isinstance(found, list) else []


def text_of(reply: object) -> str:
    """A reply of Redis as text: bytes that are not UTF-8 replaced, anything else as str."""
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
