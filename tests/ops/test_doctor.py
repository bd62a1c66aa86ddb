"""``manage.py locks doctor`` as operators read it: one report of each finding, lines wrapped
to the terminal, settings it cannot use reported whether it runs from a shell or from code."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test.utils import override_settings

from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches

EVICTING = ("--maxmemory", "4mb", "--maxmemory-policy", "allkeys-lru")
ROOT = Path(__file__).resolve().parents[2]


def _doctor(*args: str) -> tuple[str, str]:
    """The text the doctor prints, and the CommandError it raises ("" when none)."""
    out = io.StringIO()
    try:
        call_command("locks", "doctor", *args, stdout=out, no_color=True)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), ""


def test_lines_end_in_one_period_and_wrap_to_the_width(
    redis_factory: RedisServerGroup, monkeypatch: pytest.MonkeyPatch
) -> None:
    evicting = redis_factory(extra_args=EVICTING)
    monkeypatch.setenv("COLUMNS", "100")
    with override_settings(CACHES=build_caches(evicting.url)):
        text, error = _doctor()
    assert error == "The doctor found 1 error."
    lines = text.splitlines()
    assert ".." not in text
    assert max(len(line) for line in lines) <= 100
    # The eviction finding: its first line names it, the rest are indented under its text.
    first = next(i for i, line in enumerate(lines) if line.startswith("error    eviction"))
    indent = lines[first].index("127.0.0.1")
    follow = lines[first + 1]
    assert follow.startswith(" " * indent)
    assert not follow[indent].isspace()
    assert " ".join(text.split()).count("may evict keys") == 1


@pytest.mark.parametrize(("columns", "width"), [("", 80), ("300", 120), ("20", 60)])
def test_the_width_is_the_terminals_within_bounds(
    redis_factory: RedisServerGroup, monkeypatch: pytest.MonkeyPatch, columns: str, width: int
) -> None:
    evicting = redis_factory(extra_args=EVICTING)
    if columns:
        monkeypatch.setenv("COLUMNS", columns)
    with override_settings(CACHES=build_caches(evicting.url)):
        text, _ = _doctor()
    longest = max(len(line) for line in text.splitlines())
    assert width - 20 < longest <= width


def test_from_a_shell_each_finding_is_reported_once(redis_factory: RedisServerGroup) -> None:
    """Django's own run of the system checks would print W010, and the doctor its item."""
    evicting = redis_factory(extra_args=EVICTING)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "REDIS_URL": evicting.url,
        "COLUMNS": "120",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "locks", "doctor"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    both = " ".join((done.stdout + done.stderr).split())  # lines wrap: one space each
    assert both.count("may evict keys") == 1, both
    assert "W010" not in both


@pytest.mark.parametrize(
    ("setting", "check_id"),
    [({"TIMEOUT": -1}, "E005"), ({"KEY_NAMESPACE": "{locks}"}, "E007")],
)
def test_settings_it_cannot_use_are_reported_from_code(
    setting: dict[str, object], check_id: str
) -> None:
    with override_settings(REDIS_LOCK=setting):
        text, error = _doctor()
        out = io.StringIO()
        with pytest.raises(CommandError, match="The doctor found"):
            call_command("locks", "doctor", "--json", stdout=out)
    assert error.startswith("The doctor found")
    assert f"django_redis_lock.{check_id}" in text
    findings = json.loads(out.getvalue())
    (settings,) = [f for f in findings if f["check"] == "settings"]
    assert settings["level"] == "error"
    assert settings["subject"] == f"django_redis_lock.{check_id}"


def test_a_cache_it_cannot_build_is_reported_not_raised() -> None:
    with override_settings(REDIS_LOCK={"CACHE": "nope"}):
        text, error = _doctor()
    assert error == "The doctor found 2 errors."
    assert "django_redis_lock.E002: REDIS_LOCK['CACHE'] is 'nope'" in text
    assert "reachable  REDIS_LOCK['CACHE']: The cache alias 'nope'" in text


@pytest.mark.parametrize(
    ("setting", "lacking", "said"),
    [
        (
            "auto",
            [],
            "sharded pub/sub (SSUBSCRIBE on the node of each lock's slot): every "
            "primary has SPUBLISH",
        ),
        (
            "classic",
            [],
            "classic PUBLISH (the cluster bus carries each grant to every node): "
            "REDIS_LOCK['CLUSTER_WAKE_UPS'] is \"classic\"",
        ),
        (
            "auto",
            ["10.0.0.3:6379", "10.0.0.1:6379"],
            "classic PUBLISH (the cluster bus carries "
            "each grant to every node): no SPUBLISH on 10.0.0.1:6379, 10.0.0.3:6379 (Redis "
            "before 7)",
        ),
    ],
)
def test_how_a_cluster_wakes_its_waiters_is_said_with_why(
    setting: str, lacking: list[str], said: str
) -> None:
    """A primary without SPUBLISH cannot be had beside Redis 7 in one test cluster: the
    wording of each case, from the rule the doctor reports."""
    from django_redis_lock.ops.rules import wake_ups

    verdict = wake_ups(setting, lacking)
    assert (verdict.level, verdict.message, verdict.fix) == ("ok", said, "")
