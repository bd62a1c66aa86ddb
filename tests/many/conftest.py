"""The cluster fixtures of tests/backends, for the ordered path of lock_many."""

from tests.backends.conftest import cluster, on_cluster

__all__ = ["cluster", "on_cluster"]
