"""@locked([...]): a callable run under every name of a list, taken with lock_many."""

from __future__ import annotations

import asyncio

import pytest
from django.test import RequestFactory

from django_redis_lock import LockBusy, MultiLock, current_lock, lock, locked


@locked(["account:{source}", "account:{target}"], label="transfer")
def transfer(source: int, target: int) -> tuple[str, ...]:
    held = current_lock()
    assert isinstance(held, MultiLock)
    assert all(lock(name).locked() for name in held.names)
    return held.names


def test_every_name_is_held_while_it_runs_and_released_after() -> None:
    assert transfer(2, 1) == ("account:1", "account:2")
    assert not lock("account:1").locked()
    assert current_lock() is None


def test_a_busy_name_raises_lock_busy_and_takes_none() -> None:
    with lock("account:7"):
        with pytest.raises(LockBusy, match="account:7"):
            transfer(3, 7)
        assert not lock("account:3").locked()


def test_two_templates_that_make_one_name_are_refused_at_the_call() -> None:
    with pytest.raises(ValueError, match="repeat a name"):
        transfer(4, 4)


def test_a_busy_view_answers_423() -> None:
    @locked(["report:{kind}", "exports"])
    def view(request: object, kind: str) -> str:
        return "ran"

    with lock("exports"):
        response = view(RequestFactory().get("/"), kind="daily")
    assert getattr(response, "status_code", None) == 423
    assert view(RequestFactory().get("/"), kind="daily") == "ran"


def test_async_callables() -> None:
    @locked(["a:{n}", "b:{n}"])
    async def work(n: int) -> list[str]:
        held = current_lock()
        assert isinstance(held, MultiLock)
        return sorted(held.fencing_tokens)

    assert asyncio.run(work(1)) == ["a:1", "b:1"]


@pytest.mark.parametrize(
    ("names", "options", "error", "message"),
    [
        ([], {}, ValueError, "at least one"),
        (["a", "a"], {}, ValueError, "repeat a lock name"),
        (["a", "b"], {"limit": 2}, TypeError, "no limit"),
        (["a", "b"], {"rate": "1/s"}, TypeError, "no rate"),
        (["a", "b"], {"timeout": "auto"}, ValueError, "auto"),
    ],
)
def test_bad_lists_are_refused_when_decorating(
    names: list[str], options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        locked(names, **options)  # type: ignore[arg-type]


def test_a_template_naming_an_unknown_argument_is_refused_when_decorating() -> None:
    with pytest.raises(ValueError, match="missing"):

        @locked(["a:{missing}", "b"])
        def work(present: int) -> None:
            pass
