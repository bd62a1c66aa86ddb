"""@locked on views (sync, async, class-based), plain functions, and real HTTP requests."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.test import AsyncClient, Client, override_settings
from django.test.client import AsyncRequestFactory
from django.utils.decorators import method_decorator
from django.views import View

from django_redis_lock import LockBusy, LockUnavailable, get_lock_manager, lock, locked, signals
from django_redis_lock.validation import MAX_LABEL_LENGTH, MAX_NAME_LENGTH
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests import views
from tests.helpers import wait_until

pytestmark = pytest.mark.urls("tests.urls")


def _hold(name: str) -> Any:
    held = lock(name, timeout=12, auto_renew=False)
    assert held.acquire(blocking=False)
    return held


def test_view_runs_under_its_lock_and_records_who_holds_it(client: Client) -> None:
    response = client.get("/pay/42/")
    assert response.status_code == 200
    assert response.json() == {"invoice": 42, "label": "tests.views.pay GET /pay/42/"}
    assert not lock("invoice:42").locked()


def test_busy_view_answers_423_with_retry_after(client: Client) -> None:
    held = _hold("invoice:7")
    response = client.get("/pay/7/")
    assert response.status_code == 423
    assert response["Retry-After"] in ("11", "12")  # whole seconds left of a 12 s lease
    assert response["Content-Type"].startswith("text/plain")
    assert b"busy" in response.content
    as_json = client.get("/pay/7/", headers={"Accept": "application/json"})
    assert as_json.status_code == 423
    assert as_json.json()["error"] == "locked"
    held.release()
    assert client.get("/pay/7/").status_code == 200


def test_busy_status_is_a_setting(client: Client) -> None:
    held = _hold("invoice:8")
    with override_settings(REDIS_LOCK={"BUSY_STATUS": 409}):
        assert client.get("/pay/8/").status_code == 409
    held.release()


@pytest.mark.django_db
def test_template_with_attribute_access(client: Client) -> None:
    user = User.objects.create_user("ada")
    client.force_login(user)
    response = client.get("/profile/")
    assert response.content.decode() == "tests.views.profile GET /profile/"
    held = _hold(f"user:{user.pk}")
    assert client.get("/profile/").status_code == 423
    held.release()


def test_callable_name(client: Client) -> None:
    assert client.get("/item/abc/").content == b"True"
    held = _hold("item:ABC")
    assert client.get("/item/abc/").status_code == 423
    held.release()


def test_on_busy_replaces_the_busy_response(client: Client) -> None:
    held = _hold("custom")
    response = client.get("/custom/")
    assert (response.status_code, response.content) == (409, b"come back later")
    held.release()
    assert client.get("/custom/").content == b"ran"


def test_lock_is_released_when_the_view_raises(client: Client) -> None:
    with pytest.raises(ValueError, match="view failed"):
        client.get("/boom/")
    assert not lock("boom").locked()


def test_streaming_response_keeps_the_lock_until_closed(client: Client) -> None:
    response = client.get("/stream/")
    assert lock("stream").locked()
    body = b"".join(response.streaming_content)  # type: ignore[attr-defined]
    assert body == b"0:True;1:True;2:True;"
    # The test client closes the response after the last chunk, as a server does.
    assert not lock("stream").locked()


@pytest.mark.parametrize(
    ("path", "name", "label"),
    [
        ("/report/3/", "report:3", "tests.views.ReportView GET /report/3/"),
        ("/klass/3/", "klass:3", "tests.views.ClassDecoratedView GET /klass/3/"),
    ],
)
def test_class_based_views(client: Client, path: str, name: str, label: str) -> None:
    response = client.get(path)
    assert response.content.decode() == label
    held = _hold(name)
    assert client.get(path).status_code == 423
    held.release()


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/apay/5/", "ainvoice:5"),
        ("/areport/5/", "areport:5"),
        ("/aklass/5/", "aklass:5"),
        ("/astacked/5/", "astacked:5"),
        ("/asubclass/5/", "klass:5"),
    ],
)
def test_async_views(path: str, name: str) -> None:
    async def main() -> tuple[int, bytes, int, int]:
        client = AsyncClient()
        free = await client.get(path)
        held = lock(name, timeout=5, auto_renew=False)
        await held.aacquire()
        busy = await client.get(path)
        await held.arelease()
        assert busy["Retry-After"] in ("4", "5")
        again = (await client.get(path)).status_code
        return free.status_code, free.content, busy.status_code, again

    assert asyncio.run(main()) == (200, b"True", 423, 200)  # the body ran under the lock
    assert not lock(name).locked()


def test_method_decorator_with_a_list_of_decorators(client: Client) -> None:
    assert client.get("/stacked/4/").content == b"True"
    assert client.post("/stacked/4/").status_code == 405  # require_GET still applies
    held = _hold("stacked:4")
    assert client.get("/stacked/4/").status_code == 423
    held.release()


def test_streaming_response_dropped_unclosed_releases_its_lock() -> None:
    from django.test import RequestFactory

    response = views.stream(RequestFactory().get("/stream/"))
    assert lock("stream").locked()
    del response  # a middleware replaced it, say: nobody closes it
    wait_until(lambda: not lock("stream").locked(), timeout=2)


class _LoopSensitive:
    @property
    def key(self) -> str:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return "off-loop"
        raise AssertionError("computed on the event loop")


@locked("computed:{obj.key}")
async def uses_attribute(obj: _LoopSensitive) -> str:
    return "ran"


def test_async_name_with_attribute_access_is_computed_off_the_event_loop() -> None:
    assert asyncio.run(uses_attribute(_LoopSensitive())) == "ran"


def test_interrupted_after_acquiring_releases() -> None:
    def interrupt(**kwargs: object) -> None:
        raise KeyboardInterrupt

    signals.lock_acquired.connect(interrupt, weak=False)
    try:
        with pytest.raises(KeyboardInterrupt):
            add(5)
    finally:
        signals.lock_acquired.disconnect(interrupt)
    assert not lock("add:5").locked()


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


def test_async_view_releases_when_the_client_goes_away() -> None:
    async def main() -> None:
        request = AsyncRequestFactory().get("/agated/x/")
        task = asyncio.create_task(views.agated(request, name="x"))
        for _ in range(200):  # until the view holds its lock (bounded)
            if await lock("agated:x").alocked():
                break
            await asyncio.sleep(0.005)
        assert await lock("agated:x").alocked()
        task.cancel()  # what Django does when the ASGI client disconnects
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not await lock("agated:x").alocked()

    asyncio.run(main())


def test_view_answers_503_when_redis_is_down(
    client: Client, redis_factory: RedisServerGroup
) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        response = client.get("/pay/1/", headers={"Accept": "application/json"})
        assert response.status_code == 503
        assert response.json()["error"] == "unavailable"
        with override_settings(REDIS_LOCK={"RUN_UNLOCKED_IF_UNAVAILABLE": True}):
            assert client.get("/custom/").content == b"ran"


@pytest.fixture
def acquired() -> Iterator[list[str]]:
    """The names of the locks acquired during the test, in order."""
    names: list[str] = []

    def record(sender: object, name: str, **kwargs: object) -> None:
        names.append(name)

    signals.lock_acquired.connect(record, weak=False)
    yield names
    signals.lock_acquired.disconnect(record)


@pytest.mark.parametrize("view", ["doc", "adoc", "cdoc", "acdoc"])
@pytest.mark.parametrize(
    ("slug", "status"),
    [("x" * MAX_NAME_LENGTH, 200), ("x" * (MAX_NAME_LENGTH + 1), 400), ("", 400)],
)
def test_url_kwargs_that_make_an_invalid_name_answer_400(
    view: str, slug: str, status: int, acquired: list[str]
) -> None:
    """These views are locked by "{slug}": a name as long as allowed, one too long, empty."""
    path = f"/{view}/{slug}/"

    async def get(**headers: str) -> Any:
        if view.startswith("a"):
            return await AsyncClient().get(path, headers=headers)
        return Client().get(path, headers=headers)

    plain = asyncio.run(get())
    as_json = asyncio.run(get(Accept="application/json"))
    assert (plain.status_code, as_json.status_code) == (status, status)
    if status == 200:
        assert plain.content == b"ran"
        assert acquired == [slug, slug]
        return
    assert plain["Content-Type"].startswith("text/plain")
    assert b"invalid lock name" in plain.content
    assert as_json.json()["error"] == "invalid"
    assert acquired == []  # the lock was never taken


# -- plain functions -------------------------------------------------------------------------


@locked("add:{x}")
def add(x: int, y: int = 1) -> int:
    assert get_lock_manager().get(f"add:{x}") is not None
    return x + y


@locked("aadd:{x}", on_busy=lambda x, y=1: -1)
async def aadd(x: int, y: int = 1) -> int:
    return x + y


@pytest.mark.parametrize("argument", ["x" * MAX_NAME_LENGTH, "\ud800"])
def test_arguments_that_make_an_invalid_name_raise_value_error(
    argument: str, acquired: list[str]
) -> None:
    with pytest.raises(ValueError, match="lock name"):
        add(argument)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lock name"):
        asyncio.run(aadd(argument))  # type: ignore[arg-type]
    assert acquired == []


def test_plain_function_runs_locked_or_raises_lock_busy() -> None:
    assert add(2, y=3) == 5
    held = _hold("add:2")
    with pytest.raises(LockBusy):
        add(2)
    assert add(3) == 4  # another name, another lock
    held.release()
    assert get_lock_manager().get("add:2") is None


def test_async_function_with_on_busy() -> None:
    assert asyncio.run(aadd(1)) == 2
    held = _hold("aadd:1")
    assert asyncio.run(aadd(1)) == -1
    held.release()


def test_function_waits_up_to_blocking_timeout() -> None:
    @locked("patient", blocking_timeout=5)
    def patient() -> str:
        return "ran"

    held = _hold("patient")
    busy = threading.Event()
    results: list[str] = []

    def on_busy(**kwargs: object) -> None:
        busy.set()

    signals.lock_busy.connect(on_busy, weak=False)
    try:
        thread = threading.Thread(target=lambda: results.append(patient()))
        thread.start()
        assert busy.wait(5)  # it found the lock held and waits
    finally:
        signals.lock_busy.disconnect(on_busy)
    held.release()
    thread.join(5)
    assert results == ["ran"]


def test_function_raises_lock_unavailable_when_redis_is_down(
    redis_factory: RedisServerGroup,
) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        with pytest.raises(LockUnavailable):
            add(1)


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
def test_template_values_are_escaped_as_the_readme_says(user: str, fmt: str, name: str) -> None:
    held = _hold(name)
    with pytest.raises(LockBusy):
        export(user, fmt)
    held.release()


def test_one_field_and_callable_names_are_not_escaped() -> None:
    @locked("file:{path}")
    def read(path: str) -> None: ...

    @locked(lambda path: f"call:{path}")
    def call(path: str) -> None: ...

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
        def get(self, request: HttpRequest) -> HttpResponse: ...

    for target in (view, Page):
        with pytest.raises(ValueError, match="starting with '_'"):
            locked(template)(target)
    with pytest.raises(ValueError, match="starting with '_'"):
        method_decorator(locked(template), name="dispatch")  # before any request


def test_fields_read_attributes_and_indexes() -> None:
    @locked("pick:{data[items][1]}:{data[key.with.dots]}:{point.real!r:>5}")
    def pick(data: dict[str, Any], point: complex) -> str:
        return "ran"

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


def test_a_long_request_path_shortens_the_default_label(client: Client) -> None:
    path = "/labelled/" + "y" * 3000
    response = client.get(path)
    assert response.status_code == 200
    assert response.content.decode() == f"tests.views.labelled GET {path}"[:255] + "\u2026"


def test_a_task_label_is_shortened_to_the_maximum() -> None:
    pytest.importorskip("celery", reason="Celery is not installed (pip install .[test])")
    from testproject.celery import app

    @app.task
    @locked("long-label-task", label="t" * MAX_LABEL_LENGTH)
    def long_label_task() -> str | None:
        info = get_lock_manager().get("long-label-task")
        return None if info is None else info.label

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
