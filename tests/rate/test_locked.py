"""@locked(name, rate=...): views answer 429 with Retry-After (through Django's test clients
and real HTTP requests), functions raise RateLimited or wait their turn, and what the
decorator refuses. Sync and async callables both pass each scenario."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from django.test import override_settings

from django_redis_lock import LockUnavailable, RateLimited, locked
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests.locked.test_decorators import Make, Visitor

pytestmark = pytest.mark.urls("tests.rate.urls")  # visitor and make: tests/rate/conftest.py


# -- views -----------------------------------------------------------------------------------


@pytest.mark.parametrize("view", ["paced", "method", "klass"])
def test_a_view_over_its_rate_answers_429_with_retry_after(visitor: Visitor, view: str) -> None:
    assert visitor.get(f"/{view}/k/").content == b"ran"
    refused = visitor.get(f"/{view}/k/")
    assert refused.status_code == 429
    assert refused["Retry-After"] == "60"  # 1/m: a whole minute to wait, rounded up
    assert refused["Content-Type"].startswith("text/plain")
    assert b"retry in 60 s" in refused.content
    as_json = visitor.get(f"/{view}/k/", Accept="application/json")
    assert as_json.status_code == 429
    assert as_json.json()["error"] == "rate_limited"
    assert visitor.get(f"/{view}/other/").status_code == 200  # another key, another rate


def test_the_busy_status_setting_does_not_apply_to_a_rate(visitor: Visitor) -> None:
    with override_settings(REDIS_LOCK={"BUSY_STATUS": 409}):
        assert visitor.get("/paced/s/").status_code == 200
        assert visitor.get("/paced/s/").status_code == 429


def test_a_view_waits_for_its_turn_within_blocking_timeout(visitor: Visitor) -> None:
    started = time.monotonic()
    statuses = [visitor.get("/patient/p/").status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    assert time.monotonic() - started >= 0.35  # two turns 0.2 s apart were waited for


def test_on_busy_replaces_the_429(visitor: Visitor) -> None:
    assert visitor.get("/polite/o/").content == b"ran"
    refused = visitor.get("/polite/o/")
    assert (refused.status_code, refused.content) == (503, b"slow down")


def test_a_view_answers_503_when_redis_is_down(
    visitor: Visitor, redis_factory: RedisServerGroup
) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        response = visitor.get("/paced/d/", Accept="application/json")
        assert response.status_code == 503
        assert response.json()["error"] == "unavailable"
        with override_settings(REDIS_LOCK={"RUN_UNLOCKED_IF_UNAVAILABLE": True}):
            assert visitor.get("/paced/d/").content == b"ran"


def _get(url: str) -> tuple[int, str | None]:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


@pytest.mark.parametrize("path", ["paced", "apaced", "aklass"])
def test_concurrent_http_requests_one_runs_the_others_get_429(live_server: Any, path: str) -> None:
    url = f"{live_server.url}/{path}/race/"
    start = threading.Barrier(5)
    results: list[tuple[int, str | None]] = []

    def request() -> None:
        start.wait(10)
        results.append(_get(url))

    threads = [threading.Thread(target=request) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sorted(results) == [(200, None)] + [(429, "60")] * 4


# -- functions -------------------------------------------------------------------------------


def test_a_function_over_its_rate_raises_rate_limited(make: Make) -> None:
    double = make(lambda x: 2 * x, "double:{x}", rate="2/h")  # one every 30 minutes
    assert double(1) == 2
    with pytest.raises(RateLimited) as refused:
        double(1)
    assert 1790 < refused.value.retry_after <= 1800
    assert "'double:1' (2/h)" in str(refused.value)
    assert double(2) == 4


def test_a_burst_lets_more_through_at_once(make: Make) -> None:
    ping = make(lambda: "pong", "ping", rate="1/h", burst=2)
    assert [ping() for _ in range(3)] == ["pong"] * 3
    with pytest.raises(RateLimited):
        ping()


def test_a_function_waits_for_its_turn_within_blocking_timeout(make: Make) -> None:
    ping = make(lambda: "pong", "wait", rate="10/s", blocking_timeout=1)
    started = time.monotonic()
    assert [ping() for _ in range(3)] == ["pong"] * 3
    assert time.monotonic() - started >= 0.15
    refuse = make(lambda: "pong", "refuse", rate="1/m", blocking_timeout=1)
    refuse()
    started = time.monotonic()
    with pytest.raises(RateLimited):
        refuse()  # its turn is a minute away: refused at once, not after a second
    assert time.monotonic() - started < 1


def test_on_busy_replaces_rate_limited(make: Make) -> None:
    ping = make(lambda: "pong", "quiet", rate="1/m", on_busy=lambda: "later")
    assert (ping(), ping()) == ("pong", "later")


def test_a_function_raises_lock_unavailable_when_redis_is_down(
    make: Make, redis_factory: RedisServerGroup
) -> None:
    ping = make(lambda: "pong", "down", rate="1/s")
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        with pytest.raises(LockUnavailable):
            ping()


# -- what is refused -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [{"timeout": 10}, {"auto_renew": True}, {"limit": 2}, {"label": "x"}],
    ids=["timeout", "auto_renew", "limit", "label"],
)
def test_the_options_of_a_hold_are_refused_with_a_rate(options: dict[str, Any]) -> None:
    with pytest.raises(TypeError, match=r"rate=\.\.\.\) takes no"):
        locked("x", rate="1/s", **options)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"rate": "10"}, ValueError),
        ({"rate": "0/s"}, ValueError),
        ({"rate": 10}, ValueError),
        ({"rate": "1/s", "burst": -1}, ValueError),
        ({"rate": "1/s", "burst": "2"}, TypeError),
        ({"burst": 2}, TypeError),  # a burst without a rate
    ],
)
def test_a_bad_rate_or_burst_fails_at_decoration(
    options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        locked("x", **options)
