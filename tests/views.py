"""Views decorated with @locked, in every shape the decorator supports (see tests/urls.py).

Each view has an async twin, named and routed with an "a" in front (``pay`` at ``/pay/``,
``apay`` at ``/apay/``), that takes the same lock: a test scenario runs through both.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.http import require_GET

from django_redis_lock import get_lock_manager, locked

#: Gates that gated views wait for, by name; views never wait longer than GATE_SECONDS.
GATES: dict[str, threading.Event] = {}
GATE_SECONDS = 10
#: How many times each gated view body ran, by name.
RUNS: dict[str, int] = {}
_runs_guard = threading.Lock()


def gate(name: str) -> threading.Event:
    """The gate of ``name`` (created open=False on first use)."""
    return GATES.setdefault(name, threading.Event())


def _label_of(name: str) -> str | None:
    info = get_lock_manager().get(name)
    return None if info is None else info.label


def ran(name: str, arg: object = None) -> JsonResponse:
    """A view's answer: its URL argument, and the label of the lock ``name`` (null if free)."""
    return JsonResponse({"arg": arg, "label": _label_of(name)})


aran = sync_to_async(ran)


@locked("invoice:{invoice_id}")
def pay(request: HttpRequest, invoice_id: int) -> HttpResponse:
    return ran(f"invoice:{invoice_id}", invoice_id)


@locked("invoice:{invoice_id}")
async def apay(request: HttpRequest, invoice_id: int) -> HttpResponse:
    return await aran(f"invoice:{invoice_id}", invoice_id)


@locked("user:{request.user.pk}")
def profile(request: HttpRequest) -> HttpResponse:
    return ran(f"user:{request.user.pk}")


@locked("user:{request.user.pk}")
async def aprofile(request: HttpRequest) -> HttpResponse:
    return await sync_to_async(lambda: ran(f"user:{request.user.pk}"))()  # the ORM: a thread


@locked(lambda request, item: f"item:{item.upper()}")
def by_callable(request: HttpRequest, item: str) -> HttpResponse:
    return ran(f"item:{item.upper()}", item)


@locked(lambda request, item: f"item:{item.upper()}")
async def aby_callable(request: HttpRequest, item: str) -> HttpResponse:
    return await aran(f"item:{item.upper()}", item)


@locked("labelled")
def labelled(request: HttpRequest, rest: str) -> HttpResponse:
    return ran("labelled")


@locked("labelled")
async def alabelled(request: HttpRequest, rest: str) -> HttpResponse:
    return await aran("labelled")


def come_back_later(request: HttpRequest) -> HttpResponse:
    return HttpResponse("come back later", status=409)


async def acome_back_later(request: HttpRequest) -> HttpResponse:
    return come_back_later(request)


@locked("custom", on_busy=come_back_later)
def custom_busy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ran")


@locked("custom", on_busy=acome_back_later)
async def acustom_busy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ran")


@locked("boom")
def boom(request: HttpRequest) -> HttpResponse:
    raise ValueError("view failed")


@locked("boom")
async def aboom(request: HttpRequest) -> HttpResponse:
    raise ValueError("view failed")


def _stream_chunks() -> Iterator[bytes]:
    for i in range(3):
        yield f"{i}:{get_lock_manager().get('stream') is not None};".encode()


@locked("stream")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_stream_chunks())


@locked("stream")
async def astream(request: HttpRequest) -> StreamingHttpResponse:
    return StreamingHttpResponse(_stream_chunks())


@locked("gated:{name}", timeout=5)
def gated(request: HttpRequest, name: str) -> HttpResponse:
    with _runs_guard:
        RUNS[name] = RUNS.get(name, 0) + 1
    if not gate(name).wait(GATE_SECONDS):
        return HttpResponse("gate timeout", status=500)
    return HttpResponse("ran")


@locked("agated:{name}", timeout=5)
async def agated(request: HttpRequest, name: str) -> HttpResponse:
    await asyncio.Event().wait()  # until cancelled, like a client that went away
    return HttpResponse("never")


@method_decorator(locked("report:{pk}"), name="dispatch")
class ReportView(View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return ran(f"report:{pk}", pk)


@method_decorator(locked("report:{pk}"), name="dispatch")
class AsyncReportView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return await aran(f"report:{pk}", pk)


@locked("klass:{pk}")
class ClassDecoratedView(View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return ran(f"klass:{pk}", pk)


@locked("klass:{pk}")
class AsyncClassDecoratedView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return await aran(f"klass:{pk}", pk)


class SubclassView(ClassDecoratedView):
    """A subclass of a class-decorated view: locked as its parent."""


class AsyncSubclassView(ClassDecoratedView):
    """A sync class-decorated view made async by a subclass."""

    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:  # type: ignore[override]
        return await aran(f"klass:{pk}", pk)


@method_decorator([locked("stacked:{pk}"), require_GET], name="dispatch")
class StackedReportView(View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return ran(f"stacked:{pk}", pk)


@method_decorator([locked("stacked:{pk}"), require_GET], name="dispatch")
class AsyncStackedReportView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return await aran(f"stacked:{pk}", pk)


# The slug is the whole name: a URL can make it empty or too long.
@locked("{slug}")
def doc(request: HttpRequest, slug: str) -> HttpResponse:
    return HttpResponse("ran")


@locked("{slug}")
async def adoc(request: HttpRequest, slug: str) -> HttpResponse:
    return HttpResponse("ran")


@method_decorator(locked("{slug}"), name="dispatch")
class DocView(View):
    def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        return HttpResponse("ran")


@locked("{slug}")
class AsyncDocView(View):
    async def get(self, request: HttpRequest, slug: str) -> HttpResponse:
        return HttpResponse("ran")
