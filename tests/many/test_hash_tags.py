"""REDIS_LOCK["HASH_TAGS"]: names with one Redis hash tag share a cluster slot, and lock_many
takes them in one script there; names without braces keep their keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import valkey
from django.test.utils import override_settings

from django_redis_lock import get_lock_manager, lock, lock_many
from django_redis_lock.backends.base import hash_tag_of
from django_redis_lock.runtime import runtime
from testproject.cluster import ClusterTopology
from tests.helpers import start, wait_until

ORDER = ["order:{42}:stock", "order:{42}:invoice", "order:{42}:shipping"]


@pytest.mark.parametrize(
    ("name", "tag"),
    [
        ("order:{42}:stock", "42"),
        ("{a}{b}", "a"),
        ("x}{y}", "y"),
        ("a{}b{c}", None),  # Redis hashes the whole key when the first braces are empty
        ("a{b", None),
        ("plain", None),
    ],
)
def test_hash_tag_of_reads_a_name_as_redis_cluster_does(name: str, tag: str | None) -> None:
    assert hash_tag_of(name) == tag


def test_names_without_braces_keep_their_keys() -> None:
    plain, tagged = runtime().for_locks(None), None
    with override_settings(REDIS_LOCK={"HASH_TAGS": True}):
        tagged = runtime().for_locks(None)
        assert tagged.keys_for("plain") == plain.keys_for("plain")
        assert tagged.keys_for(ORDER[0]) != plain.keys_for(ORDER[0])
        frames = {key.lock.split("}")[0] for key in map(tagged.keys_for, ORDER)}
        assert len(frames) == 1  # one cluster hash tag for the three names


@pytest.fixture
def tagged_cluster(on_cluster: ClusterTopology) -> Iterator[ClusterTopology]:
    with override_settings(REDIS_LOCK={"HASH_TAGS": True}):
        yield on_cluster


def _script_calls(cluster: ClusterTopology) -> int:
    """EVALSHA and EVAL calls on every primary of the cluster so far."""
    total = 0
    for server in cluster.primaries():
        with valkey.Valkey(server.host, server.port) as client:
            stats = client.info("commandstats")
        total += sum(
            stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval")
        )
    return total


def test_a_set_with_one_tag_is_taken_in_one_script_on_a_cluster(
    tagged_cluster: ClusterTopology,
) -> None:
    with lock_many(["order:{42}:warm", "order:{42}:up"], auto_renew=False):  # loads the scripts
        pass
    many = lock_many(ORDER, auto_renew=False)
    before = _script_calls(tagged_cluster)
    assert many.acquire(blocking=False)
    taken = _script_calls(tagged_cluster)
    many.release()
    assert (taken - before, _script_calls(tagged_cluster) - taken) == (1, 1)
    assert not any(lock(name).locked() for name in ORDER)


def test_a_tagged_set_is_all_or_none_and_hands_over_on_a_cluster(
    tagged_cluster: ClusterTopology,
) -> None:
    busy = lock(ORDER[1], auto_renew=False)
    assert busy.acquire()
    many = lock_many(ORDER, auto_renew=False)
    assert not many.acquire(blocking=False)
    assert not lock(ORDER[0]).locked()
    busy.release()
    assert many.acquire(blocking=False)
    assert set(many.fencing_tokens) == set(ORDER)
    waiter = lock(ORDER[2], auto_renew=False)
    waiting = start(lambda: waiter.acquire(blocking_timeout=10))
    queue = runtime().for_locks(None).keys_for(ORDER[2]).queue
    client = valkey.ValkeyCluster.from_url(tagged_cluster.url)
    wait_until(lambda: client.zcard(queue) == 1)
    set_token = many.fencing_tokens[ORDER[2]]
    many.release()  # hands ORDER[2] to its waiter, woken on its shard
    assert waiting.result(10) is True
    assert waiter.fencing_token is not None
    assert waiter.fencing_token > set_token
    waiter.release()


def test_tagged_names_are_listed_with_their_set(tagged_cluster: ClusterTopology) -> None:
    """The listing reads names back from keys whose tag is the name's own hash tag's."""
    with lock_many(ORDER, label="checkout", auto_renew=False):
        labels = {info.name: info.label for info in get_lock_manager().list("order:*")}
    assert labels == {
        name: f"checkout (held with {', '.join(sorted(set(ORDER) - {name}))})" for name in ORDER
    }


def test_names_of_different_tags_are_taken_one_by_one_on_a_cluster(
    tagged_cluster: ClusterTopology,
) -> None:
    backend = runtime().for_locks(None)
    names = ["a:{1}", "b:{2}"]
    assert not backend.one_script([backend.keys_for(name) for name in names])
    assert backend.one_script([backend.keys_for(name) for name in ORDER])
    with lock_many(names, auto_renew=False) as many:
        assert set(many.fencing_tokens) == set(names)
