"""The HTTP side of @locked: a view's answers when it cannot run, and streaming responses.

A view whose call makes an invalid lock name answers 400, a busy lock 423 (the BUSY_STATUS
setting) with Retry-After, a call over its rate 429 with Retry-After, an unreachable Redis 503;
each with a short body, JSON for clients that ask for it. A streaming response holds its
lock until it is closed.
"""

from __future__ import annotations

import asyncio
import math
import threading
import weakref
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse

from django_redis_lock.validation import MAX_TIMEOUT


def answer(request: HttpRequest, status: int, error: str, detail: str) -> HttpResponse:
    """A short JSON body for clients that ask for JSON, plain text otherwise."""
    accept = request.headers.get("Accept", "")
    if "json" in accept and "html" not in accept:
        return JsonResponse({"error": error, "detail": detail}, status=status)
    return HttpResponse(detail + "\n", status=status, content_type="text/plain; charset=utf-8")


def invalid_name(request: HttpRequest, error: ValueError) -> HttpResponse:
    """400: the request's arguments make a lock name that is not usable."""
    return answer(request, 400, "invalid", f"This request makes an invalid lock name: {error}")


def busy(request: HttpRequest, status: int, ttl: float | None) -> HttpResponse:
    """``status`` (423 unless configured) with Retry-After: the whole seconds left of the
    holder's lease ``ttl`` (None when unknown), at least 1, and at most the longest lease this
    library grants (a key someone gave a longer expiry, crafted statistics)."""
    retry_after = _whole_seconds(ttl)
    detail = f"This resource is busy; retry in {retry_after} s."
    return _retry_after(answer(request, status, "locked", detail), retry_after)


def rate_limited(request: HttpRequest, wait: float) -> HttpResponse:
    """429 with Retry-After: the ``wait`` until a call would be admitted, in whole seconds
    rounded up (a client retrying then is admitted), at least 1."""
    retry_after = _whole_seconds(wait)
    detail = f"Too many requests; retry in {retry_after} s."
    return _retry_after(answer(request, 429, "rate_limited", detail), retry_after)


def _whole_seconds(seconds: float | None) -> int:
    """``seconds`` (None or not finite: unknown) rounded up to whole seconds, from 1 to the
    longest lease this library grants."""
    known = seconds if seconds is not None and math.isfinite(seconds) else 0
    return max(1, min(MAX_TIMEOUT, math.ceil(known)))


def _retry_after(response: HttpResponse, seconds: int) -> HttpResponse:
    response["Retry-After"] = str(seconds)
    return response


def unavailable(request: HttpRequest) -> HttpResponse:
    """503: Redis could not be reached."""
    return answer(request, 503, "unavailable", "The lock service is unavailable; retry later.")


def is_streaming(result: Any) -> bool:
    """Whether ``result`` is a response whose content is produced after the view returned."""
    return isinstance(result, HttpResponseBase) and result.streaming


def release_on_close(response: HttpResponseBase, release: Callable[[], None]) -> None:
    """Release when the server closes the response (after the last chunk, or a disconnect),
    or when the response is dropped unclosed (a middleware replaced it, say); once."""
    release_once = weakref.finalize(response, _release_off_the_loop, release)
    close, response_ref = type(response).close, weakref.ref(response)

    def close_and_release() -> None:
        try:
            current = response_ref()
            if current is not None:
                close(current)
        finally:
            release_once()

    response.close = close_and_release  # type: ignore[method-assign]


def _release_off_the_loop(release: Callable[[], None]) -> None:
    """Run ``release``; from an event loop's thread (a finalizer may), in a thread of its own."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        release()
    else:
        threading.Thread(target=release, name="django_redis_lock-release", daemon=True).start()
