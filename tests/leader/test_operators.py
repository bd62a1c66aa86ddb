"""What operators see of a leadership: ``manage.py locks`` and the admin show it as such (its
epoch, since when, its holder), and a release deposes the leader."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from django_redis_lock import get_lock_manager, leader, lock

CHANGELIST = "/admin/django_redis_lock/lock/"


@pytest.fixture(autouse=True)
def _default_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables take COLUMNS (pytest-xdist sets 80 in its workers): the default width here."""
    monkeypatch.delenv("COLUMNS", raising=False)


def _command(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue()


def test_the_command_shows_a_leadership_with_its_epoch() -> None:
    with leader("beat", label="celery beat") as lead:
        assert "leader:beat [leader]" in _command("list")
        shown = json.loads(_command("show", "leader:beat", "--json"))
        assert shown["leader"] is True
        assert shown["epoch"] == lead.epoch == shown["fencing_token"]
        assert shown["label"] == "celery beat"
        assert "pid" in shown["owner"]
        assert shown["acquired_at"]
        listed = json.loads(_command("list", "--json"))
        assert [each["name"] for each in listed if each.get("leader")] == ["leader:beat"]
        info = get_lock_manager().get("leader:beat")
        assert info is not None
        assert info.leadership
        assert info.held_as == "leader"


def test_the_admin_lists_a_leadership_and_a_release_deposes_the_leader(
    admin_client: Client,
) -> None:
    lead = leader("scheduler", timeout=0.6)
    assert lead.acquire()
    page = admin_client.get(CHANGELIST).content.decode()
    assert "leader:scheduler [leader]" in page
    assert str(lead.epoch) in page
    assert "Released" in _command("release", "leader:scheduler")
    assert lead.lost.wait(5)  # deposed: found at the next renewal
    assert not lead.is_leader


def test_only_a_leaderships_lock_reads_as_one() -> None:
    with leader("x"):
        info = get_lock_manager().get("leader:x")
        assert info is not None
        assert info.leadership
    with lock("leaders-list"):
        plain = get_lock_manager().get("leaders-list")
        assert plain is not None
        assert not plain.leadership
        assert plain.held_as == ""
