"""Small tools shared by the tests: bounded waits, round-trip counting, the two drivers of a
Lock's operations, and what Redis and the OS show of the package's state."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from django.core.management import CommandError, call_command
from django.dispatch import Signal
from django.test import Client
from django.test.utils import override_settings
from redis.typing import EncodableT

from django_redis_lock import Lock, lock
from django_redis_lock.backends.base import LockKeys, text_of
from django_redis_lock.backends.single import LockBackend
from django_redis_lock.runtime import runtime
from django_redis_lock.stats import bucket_of
from testproject.settings import build_caches

T = TypeVar("T")
# The longest one call through a driver may take before the test fails.
CALL_SECONDS = 30.0


#: The socket timeout of a test's own Redis clients: above every BLPOP timeout the tests use
#: (redis-py 8 gives a client a 5 s socket timeout by default, which a BLPOP of 30 s outlives:
#: spawned processes may take that long to start on a loaded machine).
PATIENT_SECONDS = 120.0


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, step: float = 0.005) -> Any:
    """The first truthy value of ``predicate()``, checked until ``timeout`` seconds pass.

    Only for conditions that come with the passing of time (a lease running out), where there
    is no event to wait on.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(step)


class CountingConnection(redis.Connection):
    """A redis-py connection that counts the requests it sends (each one a round trip)."""

    sent = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sent += 1
        super().send_packed_command(command, check_health)


@contextlib.contextmanager
def counted_caches(url: str) -> Iterator[None]:
    """CACHES whose "default" and "builtin" aliases count their round trips.

    They use database 2: django-redis keeps one pool per URL for the whole process, so a
    URL of their own makes sure their pool is built with the counting connection.
    """
    caches = build_caches(urlunsplit(urlsplit(url)._replace(path="/2")))
    caches["default"]["OPTIONS"]["CONNECTION_POOL_KWARGS"] = {
        "connection_class": CountingConnection
    }
    caches["builtin"]["OPTIONS"]["connection_class"] = CountingConnection
    with override_settings(CACHES=caches):
        yield


def eviction_looked() -> None:
    """Return once the looks for eviction under way have ended: a first lock call on an alias
    looks at its servers from a thread of its own, on connections of the cache's pool, which
    then show among the server's clients."""
    for thread in threading.enumerate():
        if thread.name == "django_redis_lock-eviction":
            thread.join(5)


@contextlib.contextmanager
def round_trips() -> Iterator[list[int]]:
    """Counts the round trips of CountingConnection inside the block into ``result[0]``.

    A first lock call on an alias looks at its servers for eviction from a thread of its own
    (an INFO): that look ends first, so that it is not counted in the block."""
    eviction_looked()
    result = [0]
    before = CountingConnection.sent
    yield result
    result[0] = CountingConnection.sent - before


def commandstats(client: redis.Redis) -> dict[str, int]:
    """Calls per command name since the last CONFIG RESETSTAT."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): value["calls"] for name, value in stats.items()}


def hold(*names: str, **options: Any) -> list[Lock]:
    """Acquire a lock for each name (not auto-renewed, 60 s unless told otherwise)."""
    options = {"timeout": 60, "auto_renew": False, **options}
    held = [lock(name, **options) for name in names]
    for each in held:
        assert each.acquire(blocking=False), each.name
    return held


class FaultyConnection(redis.Connection):
    """A redis-py connection that can be told to fail, for real faults on a real server:
    ``lose_reply`` lets the next command reach Redis (which runs it) and loses its reply, as a
    network cut or a timeout would; ``fail_send`` is raised instead of sending anything."""

    lose_reply = False
    fail_send: BaseException | None = None  # raised by every send until cleared

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if FaultyConnection.fail_send is not None:
            raise FaultyConnection.fail_send
        super().send_packed_command(command, check_health)

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        if FaultyConnection.lose_reply:
            FaultyConnection.lose_reply = False
            self.disconnect()  # the reply, already on its way, is never read
            raise redis.TimeoutError("reply lost (injected)")
        return super().read_response(*args, **kwargs)


@contextlib.contextmanager
def builtin_cache_with(url: str, **options: Any) -> Iterator[str]:
    """A "faulty" alias (Django's RedisCache on ``url``) with extra connection ``options``;
    yields the alias. Its pool is its own, so nothing leaks into other tests."""
    caches = build_caches(url)
    caches["faulty"] = {**caches["builtin"], "OPTIONS": {**caches["builtin"]["OPTIONS"], **options}}
    FaultyConnection.lose_reply, FaultyConnection.fail_send = False, None
    try:
        with override_settings(CACHES=caches):
            yield "faulty"
    finally:
        FaultyConnection.lose_reply, FaultyConnection.fail_send = False, None


@contextlib.contextmanager
def received(signal: Signal) -> Iterator[list[dict[str, Any]]]:
    """The keyword arguments of every sending of ``signal`` inside the block."""
    calls: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        calls.append(kwargs)

    signal.connect(receiver, weak=False)
    try:
        yield calls
    finally:
        signal.disconnect(receiver)


def _unread_request_bytes(port: int) -> int:
    """Bytes sent to the server on ``port`` that it has not read yet (Linux: /proc/net/tcp)."""
    total = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01":  # the server's end, established
                    total += int(fields[4].split(":")[1], 16)  # rx_queue
    return total


def wait_for_unread_request(port: int, timeout: float = 5.0) -> None:
    """:func:`until_redis_has_unread_request` for a thread."""
    wait_until(lambda: _unread_request_bytes(port), timeout=timeout)


async def until_redis_has_unread_request(port: int, timeout: float = 5.0) -> None:
    """Return once a request sits unread in a paused server's socket (it will run it on
    resume): the way to know that a call was sent, when no reply can come."""
    await until(lambda: _unread_request_bytes(port), timeout=timeout)


async def until(predicate: Callable[[], Any], timeout: float = 5.0, step: float = 0.005) -> Any:
    """:func:`wait_until` on an event loop: the loop's other tasks run between the looks."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(step)


def forge(client: redis.Redis, name: str, *, key: bytes | str | None = None, **fields: str) -> None:
    """Write a held lock's hash by hand, as anyone who can write to Redis could."""
    key = key or runtime().backend().keys_for(name).lock
    forged: dict[EncodableT, EncodableT] = {"s": "forged", "t": "1", "o": "someone", "a": "1"}
    client.hset(key, mapping=forged | dict(fields))
    client.pexpire(key, 60_000)


def listen(alias: str | None = None, url: str | None = None) -> None:
    """Start this process's listener for grants on ``alias`` and return once Redis (at
    ``url``, default the session's) has its subscription (as after the process's first wait)."""
    listener = runtime().one_listener(runtime().backend(alias))
    listener.start()
    with redis.Redis.from_url(url or os.environ["REDIS_URL"]) as client:
        wait_until(lambda: client.pubsub_numsub(listener.channel)[0][1], timeout=5)


def held_past_first_lease(name: str) -> Lock:
    """A lock with a 0.5 s lease, acquired and held past that lease: the watchdog renewed it
    (asserted); the caller releases it."""
    held = lock(name, timeout=0.5)
    assert held.acquire()
    started = time.monotonic()
    wait_until(lambda: time.monotonic() - started > 0.9)  # past the first lease
    assert held.owned()
    return held


def server_backend(alias: str | None = None) -> LockBackend:
    """The backend of cache ``alias`` (one server, a Sentinel primary or a cluster), whose
    client the tests read Redis with."""
    backend = runtime().backend(alias)
    assert isinstance(backend, LockBackend)
    return backend


def token_of(held: Lock) -> int:
    """The fencing token of a lock that has been held: set by its first acquire."""
    assert held.fencing_token is not None
    return held.fencing_token


def keys(name: str, using: str | None = None) -> LockKeys:
    """The Redis keys of the lock ``name`` on cache ``using``, as the package computes them."""
    return runtime().backend(using).keys_for(name)


def queued_behind(name: str, client: redis.Redis) -> tuple[Lock, Lock, Future[bool]]:
    """A holder of ``name`` and a thread queued behind it: the holder, the waiting lock, and
    the future of its acquire (a 10 s lease each, no renewal, the waiter waits up to 5 s)."""
    holder = lock(name, timeout=10, auto_renew=False)
    assert holder.acquire()
    waiting = lock(name, timeout=10, blocking_timeout=5, auto_renew=False)
    taken = start(waiting.acquire)
    wait_until(lambda: client.zcard(keys(name).queue) == 1)
    return holder, waiting, taken


def start(work: Callable[[], T]) -> Future[T]:
    """Run ``work`` in a new thread; its result (or exception) arrives in the future."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return future


class SyncDriver:
    """A Lock's operations through its blocking API, in the calling thread.

    With :class:`AsyncDriver`, through the ``driver`` fixture, a scenario that both APIs must
    pass is written once: ``driver.acquire(held)`` rather than ``held.acquire()``.
    """

    name = "sync"

    def call(self, held: Lock, method: str, *args: Any, **kwargs: Any) -> Any:
        """``held.<method>(...)``, ``method`` named as in the blocking API."""
        return getattr(held, method)(*args, **kwargs)

    def acquire(
        self, held: Lock, blocking: bool | None = None, blocking_timeout: float | None = None
    ) -> bool:
        """``held.acquire()`` (or ``aacquire()``)."""
        return bool(self.call(held, "acquire", blocking, blocking_timeout))

    def release(self, held: Lock) -> None:
        """``held.release()`` (or ``arelease()``)."""
        self.call(held, "release")

    def extend(
        self, held: Lock, additional_time: float | None = None, *, replace_ttl: bool = False
    ) -> None:
        """``held.extend()`` (or ``aextend()``)."""
        self.call(held, "extend", additional_time, replace_ttl=replace_ttl)

    def locked(self, held: Lock) -> bool:
        """``held.locked()`` (or ``alocked()``)."""
        return bool(self.call(held, "locked"))

    def owned(self, held: Lock) -> bool:
        """``held.owned()`` (or ``aowned()``)."""
        return bool(self.call(held, "owned"))

    def ttl(self, held: Lock) -> float | None:
        """``held.ttl()`` (or ``attl()``)."""
        left: float | None = self.call(held, "ttl")
        return left

    def entered(self, held: Lock) -> contextlib.AbstractContextManager[Lock]:
        """``with held`` (or ``async with held``)."""
        return held


class AsyncDriver(SyncDriver):
    """A Lock's operations through its async API, each call a task on an event loop that
    runs in a thread of its own (so concurrent calls from several threads run as concurrent
    tasks, and the calling thread never runs a loop)."""

    name = "async"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` as a task on the driver's loop; its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(CALL_SECONDS)

    def call(self, held: Lock, method: str, *args: Any, **kwargs: Any) -> Any:
        """``await held.a<method>(...)`` on the driver's loop."""
        return self.run(getattr(held, f"a{method}")(*args, **kwargs))

    @contextlib.contextmanager
    def entered(self, held: Lock) -> Iterator[Lock]:
        """``async with held``, its body run in the calling thread."""
        self.run(held.__aenter__())
        try:
            yield held
        except BaseException as exc:
            self.run(held.__aexit__(type(exc), exc, exc.__traceback__))
            raise
        self.run(held.__aexit__(None, None, None))


SYNC = SyncDriver()


@contextlib.contextmanager
def async_driver() -> Iterator[AsyncDriver]:
    """An AsyncDriver whose event loop runs in a thread until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="test-event-loop", daemon=True)
    thread.start()
    try:
        yield AsyncDriver(loop)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(CALL_SECONDS)
        loop.close()


class WatchdogThread:
    """The package's watchdog thread as the OS shows it (Linux ``/proc``): whether it sleeps,
    and how many times it went to sleep, which is once per wake-up (a wake-up call, or a look
    of its own once a second) and sometimes once more for the GIL."""

    NAME = "django_redis_lock-watchdog"

    def __init__(self) -> None:
        found = [thread for thread in threading.enumerate() if thread.name == self.NAME]
        assert len(found) == 1, f"{len(found)} watchdog threads"
        assert found[0].native_id is not None
        self.status_path = f"/proc/self/task/{found[0].native_id}/status"

    def field(self, name: str) -> str:
        """One field of the thread's ``status`` file."""
        with open(self.status_path) as status:
            for line in status:
                key, _, value = line.partition(":")
                if key == name:
                    return value.strip()
        raise AssertionError(f"no {name} in {self.status_path}")

    def sleeps(self) -> int:
        """How many times the thread went to sleep (its voluntary context switches)."""
        return int(self.field("voluntary_ctxt_switches"))

    def asleep(self) -> bool:
        """Whether the thread sleeps now (waiting for work, or for the GIL)."""
        return self.field("State").startswith("S")

    def settle(self) -> None:
        """Return once the thread sleeps and stays asleep from one look to the next (a few
        milliseconds, in which it has the GIL to finish what woke it)."""
        last = [-1]

        def quiet() -> bool:
            now = self.sleeps()
            still = now == last[0] and self.asleep()
            last[0] = now
            return still

        wait_until(quiet, timeout=2)

    def after_a_look_of_its_own(self) -> None:
        """Return once the thread woke by itself and went back to sleep: its loop runs, and
        its next look of its own is about a second away."""
        before = self.sleeps()
        wait_until(lambda: self.sleeps() > before, timeout=3)
        self.settle()


def staff_client(*codenames: str) -> Client:
    """A test client logged in as a staff user with the lock permissions ``codenames``."""
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user("operator", password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_redis_lock", codename__in=codenames
        )
    )
    client = Client()
    client.force_login(user)
    return client


def record_stats(
    client: redis.Redis,
    name: str,
    holds_ms: Sequence[float] = (),
    waits_ms: Sequence[float] = (),
    *,
    busy: int = 0,
    lost: int = 0,
    forced: int = 0,
    timeout: float | None = None,
) -> None:
    """Write the statistics hash of ``name`` as the release script would after these holds
    and waits (milliseconds), busy answers, lost and forced holds, of a lock of ``timeout``
    seconds."""
    fields = Counter(f"h{bucket_of(ms)}" for ms in holds_ms)
    fields.update(f"w{bucket_of(ms)}" for ms in waits_ms)
    mapping: dict[str, int] = {**fields, "n": len(holds_ms), "b": busy, "l": lost, "f": forced}
    if holds_ms:
        mapping["m"] = int(max(holds_ms))
    if timeout is not None:
        mapping["t"] = int(timeout * 1000)
    client.hset(keys(name).stats, mapping=mapping)  # type: ignore[arg-type]


#: The repository: spawned children run there (it is on their path, as on the suite's).
ROOT = Path(__file__).resolve().parents[1]
#: How long the children of a test may run before they are killed and the test fails.
CHILD_SECONDS = 120.0


#: For a test whose point is a fork (what a child inherits: the watchdog, connections): Python
#: 3.12+ warns that forking a process whose threads run (the watchdog's, the test server's) may
#: deadlock the child. The library is built to survive exactly that; other tests spawn.
fork_is_the_point = pytest.mark.filterwarnings(
    r"ignore:This process \(pid=\d+\) is multi-threaded, use of fork:DeprecationWarning"
)

#: For a test whose children must share what this process set up for it and a new process
#: would not see (the test database Django created here, in memory for SQLite; the objects a
#: closure names): they are forked, and the warning of the fork is expected (see above).
forks_to_share_its_setup = fork_is_the_point

# What a spawned child runs: Django set up with the parent's settings, then the target.
_SPAWNED = """
import importlib, json, sys
import django
django.setup()
module = importlib.import_module(sys.argv[1])
getattr(module, sys.argv[2])(*json.loads(sys.argv[3]))
"""
_spawned: dict[int, subprocess.Popen[bytes]] = {}


def spawn_child(target: Callable[..., object], *args: object) -> int:
    """Run ``target(*args)`` (a module-level function; ``args`` JSON values) in a new Python
    process, with the suite's settings, its Redis and this test's ``CACHES`` and ``REDIS_LOCK``;
    its pid. The child exits 0 when ``target`` returned, 1 when it raised.

    A new process rather than a fork: forking a process whose threads run (the watchdog, the
    test server) may deadlock the child (Python 3.12+ warns of it)."""
    from django.conf import settings

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "TESTPROJECT_CACHES": json.dumps(settings.CACHES),
        "TESTPROJECT_REDIS_LOCK": json.dumps(settings.REDIS_LOCK),
    }
    command = [sys.executable, "-c", _SPAWNED, target.__module__, target.__qualname__]
    process = subprocess.Popen([*command, json.dumps(args)], cwd=ROOT, env=env)
    _spawned[process.pid] = process
    return process.pid


def fork_child(work: Callable[[], object]) -> int:
    """Run ``work()`` in a forked child process; its pid. The child exits 0 when ``work``
    returned, 1 when it raised. Only for a test whose point is the fork (mark it
    ``fork_is_the_point``); else :func:`spawn_child`."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def wait_children(pids: Sequence[int], timeout: float = CHILD_SECONDS) -> list[int]:
    """The exit codes of forked children, awaited together for at most ``timeout`` seconds;
    those still running then are killed (SIGKILL) and the test fails."""
    deadline = time.monotonic() + timeout
    codes: dict[int, int] = {}
    try:
        for pid in pids:
            fd = os.pidfd_open(pid)  # readable once the child exits
            try:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            finally:
                os.close(fd)
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                raise AssertionError(f"child {pid} still ran after {timeout:g} s")
            codes[pid] = os.waitstatus_to_exitcode(status)
            if pid in _spawned:  # reaped here: its Popen must not wait for it again
                _spawned.pop(pid).returncode = codes[pid]
    finally:
        for pid in pids:
            if pid not in codes:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                if pid in _spawned:
                    _spawned.pop(pid).returncode = -signal.SIGKILL
    return [codes[pid] for pid in pids]


def doctor(*args: str) -> tuple[int, list[dict[str, str]], str]:
    """``manage.py locks doctor --json ARGS``: its exit status, findings and text output."""
    out, err = io.StringIO(), io.StringIO()
    status, refusal = 0, ""
    try:
        call_command("locks", "doctor", "--json", *args, stdout=out, stderr=err)
    except CommandError as exc:
        status, refusal = exc.returncode, str(exc)
    assert refusal == ("" if status == 0 else refusal)
    if status:
        assert refusal.startswith("The doctor found")
    text = io.StringIO()
    with contextlib.suppress(CommandError):
        call_command("locks", "doctor", *args, stdout=text, no_color=True)
    return status, json.loads(out.getvalue()), text.getvalue()


def levels(findings: list[dict[str, str]]) -> dict[str, str]:
    """check -> level, for the findings about one server and its alias."""
    return {finding["check"]: finding["level"] for finding in findings}


#: How long a test waits for a task of a real worker (to start, or for its result).
TASK_SECONDS = 30


def label_of(name: str) -> str:
    """The label of the held lock ``name`` ("" when it is not held)."""
    from django_redis_lock import get_lock_manager

    info = get_lock_manager().get(name)
    return "" if info is None else info.label or ""


def gate_started(client: redis.Redis, gate: str) -> str:
    """What a task passing ``gate`` (testproject.gates) said when it started; fails when none
    started within TASK_SECONDS."""
    found = client.blpop([f"{gate}:started"], timeout=TASK_SECONDS)
    assert found is not None, f"{gate}: the task did not start"
    return text_of(found[1])


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM a worker process the tests started, then SIGKILL it if it does not stop."""
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
