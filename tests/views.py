"""Views decorated with @locked, in every shape the decorator supports (see tests/urls.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.http import require_GET

from django_redis_lock import get_lock_manager, lock, locked

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


@locked("invoice:{invoice_id}")
def pay(request: HttpRequest, invoice_id: int) -> HttpResponse:
    return JsonResponse({"invoice": invoice_id, "label": _label_of(f"invoice:{invoice_id}")})


@locked("ainvoice:{invoice_id}")
async def apay(request: HttpRequest, invoice_id: int) -> HttpResponse:
    return HttpResponse(str(await lock(f"ainvoice:{invoice_id}").alocked()))


@locked("user:{request.user.pk}")
def profile(request: HttpRequest) -> HttpResponse:
    return HttpResponse(_label_of(f"user:{request.user.pk}"))


@locked(lambda request, item: f"item:{item.upper()}")
def by_callable(request: HttpRequest, item: str) -> HttpResponse:
    return HttpResponse(str(get_lock_manager().get(f"item:{item.upper()}") is not None))


@locked("labelled")
def labelled(request: HttpRequest, rest: str) -> HttpResponse:
    return HttpResponse(_label_of("labelled"))


@locked("custom", on_busy=lambda request: HttpResponse("come back later", status=409))
def custom_busy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ran")


@locked("boom")
def boom(request: HttpRequest) -> HttpResponse:
    raise ValueError("view failed")


@locked("stream")
def stream(request: HttpRequest) -> StreamingHttpResponse:
    def chunks() -> Iterator[bytes]:
        for i in range(3):
            yield f"{i}:{get_lock_manager().get('stream') is not None};".encode()

    return StreamingHttpResponse(chunks())


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
        return HttpResponse(_label_of(f"report:{pk}"))


@method_decorator(locked("areport:{pk}"), name="dispatch")
class AsyncReportView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(str(await lock(f"areport:{pk}").alocked()))


@locked("klass:{pk}")
class ClassDecoratedView(View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(_label_of(f"klass:{pk}"))


@locked("aklass:{pk}")
class AsyncClassDecoratedView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(str(await lock(f"aklass:{pk}").alocked()))


@method_decorator([locked("stacked:{pk}"), require_GET], name="dispatch")
class StackedReportView(View):
    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(str(lock(f"stacked:{pk}").locked()))


@method_decorator([locked("astacked:{pk}"), require_GET], name="dispatch")
class AsyncStackedReportView(View):
    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return HttpResponse(str(await lock(f"astacked:{pk}").alocked()))


class AsyncSubclassView(ClassDecoratedView):
    """A sync class-decorated view made async by a subclass."""

    async def get(self, request: HttpRequest, pk: int) -> HttpResponse:  # type: ignore[override]
        return HttpResponse(str(await lock(f"klass:{pk}").alocked()))


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
