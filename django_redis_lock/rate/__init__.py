"""A rate shared by every worker: ``rate_limit(name, "100/s")`` (see
:mod:`django_redis_lock.rate.limit`), and ``@locked(name, rate=...)`` on top of it."""

from django_redis_lock.rate.limit import RateLimit, Turn, rate_limit

__all__ = ["RateLimit", "Turn", "rate_limit"]
