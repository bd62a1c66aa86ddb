"""Hostile probes, area 5: a holder entry whose kind ('k') is a JSON array or object, written
into the holders hash by someone else: the whole listing, clear and the admin."""

from __future__ import annotations

import io
import json
import time

import pytest
import redis
from django.core.management import call_command

from django_redis_lock import get_lock_manager, lock, semaphore
from django_redis_lock.runtime import runtime
from tests.helpers import staff_client


def write_bad_kind(client: redis.Redis, kind: object) -> None:
    now, micros = client.time()
    entry = {"e": int(now) * 1000 + 60_000, "t": "123", "a": str(int(time.time() * 1e6)),
             "o": "x", "l": "y", "k": kind}
    key = runtime().for_locks(None).shared_keys_for("bad-kind", "s").lock
    client.hset(key, "field", json.dumps(entry))


@pytest.mark.parametrize("kind", [[1], {"x": 1}, [], {}])
def test_FINDING_list_survives_a_kind_that_is_an_array(redis_client: redis.Redis, kind: object) -> None:
    held = lock("innocent")
    assert held.acquire()
    write_bad_kind(redis_client, kind)
    assert [info.name for info in get_lock_manager().list()] == ["innocent"]


@pytest.mark.parametrize("kind", [[1], {"x": 1}])
def test_FINDING_command_list_survives(redis_client: redis.Redis, kind: object) -> None:
    held = lock("innocent")
    assert held.acquire()
    write_bad_kind(redis_client, kind)
    out = io.StringIO()
    call_command("locks", "list", stdout=out)
    assert "innocent" in out.getvalue()


@pytest.mark.parametrize("kind", [[1], {"x": 1}])
def test_FINDING_clear_survives(redis_client: redis.Redis, kind: object) -> None:
    held = lock("innocent")
    assert held.acquire()
    write_bad_kind(redis_client, kind)
    assert get_lock_manager().clear() >= 1
    assert not held.owned()


@pytest.mark.parametrize("kind", [[1]])
def test_FINDING_admin_changelist_survives(redis_client: redis.Redis, kind: object, db: None) -> None:
    held = semaphore("innocent", 2)
    assert held.acquire()
    write_bad_kind(redis_client, kind)
    client = staff_client("view_lock", "delete_lock")
    answer = client.get("/admin/django_redis_lock/lock/")
    assert answer.status_code == 200
    assert "innocent" in answer.content.decode()
