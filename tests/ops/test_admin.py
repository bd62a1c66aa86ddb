"""The admin page of held locks, through the test client, for each permission case."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from typing import Any

import django
import pytest
import redis
from django.conf import settings
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from django_redis_lock import get_lock_manager, lock
from django_redis_lock import models as placeholder
from django_redis_lock.admin.values import LIST_TEXT_LIMIT, form_value
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests.helpers import commandstats, forge, hold, keys, staff_client, wait_until

CHANGELIST = "/admin/django_redis_lock/lock/"
pytestmark = pytest.mark.django_db


def test_anonymous_users_go_to_the_login_page(client: Client) -> None:
    response = client.get(CHANGELIST)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_staff_without_permission_get_403() -> None:
    client = staff_client()
    assert client.get(CHANGELIST).status_code == 403
    assert client.get(CHANGELIST + "x/").status_code == 403
    assert client.post(CHANGELIST, {"action": "release_selected"}).status_code == 403


def test_the_placeholder_model_is_not_called_lock_and_keeps_codenames_and_urls() -> None:
    assert not hasattr(placeholder, "Lock")  # the core class alone is called Lock
    content_type = ContentType.objects.get_for_model(placeholder.HeldLock)
    assert (content_type.app_label, content_type.model) == ("django_redis_lock", "lock")
    codenames = Permission.objects.filter(content_type=content_type).values_list("codename")
    assert sorted(codename for (codename,) in codenames) == ["delete_lock", "view_lock"]
    # Grants and fixtures name a permission by its natural key, content type included.
    Permission.objects.get_by_natural_key("view_lock", "django_redis_lock", "lock")
    assert reverse("admin:django_redis_lock_lock_changelist") == CHANGELIST
    assert reverse("admin:django_redis_lock_lock_change", args=["x"]) == CHANGELIST + "x/"
    # A database migrated before the rename needs no migration: the model state is the same.
    call_command("makemigrations", "django_redis_lock", check=True, dry_run=True, verbosity=0)


@pytest.mark.skipif(django.VERSION < (5, 2), reason="Django's shell imports models from 5.2 on")
def test_the_shell_imports_the_placeholder_model_by_its_class_name() -> None:
    """Django 5.2's shell imports every model as ``<module>.<__name__>``: the placeholder's
    must exist (it said "1 object could not be automatically imported" at every start)."""
    shell = subprocess.run(
        [sys.executable, "manage.py", "shell", "-v", "2", "-c", "print(HeldLock._meta.label)"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "could not be automatically imported" not in shell.stdout + shell.stderr
    assert "from django_redis_lock.models import HeldLock" in shell.stdout
    assert shell.stdout.rstrip().endswith("django_redis_lock.Lock")


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
    for cursor in ("abc", "-1", str(2**64), "1" * 5000, "\u0663", " 1"):
        response = admin_client.get(CHANGELIST, {"cursor": cursor})
        assert response.status_code == 400
        page = response.content.decode()
        assert "This page link is not valid" in page
        assert "int()" not in page
        assert "SCAN" not in page
    assert admin_client.get(CHANGELIST + quote("not held") + "/").status_code == 404
    bad_selection = {"action": "release_selected", "_selected_action": ["x:y"]}
    response = admin_client.post(CHANGELIST, bad_selection, follow=True)
    assert "Not a lock selection" in response.content.decode()


def test_search_escapes_fragments_and_finds_exact_names(admin_client: Client) -> None:
    hold("job1", "job[1]", "50%*off", "other")
    page = admin_client.get(CHANGELIST, {"q": "50%*"}).content.decode()  # a glob: whole names
    assert "50%*off" in page
    page = admin_client.get(CHANGELIST, {"q": "job[1]"}).content.decode()
    assert "job[1]" in page  # the exact name, pasted, though it reads as a glob
    page = admin_client.get(CHANGELIST, {"q": "]"}).content.decode()  # a fragment, escaped
    assert "job[1]" in page
    assert "job1<" not in page


def test_a_lock_that_lost_its_expiry_is_shown_and_releasable(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    hold("forever")
    redis_client.persist(keys("forever").lock)
    assert "no expiry" in admin_client.get(CHANGELIST).content.decode()
    info = get_lock_manager().get("forever")
    assert info is not None
    assert info.ttl == float("inf")
    assert get_lock_manager().release("forever")


def test_keys_that_are_not_locks_do_not_break_the_page(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    hold("fine")
    broken = keys("fine").lock.replace(":l:fine", ":l:broken")
    redis_client.set(broken, "not a hash")
    damaged = keys("fine").lock.replace(":l:fine", ":l:damaged")
    redis_client.hset(damaged, mapping={"s": "x", "t": "not-a-number", "a": "1"})
    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    assert [row["info"].name for row in response.context["locks"]] == ["fine"]


def test_pages_follow_the_scan_cursor(admin_client: Client, redis_client: redis.Redis) -> None:
    hold(*(f"bulk:{i:04}" for i in range(2500)), label="import")
    seen: list[str] = []
    url = CHANGELIST
    pages = 0
    redis_client.config_resetstat()
    for _ in range(100):  # bounded: 2,500 locks at about 100 a page
        response = admin_client.get(url)
        context: Any = response.context
        pages += 1
        assert len(context["locks"]) <= 100 + 500  # a page, never the whole keyspace
        seen.extend(row["info"].name for row in context["locks"])
        next_url = context["next_url"]
        if not next_url:
            break
        url = CHANGELIST + next_url
    assert len(set(seen)) == 2500
    assert pages > 2
    assert "keys" not in commandstats(redis_client)  # SCAN, never KEYS


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
    client = staff_client("view_lock")
    page = client.get(CHANGELIST).content.decode()
    assert "report:1" in page
    assert "release_selected" not in page
    response = client.post(
        CHANGELIST, {"action": "release_selected", "_selected_action": ["report:1"], "post": "yes"}
    )
    assert response.status_code == 403
    assert get_lock_manager().get("report:1") is not None


def _confirmed(response: Any) -> list[str]:
    """The selection a confirmation page posts on "Yes, I'm sure"."""
    return re.findall(r'name="_selected_action" value="([^"]+)"', response.content.decode())


def test_release_action_confirms_releases_and_logs() -> None:
    [held, _] = hold("report:1", "report:2", label="import")
    client = staff_client("view_lock", "delete_lock")
    listed = client.get(CHANGELIST).content.decode()
    assert f'value="{form_value("report:1")}"' in listed
    selection = {"action": "release_selected", "_selected_action": [form_value("report:1")]}
    confirm = client.post(CHANGELIST, selection)
    assert confirm.status_code == 200
    page = confirm.content.decode()
    assert "Are you sure" in page
    assert "A client waiting for a lock takes it over at once." in page
    assert "report:1" in page
    assert held.owned()  # nothing released before the confirmation
    confirmed = {"action": "release_selected", "_selected_action": _confirmed(confirm)}
    done = client.post(CHANGELIST, {**confirmed, "post": "yes"}, follow=True)
    assert "Released 1 lock; no client was waiting for it." in done.content.decode()
    assert not held.owned()
    assert get_lock_manager().get("report:2") is not None
    entry = LogEntry.objects.get()
    assert entry.action_flag == DELETION
    info_owner = f"pid {os.getpid()}"
    assert entry.object_repr.startswith("Released report:1 held by ")
    assert info_owner in entry.object_repr
    assert held.name in entry.change_message
    assert info_owner in entry.change_message
    assert "label: import" in entry.change_message
    assert str(held.fencing_token) in entry.change_message


def test_release_spares_a_lock_taken_over_since_the_confirmation() -> None:
    [first] = hold("handover")
    client = staff_client("view_lock", "delete_lock")
    selection = {"action": "release_selected", "_selected_action": [form_value("handover")]}
    confirm = client.post(CHANGELIST, selection)
    first.release()
    [second] = hold("handover")  # a healthy holder took it meanwhile
    confirmed = {"action": "release_selected", "_selected_action": _confirmed(confirm)}
    done = client.post(CHANGELIST, {**confirmed, "post": "yes"}, follow=True)
    assert "Released 0 locks." in done.content.decode()
    assert second.owned()
    assert not LogEntry.objects.exists()


def test_names_that_forms_and_urls_would_mangle_are_released() -> None:
    names = ["line\nbreak", "carriage\rreturn", "nul\x00byte", "..", ".", "a/b", "50%_off"]
    held = hold(*names)
    client = staff_client("view_lock", "delete_lock")
    listed = client.get(CHANGELIST)
    urls = re.findall(r'<a href="(/admin/django_redis_lock/lock/[^"]+/)">', listed.content.decode())
    assert len(urls) == len(names)
    for url in urls:
        assert client.get(url).status_code == 200  # "." and ".." are not path steps
    selection = {"action": "release_selected", "_selected_action": [form_value(n) for n in names]}
    confirm = client.post(CHANGELIST, selection)
    confirmed = {"action": "release_selected", "_selected_action": _confirmed(confirm)}
    done = client.post(CHANGELIST, {**confirmed, "post": "yes"}, follow=True)
    assert f"Released {len(names)} locks; no client" in done.content.decode()
    assert not any(each.owned() for each in held)


def test_release_requires_post_with_csrf() -> None:
    hold("report:1", label="import")
    client = staff_client("view_lock", "delete_lock")
    client.handler.enforce_csrf_checks = True
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
    wait_until(lambda: redis_client.zcard(keys("queue").queue) == 1)  # it waits in the queue
    selection = [form_value("queue", held.fencing_token)]
    done = admin_client.post(
        CHANGELIST,
        {"action": "release_selected", "_selected_action": selection, "post": "yes"},
        follow=True,
    )
    waiter.join(5)
    assert results == [True]
    assert "Released 1 lock; 1 taken over at once by a waiting client." in done.content.decode()
    assert "a waiting client took it over at once" in LogEntry.objects.get().change_message


def test_redis_down_shows_an_error(admin_client: Client, redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        response = admin_client.get(CHANGELIST)
        assert response.status_code == 503
        assert "Error" in response.content.decode() or "refused" in response.content.decode()


def test_hostile_data_never_breaks_the_pages(redis_client: redis.Redis) -> None:
    hold("fine")
    forge(redis_client, "huge-time", a="1" * 30)
    forge(redis_client, "negative", t="-5")
    client = staff_client("view_lock", "delete_lock")
    response = client.get(CHANGELIST)
    assert response.status_code == 200
    assert [row["info"].name for row in response.context["locks"]] == ["fine", "negative"]
    detail = client.get(CHANGELIST + "huge-time/")
    assert detail.status_code == 404
    assert "is held, but its data is not readable" in detail.content.decode()
    assert client.get(CHANGELIST + "gone/").status_code == 404
    selection = {"action": "release_selected", "_selected_action": ["huge-time", "negative"]}
    confirm = client.post(CHANGELIST, selection)
    assert confirm.status_code == 200
    assert "is held, but its data is not readable" in confirm.content.decode()
    assert _confirmed(confirm) == [form_value("negative", -5)]  # only the one listed
    confirmed = {"action": "release_selected", "_selected_action": _confirmed(confirm)}
    done = client.post(CHANGELIST, {**confirmed, "post": "yes"}, follow=True)
    assert "Released 1 lock;" in done.content.decode()
    assert not lock("negative").locked()
    assert lock("huge-time").locked()


def test_text_from_redis_is_shown_escaped(redis_client: redis.Redis) -> None:
    name = "invoice\u202egpj.exe"
    forge(redis_client, name, o="host\u200b pid 1\x9b", l="literal \\x1b and real \x1b[31m")
    client = staff_client("view_lock", "delete_lock")
    selection = {"action": "release_selected", "_selected_action": [form_value(name)]}
    pages = [
        client.get(CHANGELIST).content.decode(),
        client.get(CHANGELIST + quote(name) + "/").content.decode(),
        client.post(CHANGELIST, selection).content.decode(),
    ]
    for page in pages:
        assert "invoice\\u202egpj.exe" in page
        assert "host\\u200b pid 1\\x9b" in page
        assert not {"\u202e", "\u200b", "\x9b", "\x1b"} & set(page)
    assert "literal \\\\x1b and real \\x1b[31m" in pages[0]
    confirm = client.post(CHANGELIST, selection)
    confirmed = {"action": "release_selected", "_selected_action": _confirmed(confirm)}
    client.post(CHANGELIST, {**confirmed, "post": "yes"})
    entry = LogEntry.objects.get()
    assert entry.object_repr == "Released invoice\\u202egpj.exe held by host\\u200b pid 1\\x9b"
    assert "\u202e" not in entry.change_message
    bad = {"action": "release_selected", "_selected_action": ["\u202e:x"]}
    response = client.post(CHANGELIST, bad, follow=True)
    assert "Not a lock selection: &#x27;\\u202e:x&#x27;" in response.content.decode()


def test_long_texts_are_cut_in_the_list_and_whole_on_the_detail_page(
    admin_client: Client, redis_client: redis.Redis
) -> None:
    label, owner, name = "L" * 10_000, "O" * 10_000, "n" * 1024
    forge(redis_client, name, l=label, o=owner)
    row = admin_client.get(CHANGELIST).context["locks"][0]
    assert (row["name"], row["owner"], row["label"]) == (
        "n" * (LIST_TEXT_LIMIT - 1) + "…",
        "O" * (LIST_TEXT_LIMIT - 1) + "…",
        "L" * (LIST_TEXT_LIMIT - 1) + "…",
    )
    page = admin_client.get(CHANGELIST + name + "/").content.decode()
    assert label in page
    assert owner in page
    assert name in page
    assert f"<h1>{'n' * (LIST_TEXT_LIMIT - 1)}…</h1>" in page  # the heading is cut
    selection = [form_value(name, 1)]
    admin_client.post(
        CHANGELIST, {"action": "release_selected", "_selected_action": selection, "post": "yes"}
    )
    assert LogEntry.objects.get().object_repr == f"Released {name}"[:199] + "…"


def test_changelist_has_a_select_all_box(admin_client: Client) -> None:
    hold("report:1")
    assert 'id="action-toggle"' in admin_client.get(CHANGELIST).content.decode()
