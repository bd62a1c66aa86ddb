"""The admin page of held locks, through the test client, for each permission case."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings

from django_redis_lock import get_lock_manager, lock
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests.helpers import hold, wait_until

CHANGELIST = "/admin/django_redis_lock/lock/"
pytestmark = pytest.mark.django_db


def _staff(*codenames: str) -> Client:
    user = User.objects.create_user("operator", password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_redis_lock", codename__in=codenames
        )
    )
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_users_go_to_the_login_page(client: Client) -> None:
    response = client.get(CHANGELIST)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_staff_without_permission_get_403() -> None:
    client = _staff()
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(CHANGELIST + "x/").status_code == 403
    assert client.post(CHANGELIST, {"action": "release_selected"}).status_code == 403


def test_the_page_is_listed_on_the_admin_index(admin_client: Client) -> None:
    response = admin_client.get("/admin/")
    assert CHANGELIST.encode() in response.content


def test_changelist_shows_held_locks(admin_client: Client) -> None:
    held = hold("report:1", "report:2", label="import")
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    page = response.content.decode()
    for each in held:
        assert each.name in page
        assert str(each.fencing_token) in page
    assert "import" in page
    assert "pid" in page
    assert "59." in page or "60.0" in page  # the TTL


def test_search_by_name_or_glob(admin_client: Client) -> None:
    hold("report:1", "report:2", "import:7", label="import")
    page = admin_client.get(CHANGELIST, {"q": "report"}).content.decode()
    assert "report:1" in page
    assert "import:7" not in page
    page = admin_client.get(CHANGELIST, {"q": "*:7"}).content.decode()
    assert "import:7" in page
    assert "report:1" not in page


def test_bad_input_is_a_4xx(admin_client: Client) -> None:
    assert admin_client.get(CHANGELIST, {"q": "[ab"}).status_code == 400
    assert admin_client.get(CHANGELIST, {"cursor": "abc"}).status_code == 400
    assert admin_client.get(CHANGELIST, {"cursor": "-1"}).status_code == 400
    assert admin_client.get(CHANGELIST + quote("not held") + "/").status_code == 404


def test_pages_follow_the_scan_cursor(admin_client: Client) -> None:
    hold(*(f"bulk:{i:03}" for i in range(250)), label="import")
    seen: set[str] = set()
    url: str | None = CHANGELIST
    for _ in range(20):  # bounded: 250 locks at about 100 a page
        response = admin_client.get(url)
        context: Any = response.context
        seen.update(row["info"].name for row in context["locks"])
        next_url = context["next_url"]
        if not next_url:
            break
        url = CHANGELIST + next_url
    assert len(seen) == 250


def test_detail_view(admin_client: Client) -> None:
    [held] = hold("odd/name*?", label="import")
    response = admin_client.get(CHANGELIST + quote("odd/name*?") + "/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "odd/name*?" in page
    assert str(held.fencing_token) in page
    assert "Release this lock" in page


def test_view_permission_alone_sees_but_cannot_release() -> None:
    hold("report:1", label="import")
    client = _staff("view_lock")
    page = client.get(CHANGELIST).content.decode()
    assert "report:1" in page
    assert "release_selected" not in page
    response = client.post(
        CHANGELIST, {"action": "release_selected", "_selected_action": ["report:1"], "post": "yes"}
    )
    assert response.status_code == 403
    assert get_lock_manager().get("report:1") is not None


def test_release_action_confirms_releases_and_logs() -> None:
    [held, _] = hold("report:1", "report:2", label="import")
    client = _staff("view_lock", "delete_lock")
    selection = {"action": "release_selected", "_selected_action": ["report:1"]}
    confirm = client.post(CHANGELIST, selection)
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "Are you sure" in page
    assert "report:1" in page
    assert held.owned()  # nothing released before the confirmation
    done = client.post(CHANGELIST, {**selection, "post": "yes"}, follow=True)
    assert "Released 1 lock." in done.content.decode()
    assert not held.owned()
    assert get_lock_manager().get("report:2") is not None
    entry = LogEntry.objects.get()
    assert entry.action_flag == DELETION
    assert entry.object_repr == "report:1"
    assert held.name in entry.change_message
    assert "pid" in entry.change_message


def test_release_requires_post_with_csrf() -> None:
    hold("report:1", label="import")
    client = _staff("view_lock", "delete_lock")
    client.handler.enforce_csrf_checks = True  # type: ignore[attr-defined]
    response = client.post(
        CHANGELIST, {"action": "release_selected", "_selected_action": ["report:1"], "post": "yes"}
    )
    assert response.status_code == 403
    assert get_lock_manager().get("report:1") is not None


def test_release_wakes_a_waiter(admin_client: Client, redis_client: redis.Redis) -> None:
    [held] = hold("queue", label="import")
    results: list[bool] = []
    waiter = threading.Thread(
        target=lambda: results.append(lock("queue", blocking_timeout=10).acquire())
    )
    waiter.start()
    wait_until(lambda: redis_client.zcard(held._keys.queue) == 1)  # it waits in the queue
    admin_client.post(
        CHANGELIST, {"action": "release_selected", "_selected_action": ["queue"], "post": "yes"}
    )
    waiter.join(5)
    assert results == [True]


def test_redis_down_shows_an_error(admin_client: Client, redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        response = admin_client.get(CHANGELIST)
        assert response.status_code == 503
        assert "Error" in response.content.decode() or "refused" in response.content.decode()
