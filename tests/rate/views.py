"""Views over a rate with @locked(rate=...), in every shape the decorator supports (see
tests/rate/urls.py). Each has an async twin, routed with an "a" in front, on the same rate."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views import View

from django_redis_lock import locked

#: One call a minute per key: a second call is refused for about 60 s.
RATE = "1/m"


@locked("paced:{key}", rate=RATE)
def paced(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("ran")


@locked("paced:{key}", rate=RATE)
async def apaced(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("ran")


@method_decorator(locked("paced:{key}", rate=RATE), name="dispatch")
class PacedView(View):
    def get(self, request: HttpRequest, key: str) -> HttpResponse:
        return HttpResponse("ran")


@method_decorator(locked("paced:{key}", rate=RATE), name="dispatch")
class AsyncPacedView(View):
    async def get(self, request: HttpRequest, key: str) -> HttpResponse:
        return HttpResponse("ran")


@locked("paced:{key}", rate=RATE)
class PacedClassView(View):
    def get(self, request: HttpRequest, key: str) -> HttpResponse:
        return HttpResponse("ran")


@locked("paced:{key}", rate=RATE)
class AsyncPacedClassView(View):
    async def get(self, request: HttpRequest, key: str) -> HttpResponse:
        return HttpResponse("ran")


# Five a second, and up to 2 s to wait for a turn: a quick third request waits, then runs.
@locked("patient:{key}", rate="5/s", blocking_timeout=2)
def patient(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("ran")


@locked("patient:{key}", rate="5/s", blocking_timeout=2)
async def apatient(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("ran")


def slow_down(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("slow down", status=503)


async def aslow_down(request: HttpRequest, key: str) -> HttpResponse:
    return slow_down(request, key)


@locked("polite:{key}", rate=RATE, on_busy=slow_down)
def polite(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("ran")


@locked("polite:{key}", rate=RATE, on_busy=aslow_down)
async def apolite(request: HttpRequest, key: str) -> HttpResponse:
    return HttpResponse("ran")
