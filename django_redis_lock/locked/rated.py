"""One call of a ``@locked(name, rate=...)`` callable: admitted within its rate, else refused.

Refused (over the rate, not within ``blocking_timeout`` of its turn): a view answers 429 with
Retry-After, a Celery or Django task is sent again for when a call would be admitted
(:mod:`~django_redis_lock.locked.resend`), a plain function raises RateLimited; ``on_busy``
replaces any of them. Nothing is held while the callable runs: a turn is spent when taken.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Generator
from typing import Any

from django_redis_lock.exceptions import LockUnavailable, RateLimited
from django_redis_lock.locked import responses
from django_redis_lock.locked.calls import Call, Stage
from django_redis_lock.locked.resend import aresend_task, resend_task
from django_redis_lock.rate.limit import RateLimit, Turn

logger = logging.getLogger("django_redis_lock")


class RatedCall(Call):
    """One call of a rate-limited callable (see the module)."""

    limit: RateLimit  # made as soon as the name is known
    limited: RateLimited  # what a refused call raises

    def named(self, name: str | tuple[str, ...]) -> Generator[Stage, Any, Any]:
        """Take a turn, run; the answers when refused or unavailable."""
        assert isinstance(name, str), "@locked(rate=...) takes one name"
        try:
            self.limit = self._limit(name)  # a cluster cache connects when first used
            turn = yield Stage.ACQUIRE
        except LockUnavailable as exc:
            return (yield from self.unavailable(exc))
        if turn.admitted:
            return (yield Stage.RUN)
        label = self.spec.label
        if self.spec.options.on_busy is not None:
            logger.info("Rate limit %r is spent: %s returns on_busy.", name, label)
            return (yield Stage.ON_BUSY)
        if self.request is not None:
            logger.info("Rate limit %r is spent: %s answers 429.", name, label)
            return responses.rate_limited(self.request, turn.retry_after)
        self.limited = self.limit.limited(turn.retry_after)
        sent = yield Stage.RESEND  # a Celery task raises Celery's Retry instead
        if sent is not None:
            logger.info("Rate limit %r is spent: %s is sent again as %s.", name, label, sent)
            message = f"{self.limited} The task is sent again as {sent}."
            raise RateLimited(message, turn.retry_after)
        raise self.limited

    def acquire(self) -> Turn:
        """The call's turn, waited for (at most ``blocking_timeout``, else refused at once)."""
        turn = self.limit.reserve(self.spec.options.blocking_timeout)
        if turn.wait > 0:
            time.sleep(turn.wait)
        return turn

    async def aacquire(self) -> Turn:
        """:meth:`acquire` for async code."""
        turn = await self.limit.areserve(self.spec.options.blocking_timeout)
        if turn.wait > 0:
            await asyncio.sleep(turn.wait)
        return turn

    def resend(self, func: Callable[..., Any]) -> str | None:
        """The id of the task running ``func``, sent again for when a call would be admitted."""
        return resend_task(func, self.limited.retry_after, self.limited)

    async def aresend(self, func: Callable[..., Any]) -> str | None:
        """:meth:`resend` for async code."""
        return await aresend_task(func, self.limited.retry_after)

    def _limit(self, name: str) -> RateLimit:
        options = self.spec.options
        assert options.rate is not None  # a RatedCall's spec has one
        assert not isinstance(options.using, tuple)  # a quorum is refused as it decorates
        template = self.spec.naming.template
        using, burst = options.using, options.burst
        return RateLimit(name, options.rate, burst=burst, using=using, template=template)
