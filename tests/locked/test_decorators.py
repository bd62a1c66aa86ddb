"""@locked on views (sync, async, class-based), plain functions, and real HTTP requests.

A scenario that a sync and an async callable must both pass is written once: the ``visitor``
fixture requests the sync views of tests/views.py or their async twins, and the ``make``
fixture decorates a function body as a sync function or as an async one.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.test.client import AsyncRequestFactory, RequestFactory
from django.utils.decorators import method_decorator
from django.views import View

from django_redis_lock import (
    Lock,
    LockBusy,
    LockUnavailable,
    get_lock_manager,
    lock,
    locked,
    signals,
)
from django_redis_lock.testing import make_busy
from django_redis_lock.validation import MAX_LABEL_LENGTH, MAX_NAME_LENGTH
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests import views
from tests.helpers import wait_until

pytestmark = pytest.mark.urls("tests.urls")


def _hold(name: str) -> Lock:
    held = lock(name, timeout=12, auto_renew=False)
    assert held.acquire(blocking=False)
    return held


class Visitor:
    """Requests to the sync views of tests/views.py, or to their async twins (the same path
    with "a" in front) through Django's AsyncClient."""

    def __init__(self, is_async: bool) -> None:
        self.is_async = is_async
        self.client = AsyncClient() if is_async else Client()

    def path(self, path: str) -> str:
        """The path of the sync view at ``path``, or of its async twin."""
        return "/a" + path[1:] if self.is_async else path

    def pick(self, choices: tuple[str, str]) -> str:
        """The first of ``choices`` for the sync views, the second for their twins."""
        return choices[self.is_async]

    def get(self, path: str, **headers: str) -> Any:
        return self._answer(self.client.get(self.path(path), headers=headers))

    def post(self, path: str) -> Any:
        return self._answer(self.client.post(self.path(path)))

    def _answer(self, response: Any) -> Any:
        return asyncio.run(response) if self.is_async else response


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def visitor(request: pytest.FixtureRequest) -> Visitor:
    """A Visitor of the sync views, then of their async twins."""
    return Visitor(request.param)


Make = Callable[..., Callable[..., Any]]


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def make(request: pytest.FixtureRequest) -> Make:
    """``make(body, *args, **options)``: ``body`` decorated with ``@locked(*args, **options)``,
    as a sync function, then as an async one (``async def``) that the caller awaits to its end
    in a fresh event loop. Either way the caller calls it as a plain function."""

    def sync(body: Callable[..., Any], *args: Any, **options: Any) -> Callable[..., Any]:
        return locked(*args, **options)(body)

    def asynchronous(body: Callable[..., Any], *args: Any, **options: Any) -> Callable[..., Any]:
        @functools.wraps(body)  # its signature too, which names read
        async def async_body(*call_args: Any, **call_kwargs: Any) -> Any:
            return body(*call_args, **call_kwargs)

        decorated = locked(*args, **options)(async_body)
        return lambda *call_args, **call_kwargs: asyncio.run(decorated(*call_args, **call_kwargs))

    return asynchronous if request.param else sync


@pytest.fixture
def acquired() -> Iterator[list[str]]:
    """The names of the locks acquired during the test, in order."""
    names: list[str] = []

    def record(sender: object, name: str, **kwargs: object) -> None:
        names.append(name)

    signals.lock_acquired.connect(record, weak=False)
    yield names
    signals.lock_acquired.disconnect(record)


# -- views -----------------------------------------------------------------------------------

# A view of tests/views.py (its twin has the same lock), its lock's name before ":<pk>", and
# the label of the view and of its twin.
VIEWS = [
    pytest.param("pay", "invoice", ("tests.views.pay", "tests.views.apay"), id="function"),
    pytest.param(
        "report",
        "report",
        ("tests.views.ReportView", "tests.views.AsyncReportView"),
        id="method_decorator",
    ),
    pytest.param(
        "stacked",
        "stacked",
        ("tests.views.StackedReportView", "tests.views.AsyncStackedReportView"),
        id="method_decorator-list",
    ),
    pytest.param(
        "klass",
        "klass",
        ("tests.views.ClassDecoratedView", "tests.views.AsyncClassDecoratedView"),
        id="class-decorator",
    ),
    pytest.param(
        "subclass",
        "klass",
        ("tests.views.ClassDecoratedView", "tests.views.ClassDecoratedView"),
        id="subclass",
    ),
]


@pytest.mark.parametrize(("view", "name", "labels"), VIEWS)
def test_view_runs_under_its_lock_and_answers_423_when_busy(
    visitor: Visitor, view: str, name: str, labels: tuple[str, str]
) -> None:
    path = f"/{view}/7/"
    response = visitor.get(path)
    assert response.status_code == 200
    label = f"{visitor.pick(labels)} GET {visitor.path(path)}"  # the lock was held by the view
    assert response.json() == {"arg": 7, "label": label}
    assert not lock(f"{name}:7").locked()
    held = _hold(f"{name}:7")
    busy = visitor.get(path)
    assert busy.status_code == 423
    assert busy["Retry-After"] in ("11", "12")  # whole seconds left of a 12 s lease
    assert busy["Content-Type"].startswith("text/plain")
    assert b"busy" in busy.content
    as_json = visitor.get(path, Accept="application/json")
    assert as_json.status_code == 423
    assert as_json.json()["error"] == "locked"
    held.release()
    assert visitor.get(path).status_code == 200
    assert not lock(f"{name}:7").locked()


def test_busy_status_is_a_setting(visitor: Visitor) -> None:
    with make_busy("invoice:8"), override_settings(REDIS_LOCK={"BUSY_STATUS": 409}):
        assert visitor.get("/pay/8/").status_code == 409


def test_method_decorator_in_a_list_keeps_the_other_decorators(visitor: Visitor) -> None:
    assert visitor.post("/stacked/4/").status_code == 405  # require_GET still applies


@pytest.mark.django_db(transaction=True)  # async views read the user in another thread
def test_template_with_attribute_access(visitor: Visitor) -> None:
    user = User.objects.create_user("ada")
    visitor.client.force_login(user)
    response = visitor.get("/profile/")
    label = visitor.pick(("tests.views.profile", "tests.views.aprofile"))
    assert response.json()["label"] == f"{label} GET {visitor.path('/profile/')}"
    with make_busy(f"user:{user.pk}"):
        assert visitor.get("/profile/").status_code == 423


def test_callable_name(visitor: Visitor) -> None:
    label = visitor.pick(("tests.views.by_callable", "tests.views.aby_callable"))
    path = visitor.path("/item/abc/")
    assert visitor.get("/item/abc/").json() == {"arg": "abc", "label": f"{label} GET {path}"}
    with make_busy("item:ABC"):
        assert visitor.get("/item/abc/").status_code == 423


def test_on_busy_replaces_the_busy_response(visitor: Visitor) -> None:
    """The async view's on_busy is async: its value is awaited."""
    with make_busy("custom"):
        response = visitor.get("/custom/")
    assert (response.status_code, response.content) == (409, b"come back later")
    assert visitor.get("/custom/").content == b"ran"


def test_lock_is_released_when_the_view_raises(visitor: Visitor) -> None:
    with pytest.raises(ValueError, match="view failed"):
        visitor.get("/boom/")
    assert not lock("boom").locked()


def test_streaming_response_keeps_the_lock_until_closed(visitor: Visitor) -> None:
    response = visitor.get("/stream/")
    assert lock("stream").locked()
    body = b"".join(response.streaming_content)
    assert body == b"0:True;1:True;2:True;"
    # The test client closes the response after the last chunk, as a server does.
    assert not lock("stream").locked()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_streaming_response_dropped_unclosed_releases_its_lock(is_async: bool) -> None:
    if is_async:
        response = asyncio.run(views.astream(AsyncRequestFactory().get("/astream/")))
    else:
        response = views.stream(RequestFactory().get("/stream/"))
    assert lock("stream").locked()
    del response  # a middleware replaced it, say: nobody closes it
    if is_async:
        # Garbage, but in a reference cycle until the collector runs: an error that redis-py's
        # asyncio client caught keeps its traceback, whose frames lead to the loop's result.
        gc.collect()
    wait_until(lambda: not lock("stream").locked(), timeout=2)


def test_a_long_request_path_shortens_the_default_label(visitor: Visitor) -> None:
    path = "/labelled/" + "y" * 3000
    response = visitor.get(path)
    assert response.status_code == 200
    label = visitor.pick(("tests.views.labelled", "tests.views.alabelled"))
    assert response.json()["label"] == f"{label} GET {visitor.path(path)}"[:255] + "\u2026"


def test_view_answers_503_when_redis_is_down(
    visitor: Visitor, redis_factory: RedisServerGroup
) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        response = visitor.get("/pay/1/", Accept="application/json")
        assert response.status_code == 503
        assert response.json()["error"] == "unavailable"
        with override_settings(REDIS_LOCK={"RUN_UNLOCKED_IF_UNAVAILABLE": True}):
            assert visitor.get("/custom/").content == b"ran"


@pytest.mark.parametrize("view", ["doc", "cdoc"], ids=["function", "class"])
@pytest.mark.parametrize(
    ("slug", "status"),
    [("x" * MAX_NAME_LENGTH, 200), ("x" * (MAX_NAME_LENGTH + 1), 400), ("", 400)],
)
def test_url_kwargs_that_make_an_invalid_name_answer_400(
    visitor: Visitor, view: str, slug: str, status: int, acquired: list[str]
) -> None:
    """These views are locked by "{slug}": a name as long as allowed, one too long, empty."""
    path = f"/{view}/{slug}/"
    plain = visitor.get(path)
    as_json = visitor.get(path, Accept="application/json")
    assert (plain.status_code, as_json.status_code) == (status, status)
    if status == 200:
        assert plain.content == b"ran"
        assert acquired == [slug, slug]
        return
    assert plain["Content-Type"].startswith("text/plain")
    assert b"invalid lock name" in plain.content
    assert as_json.json()["error"] == "invalid"
    assert acquired == []  # the lock was never taken


def test_async_view_releases_when_the_client_goes_away() -> None:
    async def main() -> None:
        holding = asyncio.Event()
        signals.lock_acquired.connect(lambda **kwargs: holding.set(), weak=False, dispatch_uid="x")
        try:
            request = AsyncRequestFactory().get("/agated/x/")
            task = asyncio.create_task(views.agated(request, name="x"))
            await asyncio.wait_for(holding.wait(), timeout=5)  # until the view holds its lock
        finally:
            signals.lock_acquired.disconnect(dispatch_uid="x")
        assert await lock("agated:x").alocked()
        task.cancel()  # what Django does when the ASGI client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await lock("agated:x").alocked()

    asyncio.run(main())


class LoopSensitive:
    @property
    def key(self) -> str:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return "off-loop"
        raise AssertionError("computed on the event loop")


@locked("computed:{obj.key}")
async def uses_attribute(obj: LoopSensitive) -> str:
    return "ran"


def test_async_name_with_attribute_access_is_computed_off_the_event_loop() -> None:
    assert asyncio.run(uses_attribute(LoopSensitive())) == "ran"


# -- plain functions -------------------------------------------------------------------------


def test_function_runs_locked_or_raises_lock_busy(make: Make) -> None:
    def body(x: int, y: int = 1) -> int:
        assert get_lock_manager().get(f"add:{x}") is not None
        return x + y

    add = make(body, "add:{x}")
    assert add(2, y=3) == 5
    held = _hold("add:2")
    with pytest.raises(LockBusy):
        add(2)
    assert add(3) == 4  # another name, another lock
    held.release()
    assert get_lock_manager().get("add:2") is None


def test_function_with_on_busy_returns_its_value(make: Make) -> None:
    add = make(lambda x, y=1: x + y, "aadd:{x}", on_busy=lambda x, y=1: -1)
    assert add(1) == 2
    held = _hold("aadd:1")
    assert add(1) == -1
    held.release()


@pytest.mark.parametrize("argument", ["x" * MAX_NAME_LENGTH, "\ud800"])
def test_arguments_that_make_an_invalid_name_raise_value_error(
    make: Make, argument: str, acquired: list[str]
) -> None:
    add = make(lambda x, y=1: x + y, "add:{x}")
    with pytest.raises(ValueError, match="lock name"):
        add(argument)
    assert acquired == []


def test_function_waits_up_to_blocking_timeout(make: Make) -> None:
    patient = make(lambda: "ran", "patient", blocking_timeout=5)
    held = _hold("patient")
    busy = threading.Event()
    results: list[str] = []
    signals.lock_busy.connect(lambda **kwargs: busy.set(), weak=False, dispatch_uid="patient")
    try:
        thread = threading.Thread(target=lambda: results.append(patient()))
        thread.start()
        assert busy.wait(5)  # it found the lock held and waits
    finally:
        signals.lock_busy.disconnect(dispatch_uid="patient")
    held.release()
    thread.join(5)
    assert results == ["ran"]


def test_function_raises_lock_unavailable_when_redis_is_down(
    make: Make, redis_factory: RedisServerGroup
) -> None:
    add = make(lambda x: x, "add:{x}")
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        with pytest.raises(LockUnavailable):
            add(1)


def test_interrupted_after_acquiring_releases(make: Make) -> None:
    def interrupt(**kwargs: object) -> None:
        raise KeyboardInterrupt

    add = make(lambda x: x, "add:{x}")
    signals.lock_acquired.connect(interrupt, weak=False)
    try:
        with pytest.raises(KeyboardInterrupt):
            add(5)
    finally:
        signals.lock_acquired.disconnect(interrupt)
    assert not lock("add:5").locked()


def test_a_stop_iteration_reaches_the_caller_as_it_is() -> None:
    """A sync function's StopIteration is not turned into a RuntimeError on its way out."""
    stop = StopIteration("no more jobs")

    @locked("jobs")
    def next_job() -> None:
        raise stop

    with pytest.raises(StopIteration) as raised:
        next_job()
    assert raised.value is stop
    assert not lock("jobs").locked()


def test_generators_and_sync_targets_with_async_on_busy_are_refused() -> None:
    def numbers() -> Any:
        yield 1

    async def anumbers() -> Any:
        yield 1

    async def later() -> None: ...

    for target in (numbers, anumbers):
        with pytest.raises(TypeError, match="generator"):
            locked("gen")(target)
    with pytest.raises(TypeError, match="async on_busy"):
        locked("x", on_busy=later)(lambda: None)


def test_template_naming_an_unknown_argument_fails_at_decoration() -> None:
    def pay(request: object, invoice_id: int) -> None: ...

    with pytest.raises(ValueError, match=r"invoce_id.*takes: request, invoice_id"):
        locked("invoice:{invoce_id}")(pay)


@pytest.mark.parametrize(
    ("name", "error"),
    [("x:{}", ValueError), ("x:{0}", ValueError), ("", ValueError), (3, TypeError)],
)
def test_bad_names_fail_at_decoration(name: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        locked(name)(lambda: None)


@pytest.mark.parametrize(
    ("using", "unknown"),
    [("no-such-alias", "'no-such-alias' is"), (["default", "builtin", "nope"], "'nope' is")],
)
def test_an_alias_not_in_caches_is_refused_at_decoration(using: Any, unknown: str) -> None:
    with pytest.raises(ValueError, match=f"{unknown} not a cache alias in CACHES") as refused:
        locked("x", using=using)
    assert "configured: 'default', 'builtin'" in str(refused.value)  # what the user can pick
    locked("x", using="builtin")  # one that is there


def test_an_alias_named_before_the_settings_are_loaded_is_a_system_check_error(
    redis_url: str,
) -> None:
    """Reading the settings as it decorates could load them in the middle of an import (of
    the settings module itself, even): the decoration is checked at startup instead."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = f"""
import django
from django.conf import settings
from django_redis_lock import locked, unique
locked("x", using="no-such-alias")
unique("y", using=["default", "q1", "q2"])
locked("z", using="default")
settings.configure(
    INSTALLED_APPS=["django_redis_lock"],
    CACHES={{"default": {{"BACKEND": "django_redis.cache.RedisCache", "LOCATION": {redis_url!r}}}}},
)
django.setup()
from django.core.checks import run_checks
for message in run_checks():
    if message.id == "django_redis_lock.E016":
        print(message.msg)
"""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "@locked(using='no-such-alias'): 'no-such-alias' is not a cache alias in CACHES "
        "(configured: 'default').",
        "@unique(using=('default', 'q1', 'q2')): 'q1' and 'q2' are not cache aliases in CACHES "
        "(configured: 'default').",
    ]


@locked("export:{user}:{fmt}")
def export(user: str, fmt: str, inner: tuple[str, str] | None = None) -> str:
    """Runs ``export(*inner)`` while holding its own lock, when given."""
    return export(*inner) if inner else "ran"


@pytest.mark.parametrize(
    ("outer", "inner"),
    [(("a:b", "c"), ("a", "b:c")), (("a", "b:c"), ("a%3Ab", "c")), (("a:", "b"), ("a", ":b"))],
)
def test_template_values_never_collide_across_fields(
    outer: tuple[str, str], inner: tuple[str, str]
) -> None:
    assert export(*outer, inner=inner) == "ran"  # not LockBusy: another lock


@pytest.mark.parametrize(
    ("user", "fmt", "name"),
    [
        ("ada", "csv", "export:ada:csv"),
        ("a:b", "c", "export:a%3Ab:c"),
        ("a", "b:c", "export:a:b%3Ac"),
        ("50%", "x", "export:50%25:x"),
    ],
)
def test_template_values_are_escaped_as_the_readme_says(
    make: Make, user: str, fmt: str, name: str
) -> None:
    exporter = make(lambda user, fmt: "ran", "export:{user}:{fmt}")
    held = _hold(name)
    with pytest.raises(LockBusy):
        exporter(user, fmt)
    held.release()


def test_one_field_and_callable_names_are_not_escaped(make: Make) -> None:
    read = make(lambda path: None, "file:{path}")
    call = make(lambda path: None, lambda path: f"call:{path}")
    for name, function in (("file:a:b%c", read), ("call:a:b%c", call)):
        held = _hold(name)
        with pytest.raises(LockBusy):
            function("a:b%c")
        held.release()


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("{a}{b}", "side by side"),
        ("x:{a}%{b}", "must not start with '%'"),
        ("x:{a:{b}}", "format spec"),
        ("x:{a!z}", "conversion"),
        ("x:{a..b}", "attributes or"),
    ],
)
def test_ambiguous_or_malformed_templates_fail_at_decoration(template: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        locked(template)  # before it knows what it decorates (method_decorator)


@pytest.mark.parametrize(
    "template",
    [
        "x:{request.__class__.__init__.__globals__}",
        "x:{request._messages}",
        "x:{request.GET[_x]}",
        "x:{_private}",
        "x:{request.user._meta}",
    ],
)
def test_fields_reading_private_names_fail_at_decoration(template: str) -> None:
    def view(request: object, _private: int = 0) -> None: ...

    class Page(View):
        def get(self, request: HttpRequest) -> HttpResponse:
            return HttpResponse()

    for target in (view, Page):
        with pytest.raises(ValueError, match="starting with '_'"):
            locked(template)(target)
    with pytest.raises(ValueError, match="starting with '_'"):
        method_decorator(locked(template), name="dispatch")  # before any request


def test_fields_read_attributes_and_indexes(make: Make) -> None:
    template = "pick:{data[items][1]}:{data[key.with.dots]}:{point.real!r:>5}"
    pick = make(lambda data, point: "ran", template)
    held = _hold("pick:b:x:  2.0")
    with pytest.raises(LockBusy):
        pick({"items": ["a", "b"], "key.with.dots": "x"}, 2 + 1j)
    held.release()


@pytest.mark.parametrize(
    "options",
    [{"timeout": 0}, {"blocking_timeout": -1}, {"on_busy": "x"}, {"label": 1}, {"auto_renew": 1}],
)
def test_bad_options_fail_at_decoration(options: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        locked("x", **options)


def test_label_longer_than_the_maximum_fails_at_decoration() -> None:
    locked("x", label="x" * MAX_LABEL_LENGTH)(lambda: None)
    with pytest.raises(ValueError, match="at most 256"):
        locked("x", label="x" * (MAX_LABEL_LENGTH + 1))(lambda: None)


def test_a_task_label_is_shortened_to_the_maximum() -> None:
    celery = pytest.importorskip("celery", reason="Celery is not installed (requirements/test.txt)")
    # An app of its own: configuring testproject's would keep the worker of test_celery.py
    # (run later in the same session) from receiving its tasks.
    app = celery.Celery("test_decorators", set_as_current=False)

    @locked("long-label-task", label="t" * MAX_LABEL_LENGTH)
    def long_label() -> str | None:
        info = get_lock_manager().get("long-label-task")
        return None if info is None else info.label

    long_label_task = app.task(long_label)  # Celery's decorator, which carries no types

    label = long_label_task.apply().get(timeout=10)
    assert label == "t" * (MAX_LABEL_LENGTH - 1) + "\u2026"


def test_decorating_a_class_that_is_not_a_view_fails() -> None:
    with pytest.raises(TypeError, match="class-based views"):
        locked("x")(int)


# -- real HTTP -------------------------------------------------------------------------------


def _get(url: str) -> tuple[int, str | None]:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status, None
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


def test_concurrent_requests_one_runs_the_others_get_423(live_server: Any) -> None:
    url = f"{live_server.url}/gated/race/"
    start = threading.Barrier(6)
    results: list[tuple[int, str | None]] = []

    def request() -> None:
        start.wait(10)
        results.append(_get(url))

    threads = [threading.Thread(target=request) for _ in range(6)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(results) == 5, timeout=15)  # everyone but the runner
        assert all(status == 423 and retry for status, retry in results)
    finally:
        views.gate("race").set()
        for thread in threads:
            thread.join(15)
    assert sorted(status for status, _ in results) == [200] + [423] * 5
    assert views.RUNS["race"] == 1
