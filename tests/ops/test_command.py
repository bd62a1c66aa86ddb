"""manage.py locks: through call_command and as a real subprocess."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_redis_lock import get_lock_manager, lock
from django_redis_lock.runtime import runtime
from testproject.redis_server import RedisServerGroup
from testproject.settings import build_caches
from tests.helpers import commandstats, forge, hold, keys, wait_until

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("locks", *args, stdout=out)
    return out.getvalue()


def test_list_table() -> None:
    hold("report:1", "report:2", "import", label="nightly")
    out = _run("list", "--pattern", "report:*")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "TTL", "OWNER", "LABEL", "ACQUIRED", "TOKEN"]
    assert sorted(line.split()[0] for line in lines[1:3]) == ["report:1", "report:2"]
    assert "nightly" in lines[1]
    assert lines[-1] == "2 held locks."
    assert _run("list", "--pattern", "nothing*").strip() == "No held locks."


def test_list_json() -> None:
    [held] = hold("report:9", label="nightly")
    objects = json.loads(_run("list", "--json"))
    assert len(objects) == 1
    first = objects[0]
    assert set(first) == {"name", "fencing_token", "owner", "label", "acquired_at", "ttl"}
    assert first["name"] == "report:9"
    assert first["fencing_token"] == held.fencing_token
    assert first["label"] == "nightly"
    assert first["acquired_at"].endswith("+00:00")
    assert 59 < first["ttl"] <= 60
    assert json.loads(_run("list", "--json", "--pattern", "none*")) == []


def test_show() -> None:
    [held] = hold("job*1", label="nightly")
    out = _run("show", "job*1")
    assert "job*1" in out
    assert str(held.fencing_token) in out
    data = json.loads(_run("show", "job*1", "--json"))
    assert data["name"] == "job*1"
    with pytest.raises(CommandError, match="No lock named 'job\\?1'"):
        _run("show", "job?1")  # exact names: no glob


def test_release() -> None:
    [held] = hold("stuck", label="nightly")
    out = _run("release", "stuck")
    assert "Released 'stuck'" in out
    assert str(held.fencing_token) in out
    assert not held.owned()
    with pytest.raises(CommandError, match="No lock named 'stuck'"):
        _run("release", "stuck")


def test_clear_dry_run_yes_and_refusal() -> None:
    hold("tmp:1", "tmp:2", "keep", label="nightly")
    out = _run("clear", "--pattern", "tmp:*", "--dry-run")
    assert "2 locks would be released." in out
    assert len(list(get_lock_manager().list())) == 3
    with pytest.raises(CommandError, match="--yes"):
        _run("clear", "--pattern", "tmp:*")  # no terminal here
    assert "Released 2 locks." in _run("clear", "--pattern", "tmp:*", "--yes")
    assert [info.name for info in get_lock_manager().list()] == ["keep"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--pattern", "[ab"], "without its ']'"),
        (["list", "--pattern", ""], "must not be empty"),
        (["show", ""], "must not be empty"),
        (["--using", "nope", "list"], "not in CACHES"),
    ],
)
def test_bad_input_is_a_command_error(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _run(*args)


def test_redis_down_is_a_command_error(redis_factory: RedisServerGroup) -> None:
    server = redis_factory()
    with override_settings(CACHES=build_caches(server.url)):
        server.stop()
        for args in (["list"], ["show", "x"], ["release", "x"], ["clear", "--yes"]):
            with pytest.raises(CommandError, match="Redis is unavailable"):
                _run(*args)


def _manage(
    *args: str, stdin: str | None = None, settings: str | None = "testproject.settings"
) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_SETTINGS_MODULE"}
    if settings:
        env["DJANGO_SETTINGS_MODULE"] = settings
    return subprocess.run(
        [sys.executable, "manage.py", "locks", *args],
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_as_a_subprocess() -> None:
    hold("proc:1", "proc:2", label="nightly")
    listed = _manage("list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(item["name"] for item in json.loads(listed.stdout)) == ["proc:1", "proc:2"]
    missing = _manage("show", "nope")
    assert missing.returncode == 1
    assert "No lock named 'nope'" in missing.stderr
    refused = _manage("clear", stdin="y\n")  # stdin is not a terminal: refuses
    assert refused.returncode == 1
    assert "--yes" in refused.stderr
    cleared = _manage("clear", "--yes")
    assert cleared.returncode == 0
    assert "Released 2 locks." in cleared.stdout
    assert list(get_lock_manager().list()) == []


@pytest.mark.slow
def test_common_options_work_after_the_subcommand(tmp_path: Path) -> None:
    (tmp_path / "db1_settings.py").write_text(
        "from testproject.settings import *  # noqa: F403\nREDIS_LOCK = {'CACHE': 'locks_db1'}\n"
    )
    hold("on-default")
    hold("on-db1", using="locks_db1")
    options = ["--pythonpath", str(tmp_path), "--settings=db1_settings", "-v", "2"]
    listed = _manage("list", "--json", *options, "--skip-checks", "--no-color", settings=None)
    assert listed.returncode == 0, listed.stderr
    assert [item["name"] for item in json.loads(listed.stdout)] == ["on-db1"]
    colored = _manage("list", "--force-color")
    assert colored.returncode == 0, colored.stderr
    assert "\x1b[" in colored.stdout.splitlines()[0]  # the heading, coloured on request
    before = _manage("--verbosity", "0", "show", "nope", "--traceback")
    assert "Traceback" in before.stderr  # before and after the subcommand, together
    assert "CommandError: No lock named 'nope' is held." in before.stderr
    assert "on-db1" in _run("list", "--using", "locks_db1")
    assert "on-db1" in _run("--using", "locks_db1", "list")
    bad = _manage("list", "-v", "7")
    assert bad.returncode == 2
    assert "invalid choice: 7" in bad.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("answer", "released"), [(b"y\n", True), (b"\x04", False)])
def test_clear_asks_on_a_terminal(answer: bytes, released: bool) -> None:
    import pty

    hold("tty:1", label="nightly")
    # The command on a terminal of its own: a new process (not a fork of this one, whose
    # threads run) with a pseudo-terminal as its stdin, stdout and stderr.
    fd, terminal = pty.openpty()
    command = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "locks", "clear"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        start_new_session=True,
    )
    os.close(terminal)  # the command's copies only: reading ends when the command exits
    output = b""
    while b"[y/N]" not in output:
        chunk = os.read(fd, 1024)
        assert chunk, output
        output += chunk
    assert b"Force-release 1 lock matching '*'" in output
    os.write(fd, answer)  # yes, or Ctrl-D
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the terminal closes when the command exits
            break
        if not chunk:
            break
        output += chunk
    os.close(fd)
    status = command.wait(timeout=60)
    if released:
        assert status == 0, output
        assert b"[##############################] 1/1" in output  # the progress bar
        assert b"Released 1 lock." in output
        assert get_lock_manager().get("tty:1") is None
    else:
        assert status == 1, output
        assert b"Cancelled; nothing was released." in output
        assert get_lock_manager().get("tty:1") is not None


# Control characters (C0, DEL, C1), bidi and zero-width format characters, separators.
HIDDEN = "\x1b\x07\x7f\x9b\u202e\u2066\u200b\ufeff\u2028\u2029\U000e0001"


def test_hidden_characters_never_reach_the_terminal() -> None:
    name = "invoice\u202egpj.exe\x1b]0;title\x07"
    owner_label = "x\x1b[31mRED\nsecond \\x1b line " + HIDDEN + " café"
    [held] = hold(name, label=owner_label)
    outputs = [_run(*args) for args in (["list"], ["show", name], ["clear", "--dry-run"])]
    outputs.append(_run("list", "--json"))
    outputs.append(_run("show", name, "--json"))
    for out in outputs:
        assert not set(HIDDEN) & set(out), out
    for out in (outputs[1], outputs[3], outputs[4]):  # show, and both JSON outputs
        assert "café" in out  # plain accented text stays readable
    assert "invoice\\u20" in outputs[0]  # the table cuts it (to its width), escaped
    assert "invoice\\u202egpj.exe\\x1b]0;title\\x07" in outputs[1]
    assert "second \\\\x1b line" in outputs[1]  # a literal backslash is doubled
    [listed] = json.loads(outputs[3])
    assert (listed["name"], listed["label"]) == (name, owner_label)  # JSON keeps them exact
    assert json.loads(outputs[4])["label"] == owner_label
    released = _run("release", name)
    assert not set(HIDDEN) & set(released)
    assert not held.owned()


def test_hostile_data_never_breaks_the_command(redis_client: redis.Redis) -> None:
    hold("fine")
    forge(redis_client, "huge-time", a="1" * 30)
    forge(redis_client, "negative", t="-5", a="-5")
    forever = runtime().backend().keys_for("forever").lock
    forge(redis_client, "forever")
    redis_client.persist(forever)
    table = _run("list")
    assert sorted(line.split()[0] for line in table.splitlines()[1:-1]) == [
        "fine",
        "forever",
        "negative",
    ]
    assert len(json.loads(_run("list", "--json"))) == 3
    assert "-5" in _run("show", "negative")
    with pytest.raises(CommandError, match="'huge-time' is held, but its data is not readable"):
        _run("show", "huge-time")
    assert "3 locks would be released." in _run("clear", "--dry-run")
    assert "Released 3 locks." in _run("clear", "--yes")  # what the dry run listed
    assert lock("huge-time").locked()  # not listed, not cleared
    out = _run("release", "huge-time")
    assert out == "Released 'huge-time', whose data this library did not write (not readable).\n"
    assert not lock("huge-time").locked()
    with pytest.raises(CommandError, match="No lock named 'huge-time' is held"):
        _run("release", "huge-time")


def test_list_json_with_a_bad_pattern_prints_nothing() -> None:
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("locks", "list", "--json", "--pattern", "[ab", stdout=out)
    assert out.getvalue() == ""


def test_clear_says_when_waiters_took_locks_over(redis_client: redis.Redis) -> None:
    hold("busy-queue")
    results: list[bool] = []
    waiter = threading.Thread(
        target=lambda: results.append(lock("busy-queue", blocking_timeout=10).acquire())
    )
    waiter.start()
    wait_until(lambda: redis_client.zcard(keys("busy-queue").queue) == 1)
    out = _run("clear", "--yes")
    waiter.join(5)
    assert "Released 1 lock (1 taken over at once by waiting clients)." in out
    assert results == [True]


def test_listing_uses_scan_not_keys(redis_client: redis.Redis) -> None:
    hold("a", "b")
    redis_client.config_resetstat()
    _run("list")
    _run("list", "--json")
    stats = commandstats(redis_client)
    assert "scan" in stats
    assert "keys" not in stats
