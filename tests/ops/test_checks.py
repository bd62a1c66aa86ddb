"""Every system check id, triggered by the misconfiguration it names."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_redis_lock.checks import check_settings
from django_redis_lock.ops.doctor import diagnose
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches


def _ids(**overrides: Any) -> list[str]:
    with override_settings(**overrides):
        return sorted(
            message.id
            for message in run_checks(tags=["caches"])
            if message.id and message.id.startswith("django_redis_lock.")
        )


def test_the_test_settings_pass() -> None:
    assert _ids() == []


def test_e001_settings_not_a_dict() -> None:
    assert _ids(REDIS_LOCK=["CACHE", "default"]) == ["django_redis_lock.E001"]


def test_e002_unknown_alias() -> None:
    assert _ids(REDIS_LOCK={"CACHE": "nope"}) == ["django_redis_lock.E002"]


def test_e003_not_a_redis_cache(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    assert _ids(CACHES=caches) == ["django_redis_lock.E003"]


def test_e004_unsupported_client(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"]["OPTIONS"]["CLIENT_CLASS"] = "django_redis.client.ShardClient"
    caches["default"]["LOCATION"] = [redis_url]
    assert _ids(CACHES=caches) == ["django_redis_lock.E004"]


def test_w008_unreachable_cluster_is_a_warning(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"] = {
        "BACKEND": "django_valkey.cluster_cache.cache.ClusterValkeyCache",
        "LOCATION": "valkey://127.0.0.1:1?socket_timeout=1",  # nothing listens there
    }
    assert _ids(CACHES=caches) == ["django_redis_lock.W008"]


def test_valkey_caches(redis_url: str) -> None:
    caches = build_caches(redis_url)
    valkey_url = redis_url.replace("redis://", "valkey://")
    caches["default"] = {
        "BACKEND": "django_valkey.cache.ValkeyCache",
        "LOCATION": valkey_url,
        "OPTIONS": {"SOCKET_TIMEOUT": 1},
    }
    assert _ids(CACHES=caches) == []
    caches["default"]["OPTIONS"]["CLIENT_CLASS"] = "django_valkey.client.ShardClient"
    assert _ids(CACHES=caches) == ["django_redis_lock.E004"]
    caches["default"] = {
        "BACKEND": "django_valkey.async_cache.cache.AsyncValkeyCache",
        "LOCATION": valkey_url,
    }
    # Only this package's checks: Django's own would open the async cache, and closing it
    # at the settings' change needs an event loop.
    with override_settings(CACHES=caches):
        refused = check_settings()
    assert [message.id for message in refused] == ["django_redis_lock.E003"]
    assert "ValkeyCache" in str(refused[0].hint)


@pytest.mark.parametrize("key", ["TIMEOUT", "TOMBSTONE_TIMEOUT"])
@pytest.mark.parametrize("value", [0, -1, float("inf"), 1e12, "30", True, None])
def test_e005_bad_durations(key: str, value: object) -> None:
    assert _ids(REDIS_LOCK={key: value}) == ["django_redis_lock.E005"]


@pytest.mark.parametrize(
    "key", ["AUTO_RENEW", "RUN_UNLOCKED_IF_UNAVAILABLE", "METRICS", "HASH_TAGS"]
)
def test_e006_flag_not_bool(key: str) -> None:
    assert _ids(REDIS_LOCK={key: "yes"}) == ["django_redis_lock.E006"]


@pytest.mark.parametrize(
    "changes",
    [
        {"METRICS_OTHER": ""},
        {"METRICS_OTHER": 3},
        {"METRICS_REGISTRY": 5},
        {"METRICS_REGISTRY": "no.such.module.registry"},
        {"METRICS_REGISTRY": "django_redis_lock.conf.lock_settings"},  # not a registry
    ],
)
def test_e015_metrics_settings_that_cannot_work(changes: dict[str, object]) -> None:
    pytest.importorskip("prometheus_client")
    assert _ids(REDIS_LOCK=changes) == ["django_redis_lock.E015"]


def test_e015_accepts_a_registry() -> None:
    pytest.importorskip("prometheus_client")
    assert _ids(REDIS_LOCK={"METRICS_REGISTRY": "prometheus_client.REGISTRY"}) == []


@pytest.mark.parametrize("status", [200, 302, 600, "423", True])
def test_e008_busy_status_not_an_error_status(status: object) -> None:
    assert _ids(REDIS_LOCK={"BUSY_STATUS": status}) == ["django_redis_lock.E008"]


@pytest.mark.parametrize("namespace", ["", "a{b", "x*", 3])
def test_e007_bad_namespace(namespace: object) -> None:
    assert _ids(REDIS_LOCK={"KEY_NAMESPACE": namespace}) == ["django_redis_lock.E007"]


@pytest.mark.parametrize("value", ["sharded", "Classic", "", None, True])
def test_e018_cluster_wake_ups_neither_auto_nor_classic(value: object) -> None:
    assert _ids(REDIS_LOCK={"CLUSTER_WAKE_UPS": value}) == ["django_redis_lock.E018"]


@pytest.mark.parametrize("value", ["auto", "classic"])
def test_e018_accepts_auto_and_classic(value: str) -> None:
    assert _ids(REDIS_LOCK={"CLUSTER_WAKE_UPS": value}) == []


@pytest.mark.django_db  # Django 6.1's model checks ask the database about JSONField
def test_e018_is_reported_by_manage_py_check() -> None:
    refused = "REDIS_LOCK['CLUSTER_WAKE_UPS'] must be \"auto\" or \"classic\", not 'sharded'."
    with (
        override_settings(REDIS_LOCK={"CLUSTER_WAKE_UPS": "sharded"}),
        pytest.raises(SystemCheckError) as raised,
    ):
        call_command("check")
    assert f"(django_redis_lock.E018) {refused}" in str(raised.value)


def test_w001_unknown_key() -> None:
    assert _ids(REDIS_LOCK={"TIMOUT": 5}) == ["django_redis_lock.W001"]


def test_w003_no_socket_timeout(redis_url: str) -> None:
    caches = build_caches(redis_url)
    del caches["default"]["OPTIONS"]["SOCKET_TIMEOUT"]
    assert _ids(CACHES=caches) == ["django_redis_lock.W003"]
    caches["default"] = {**caches["builtin"], "OPTIONS": {}}
    assert _ids(CACHES=caches) == ["django_redis_lock.W003"]


def test_w002_key_function_that_hides_names(redis_url: str) -> None:
    caches = build_caches(redis_url)
    caches["default"]["KEY_FUNCTION"] = "tests.ops.test_checks.hashed_key"
    assert _ids(CACHES=caches) == ["django_redis_lock.W002"]


def hashed_key(key: str, key_prefix: str, version: int) -> str:
    """A KEY_FUNCTION that keeps no key text."""
    import hashlib

    return hashlib.sha1(f"{key_prefix}:{version}:{key}".encode()).hexdigest()


# -- what the servers say of themselves (issue 20) -------------------------------------------


EVICTING = ("--maxmemory", "4mb", "--maxmemory-policy")


@pytest.mark.parametrize(
    "policy", ["allkeys-lru", "allkeys-random", "volatile-lru", "volatile-ttl"]
)
def test_w010_a_server_that_may_evict_keys(redis_factory: RedisServerGroup, policy: str) -> None:
    server = redis_factory(extra_args=(*EVICTING, policy))
    with override_settings(CACHES=build_caches(server.url)):
        found = [
            message
            for message in run_checks(tags=["caches"])
            if message.id == "django_redis_lock.W010"
        ]
    assert len(found) == 1
    assert f"maxmemory-policy {policy}" in found[0].msg
    assert f"server 127.0.0.1:{server.port} of cache 'default'" in found[0].msg
    assert "separate instance" in str(found[0].hint)


@pytest.mark.parametrize(
    "args", [("--maxmemory-policy", "allkeys-lru"), (*EVICTING, "noeviction")], ids=str
)
def test_no_w010_without_a_limit_or_with_noeviction(
    redis_factory: RedisServerGroup, args: tuple[str, ...]
) -> None:
    server = redis_factory(extra_args=args)
    assert _ids(CACHES=build_caches(server.url)) == []


def test_w008_a_server_that_does_not_answer_at_startup(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    caches = build_caches(server.url)
    server.stop()  # the port is known and nothing listens there now
    with override_settings(CACHES=caches):
        found = [
            message
            for message in run_checks(tags=["caches"])
            if message.id and message.id.startswith("django_redis")
        ]
    assert [message.id for message in found] == ["django_redis_lock.W008"]
    assert f"server 127.0.0.1:{server.port} of cache 'default' could not be" in found[0].msg


def test_w012_a_socket_timeout_that_wait_timeout_leaves_no_margin(redis_url: str) -> None:
    caches = build_caches(redis_url)
    # Django's cache: django-redis keeps the pool of a URL, made with its first options.
    caches["default"] = {**caches["builtin"], "OPTIONS": {"socket_timeout": 1}}
    settings = {"WAIT_REPLICAS": 0, "WAIT_TIMEOUT": 1}
    assert _ids(CACHES=caches, REDIS_LOCK=settings) == []  # no WAIT: nothing to time out
    ids = _ids(CACHES=caches, REDIS_LOCK={**settings, "WAIT_REPLICAS": 1})
    assert "django_redis_lock.W012" in ids  # (and W005: this server has no replica)
    caches["default"]["OPTIONS"]["socket_timeout"] = 1.5
    assert "django_redis_lock.W012" not in _ids(
        CACHES=caches, REDIS_LOCK={**settings, "WAIT_REPLICAS": 1}
    )


def test_the_catalogue_lists_every_id_the_checks_use_and_no_other() -> None:
    import re
    from pathlib import Path

    import django_redis_lock
    from django_redis_lock.checks import CHECKS

    package = Path(django_redis_lock.__file__).parent
    used = {
        found
        for source in package.rglob("*.py")
        for found in re.findall(r"django_redis_lock\.([EW]\d{3})", source.read_text())
    }
    assert used == set(CHECKS)


def test_every_id_in_the_catalogue_has_a_test_here() -> None:
    from pathlib import Path

    from django_redis_lock.checks import CHECKS

    tests = "".join(path.read_text() for path in Path(__file__).parent.parent.rglob("*.py"))
    untested = [check for check in CHECKS if f"django_redis_lock.{check}" not in tests]
    assert untested == []


def test_w002_is_what_the_doctor_says_of_the_listing(redis_url: str) -> None:
    """One rule, one wording: the doctor's listing item is the system check's W002."""
    caches = build_caches(redis_url)
    caches["default"]["KEY_FUNCTION"] = "tests.ops.test_checks.hashed_key"
    with override_settings(CACHES=caches):
        (w002,) = [m for m in run_checks(tags=["caches"]) if m.id == "django_redis_lock.W002"]
        (listing,) = [finding for finding in diagnose() if finding.check == "listing"]
    assert (listing.level, listing.message, listing.fix) == ("warning", w002.msg, w002.hint)
