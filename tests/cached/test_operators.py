"""The stampedes cache_once avoided, as operators see them: ``manage.py locks stats`` (and its
JSON) and the admin's statistics page, only where a name counts any."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import call_command

from django_redis_lock import lock
from tests.cached.scenarios import stampede
from tests.helpers import staff_client


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue()


def test_locks_stats_shows_the_avoided_column_only_where_there_are_any() -> None:
    held = lock("plain")
    assert held.acquire(blocking=False)
    held.release()
    assert "AVOIDED" not in _command("stats")
    assert stampede("shared", 3) == ["v"] * 4
    heading, first, *_ = _command("stats", "--sort", "avoided").splitlines()
    assert heading.split()[-1] == "AVOIDED"
    assert first.startswith("cache_")  # the name may be shortened to fit
    assert first.split()[-1] == "3"
    as_json = json.loads(_command("stats", "--json", "--pattern", "cache_once:*"))
    assert [(entry["name"], entry["avoided"]) for entry in as_json] == [("cache_once:shared", 3)]


@pytest.mark.django_db
def test_the_admin_statistics_page_shows_the_stampedes_avoided() -> None:
    viewer = staff_client("view_lock")
    page = viewer.get("/admin/django_redis_lock/lock/stats/").content.decode()
    assert "Stampedes avoided" not in page
    assert stampede("page", 2) == ["v"] * 3
    page = viewer.get("/admin/django_redis_lock/lock/stats/?sort=avoided").content.decode()
    assert re.search(r'data-label="Stampedes avoided"[^>]*>2<', page)
