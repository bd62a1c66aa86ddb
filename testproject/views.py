"""The demo page: see the held locks, take one, release one.

The Lock objects this process acquired are kept in a module-level dict, so that "Release" acts
through the same object that holds the lock (a compare-and-delete on its secret); a hold taken
by anyone else (a lock, one place of a semaphore, a reader or the writer of a read/write lock, a
unique task's key) is force-released through the manager, by the fencing token the page showed.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import TYPE_CHECKING

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

import django_redis_lock
from django_redis_lock.unique.keys import PREFIX as UNIQUE_PREFIX

if TYPE_CHECKING:
    from django_redis_lock import Lock, LockInfo

MAX_LISTED = 200
LABEL = "demo page"

# Lock objects acquired by this process, by lock name; runserver serves requests in threads.
_held: dict[str, Lock] = {}
_held_guard = threading.Lock()


def forget_held_locks() -> None:
    """Forget the Lock objects this process took (the tests start each from none)."""
    with _held_guard:
        _held.clear()


#: How each kind of hold reads in the table (LockInfo.kind: "lock", "semaphore", "read", "write").
KIND_NAMES = {"lock": "lock", "semaphore": "semaphore place", "read": "reader", "write": "writer"}


def kind_of(info: LockInfo) -> str:
    """What a row holds, in words: ``lock``, ``semaphore place (of 3)``, ``reader``, ``writer``,
    or ``unique task key`` (the lock @unique takes for a queued or running task)."""
    if info.kind == "lock" and info.name.startswith(UNIQUE_PREFIX):
        return "unique task key"
    kind = KIND_NAMES.get(info.kind, info.kind)
    return f"{kind} (of {info.limit})" if info.kind == "semaphore" else kind


class AcquireForm(forms.Form):
    """What the "Take a lock" form posts."""

    name = forms.CharField(max_length=200, strip=True)
    timeout = forms.FloatField(min_value=0.1, max_value=86400, initial=60, label="Timeout (s)")


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """List the held locks (at most MAX_LISTED) with the acquire and release forms."""
    locks = []
    error = None
    try:
        listing = django_redis_lock.get_lock_manager().list()
        locks = list(itertools.islice(listing, MAX_LISTED + 1))
    except django_redis_lock.LockUnavailable as exc:
        error = f"Redis is unavailable: {exc}"
    truncated = len(locks) > MAX_LISTED
    locks = locks[:MAX_LISTED]
    with _held_guard:
        # Forget holds that expired or were force-released: their token is no longer listed.
        listed = {(info.name, info.fencing_token) for info in locks}
        if error is None and not truncated:
            for name in [n for n, lk in _held.items() if (n, lk.fencing_token) not in listed]:
                del _held[name]
        mine = {(name, lk.fencing_token) for name, lk in _held.items()}
    # This process's own Lock objects hold plain locks only (the acquire form's).
    rows = [
        {
            "info": info,
            "kind": kind_of(info),
            "mine": info.kind == "lock" and (info.name, info.fencing_token) in mine,
        }
        for info in locks
    ]
    context = {
        "rows": rows,
        "error": error,
        "truncated": truncated,
        "max_listed": MAX_LISTED,
        "form": AcquireForm(),
        "job_seconds": f"{job_seconds():g}",
    }
    return render(request, "testproject/index.html", context)


@require_POST
def acquire(request: HttpRequest) -> HttpResponseRedirect:
    """Take a lock without waiting and without auto-renewal; it expires after its timeout."""
    form = AcquireForm(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            messages.error(request, f"{field}: {' '.join(str(error) for error in errors)}")
        return redirect("demo")
    name: str = form.cleaned_data["name"]
    timeout: float = form.cleaned_data["timeout"]
    try:
        lk = django_redis_lock.lock(
            name, timeout=timeout, blocking=False, auto_renew=False, label=LABEL
        )
        acquired = lk.acquire()
        holder = None if acquired else django_redis_lock.get_lock_manager().get(name)
    except django_redis_lock.LockUnavailable as exc:
        messages.error(request, f"Redis is unavailable: {exc}")
        return redirect("demo")
    except (ValueError, TypeError) as exc:
        messages.error(request, f"Invalid lock: {exc}")
        return redirect("demo")
    if acquired:
        with _held_guard:
            _held[name] = lk
        messages.success(
            request,
            f"Acquired {name!r} for {timeout:g} s (fencing token {lk.fencing_token}).",
        )
    elif holder is not None:
        messages.warning(request, f"{name!r} is busy: held by {holder.owner} ({holder.label}).")
    else:
        messages.warning(request, f"{name!r} is busy.")
    return redirect("demo")


@require_POST
def release(request: HttpRequest) -> HttpResponseRedirect:
    """Release through our own Lock object when we hold that hold, else force-release the
    hold the page showed (its fencing token): that lock, semaphore place, reader or writer,
    and not a hold someone took since."""
    name = request.POST.get("name", "")
    if not name:
        messages.error(request, "No lock name given.")
        return redirect("demo")
    try:
        token = int(request.POST.get("token", ""))
    except ValueError:
        messages.error(request, "No valid fencing token given.")
        return redirect("demo")
    with _held_guard:
        lk = _held.get(name)
        if lk is not None and lk.fencing_token == token:
            del _held[name]
        else:
            lk = None
    try:
        if lk is not None:
            lk.release()
            messages.success(request, f"Released {name!r}.")
            return redirect("demo")
        released = django_redis_lock.get_lock_manager().force_release(name, fencing_token=token)
        if released is None:
            messages.info(request, f"{name!r} was not held by that holder any more.")
        else:
            messages.success(request, f"Force-released {name!r} (fencing token {token}).")
    except django_redis_lock.LockNotOwned:
        messages.warning(request, f"{name!r} had already expired or been force-released.")
    except django_redis_lock.LockUnavailable as exc:
        messages.error(request, f"Redis is unavailable: {exc}")
    return redirect("demo")


def job_seconds() -> float:
    """How long the demo's locked job runs: the DEMO_JOB_SECONDS setting (default 10 s)."""
    return float(getattr(settings, "DEMO_JOB_SECONDS", 10))


@require_http_methods(["GET", "POST"])
@django_redis_lock.locked("demo:slow-job:{job}", timeout=30)
def slow_job(request: HttpRequest, job: str) -> HttpResponse:
    """A @locked view: run it in two tabs; the second answers 423 while the first runs.

    The demo page starts it with a POST form that opens a tab: browsers hold back a second
    GET of a URL that is still loading (to share the answer), but never a POST.
    """
    seconds = job_seconds()
    time.sleep(seconds)  # the demo's stand-in for real work
    return render(request, "testproject/slow_job.html", {"job": job, "seconds": f"{seconds:g}"})


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The process's Prometheus metrics (prometheus_client's default registry, where the
    locks' go), as django-prometheus's /metrics view serves them; 404 without the library."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
    except ImportError:
        raise Http404("prometheus_client is not installed") from None
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
