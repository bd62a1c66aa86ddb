"""The demo page of testproject: list, take, release and force-release locks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from django.test.utils import override_settings

import django_redis_lock
from testproject import views
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _forget_demo_locks() -> Iterator[None]:
    yield
    views.forget_held_locks()


def _messages(response: object) -> list[str]:
    return [str(message) for message in response.context["messages"]]  # type: ignore[attr-defined]


def test_take_list_and_release(client: Client) -> None:
    response = client.post("/acquire/", {"name": "report:{7}", "timeout": "30"}, follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert _messages(response)[0].startswith("Acquired 'report:{7}' for 30 s")
    content = response.content.decode()
    assert "report:{7}" in content
    assert "demo page" in content
    assert ">Release</button>" in content

    info = django_redis_lock.get_lock_manager().get("report:{7}")
    assert info is not None
    assert info.label == "demo page"

    response = client.post(
        "/release/", {"name": "report:{7}", "token": str(info.fencing_token)}, follow=True
    )
    assert _messages(response) == ["Released 'report:{7}'."]
    assert django_redis_lock.get_lock_manager().get("report:{7}") is None
    assert "No lock is held." in response.content.decode()


def test_a_held_lock_is_busy(client: Client) -> None:
    other = django_redis_lock.lock("import", auto_renew=False, label="someone else")
    assert other.acquire()
    response = client.post("/acquire/", {"name": "import", "timeout": "30"}, follow=True)
    (message,) = _messages(response)
    assert message.startswith("'import' is busy: held by ")
    assert "(someone else)" in message
    other.release()


def test_force_release_of_a_lock_held_elsewhere(client: Client) -> None:
    other = django_redis_lock.lock("nightly", auto_renew=False)
    assert other.acquire()
    content = client.get("/").content.decode()
    assert ">Force release</button>" in content
    response = client.post(
        "/release/", {"name": "nightly", "token": str(other.fencing_token)}, follow=True
    )
    assert _messages(response) == [
        f"Force-released 'nightly' (fencing token {other.fencing_token})."
    ]
    assert not other.owned()


def test_invalid_form(client: Client) -> None:
    response = client.post("/acquire/", {"name": "", "timeout": "-1"}, follow=True)
    assert len(_messages(response)) == 2
    assert list(django_redis_lock.get_lock_manager().list()) == []


def test_posts_need_csrf_and_post() -> None:
    client = Client(enforce_csrf_checks=True)
    assert client.post("/acquire/", {"name": "x", "timeout": "1"}).status_code == 403
    assert client.post("/slow-job/nightly/").status_code == 403
    assert client.get("/acquire/").status_code == 405
    assert client.get("/release/").status_code == 405


def test_redis_down_shows_the_error(client: Client, redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.kill()
        response = client.get("/")
        assert response.status_code == 200
        assert "Redis is unavailable" in response.content.decode()
        response = client.post("/acquire/", {"name": "x", "timeout": "5"}, follow=True)
        assert _messages(response)[0].startswith("Redis is unavailable")


@override_settings(DEMO_JOB_SECONDS=0.01)
@pytest.mark.parametrize("method", ["post", "get"])
def test_the_locked_job_runs_or_answers_423(client: Client, method: str) -> None:
    run = getattr(client, method)
    response = run("/slow-job/nightly/")
    assert response.status_code == 200
    assert "It held <code>demo:slow-job:nightly</code> for 0.01 s" in response.content.decode()
    assert django_redis_lock.get_lock_manager().get("demo:slow-job:nightly") is None

    other = django_redis_lock.lock("demo:slow-job:nightly", timeout=20, auto_renew=False)
    assert other.acquire()
    busy = run("/slow-job/nightly/")
    assert busy.status_code == 423
    assert busy["Retry-After"] in ("19", "20")
    other.release()


def test_the_demo_page_starts_the_job_with_a_post_that_opens_a_tab(client: Client) -> None:
    with override_settings(DEMO_JOB_SECONDS=2.5):  # read when the page is rendered
        content = client.get("/").content.decode()
    assert '<form class="inline" method="post" action="/slow-job/nightly/" target="_blank">' in (
        content
    )
    assert "<code>demo:slow-job:nightly</code>\n    for 2.5 s" in content


def _row_of(content: str, name: str) -> str:
    """The table row (``<tr>...</tr>``) whose name cell shows ``name``."""
    for row in content.split("<tr")[1:]:
        if f"<code>{name}</code>" in row:
            return row.split("</tr>")[0]
    raise AssertionError(f"no row for {name!r}")


def test_each_row_shows_what_is_held(client: Client) -> None:
    held = [
        django_redis_lock.lock("plain", auto_renew=False),
        django_redis_lock.semaphore("pool", 3, auto_renew=False),
        django_redis_lock.rwlock("catalogue", auto_renew=False).read(),
        django_redis_lock.rwlock("prices", auto_renew=False).write(),
        django_redis_lock.lock("unique:report:1", auto_renew=False, label="x queued as abc"),
    ]
    for each in held:
        assert each.acquire()
    content = client.get("/").content.decode()
    kinds = {
        "plain": "lock",
        "pool": "semaphore place (of 3)",
        "catalogue": "reader",
        "prices": "writer",
        "unique:report:1": "unique task key",
    }
    for name, kind in kinds.items():
        assert f'<td class="kind">{kind}</td>' in _row_of(content, name), name
    for each in held:
        each.release()


def test_force_release_of_a_semaphore_place_releases_that_holder(client: Client) -> None:
    first, second = (django_redis_lock.semaphore("pool", 2, auto_renew=False) for _ in range(2))
    assert first.acquire()
    assert second.acquire()
    assert ">Force release</button>" in client.get("/").content.decode()
    response = client.post(
        "/release/", {"name": "pool", "token": str(second.fencing_token)}, follow=True
    )
    assert _messages(response) == [f"Force-released 'pool' (fencing token {second.fencing_token})."]
    assert not second.owned()
    assert first.owned()  # the other place is left alone
    first.release()


def test_force_release_leaves_a_later_holder_alone(client: Client) -> None:
    """The button names the hold the page showed: when that hold ended and someone else took
    the lock meanwhile, the new holder keeps it."""
    earlier = django_redis_lock.lock("nightly", auto_renew=False)
    assert earlier.acquire()
    shown = earlier.fencing_token
    earlier.release()
    later = django_redis_lock.lock("nightly", auto_renew=False)
    assert later.acquire()
    response = client.post("/release/", {"name": "nightly", "token": str(shown)}, follow=True)
    assert _messages(response) == ["'nightly' was not held by that holder any more."]
    assert later.owned()
    later.release()


def test_a_release_with_a_token_that_is_no_number_is_refused(client: Client) -> None:
    response = client.post("/release/", {"name": "nightly", "token": "x"}, follow=True)
    assert _messages(response) == ["No valid fencing token given."]
