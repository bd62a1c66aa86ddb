"""The cluster of a test module on Redis Cluster: started once per module (xdist's --dist
loadfile keeps a module's tests on one worker), and the "default" cache pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import valkey
from django.test.utils import override_settings

from testproject.cluster import ClusterTopology
from tests.docs.examples import example_settings


def cluster_caches(url: str) -> dict[str, Any]:
    """The "default" alias on the cluster: the documentation's "locks" alias (its example
    settings_cluster.py, with the test cluster's address)."""
    found = example_settings("settings_cluster", {"10.0.0.1:6379": url.partition("://")[2]})
    assert found["REDIS_LOCK"] == {"CACHE": "locks"}
    return {"default": found["CACHES"]["locks"]}


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterTopology]:
    # As the documentation advises: the other primaries serve on while a failed one's slots wait.
    with ClusterTopology(full_coverage=False) as started:
        yield started


@pytest.fixture
def on_cluster(cluster: ClusterTopology) -> Iterator[ClusterTopology]:
    """The "default" cache on the cluster; every primary emptied afterwards."""
    with override_settings(CACHES=cluster_caches(cluster.url)):
        yield cluster
    for server in cluster.primaries():
        with valkey.Valkey(server.host, server.port) as client:
            client.flushall()
