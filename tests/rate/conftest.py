"""The fixtures of tests/locked/ that the rate scenarios share: ``visitor`` requests a view or
its async twin, ``make`` decorates a body as a sync or as an async function."""

from tests.locked.test_decorators import make, visitor

__all__ = ["make", "visitor"]
