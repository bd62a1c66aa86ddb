"""The checker's verdicts, model by model: legal histories that only a non-obvious order
explains (an operation invoked later linearized first, an ``info`` that must, or must not,
have taken effect) and one injected violation of every kind, with the reason it gives."""

from __future__ import annotations

import pytest

from tests.faults.history import Event, check, expire, op

LEGAL: dict[str, tuple[str, list[list[Event]]]] = {
    # p1's acquire, invoked first, can only follow p2's release, invoked after it.
    "mutex-later-release-first": (
        "mutex",
        [op(2, "acquire", 0, 1), op(1, "acquire", 2, 20), op(2, "release", 3, 10)],
    ),
    # Refused acquires changed nothing: they are not in the way.
    "mutex-refusals-dropped": (
        "mutex",
        [op(1, "acquire", 0, 1), op(2, "acquire", 2, 3, "fail"), op(1, "release", 4, 5)],
    ),
    # p1's acquire lost its answer: its release says it took effect.
    "mutex-info-must-take-effect": (
        "mutex",
        [op(1, "acquire", 0, 1, "info"), op(1, "release", 5, 6), op(2, "acquire", 7, 8)],
    ),
    # p1's acquire lost its answer: p2 holds from 5 on, so it never took effect.
    "mutex-info-must-not-take-effect": (
        "mutex",
        [op(1, "acquire", 0, 1, "info"), op(2, "acquire", 5, 6), op(3, "acquire", 9, None)],
    ),
    # The holder was killed: its lease ran out at 100, p2 got the lock at 150.
    "mutex-expired": (
        "mutex",
        [op(1, "acquire", 0, 1), expire(1, 100), op(2, "acquire", 150, 160)],
    ),
    # The same, the expire naming the acquire whose hold it ends (the recorder's form).
    "mutex-expired-tied": (
        "mutex",
        [op(1, "acquire", 0, 1), expire(1, 100, acquired=0), op(2, "acquire", 150, 160)],
    ),
    "rwlock-reader-expired-tied": (
        "rwlock",
        [op(1, "acquire-read", 0, 1), expire(1, 100, acquired=0), op(2, "acquire-write", 150, 160)],
    ),
    # A read that only works if the write concurrent with it went first.
    "fenced-read-after-concurrent-write": (
        "fenced-register",
        [op(1, "write", 0, 10, value=[1, "a"]), op(2, "read", 2, 5, result=[1, "a"])],
    ),
    # Token 2's write, invoked after token 3's, went first: both accepted; the reads agree.
    "fenced-writes-reordered": (
        "fenced-register",
        [
            op(1, "acquire", 0, 1, result=2),
            op(2, "acquire", 2, 3, result=3),
            op(2, "write", 4, 20, value=[3, "b"]),
            op(1, "write", 5, 20, value=[2, "a"]),
            op(3, "read", 6, 7, result=[2, "a"]),
            op(3, "read", 21, 22, result=[3, "b"]),
        ],
    ),
    # A refusal justified by the later token's write concurrent with it; a write lost (info)
    # that the last read shows.
    "fenced-refusal-and-info-write": (
        "fenced-register",
        [
            op(2, "write", 0, 10, value=[5, "x"]),
            op(1, "write", 1, 9, "fail", value=[4, "y"]),
            op(2, "write", 11, 12, "info", value=[6, "z"]),
            op(3, "read", 20, 21, result=[6, "z"]),
        ],
    ),
    "semaphore-later-release-first": (
        "semaphore:2",
        [
            op(1, "acquire", 0, 1),
            op(2, "acquire", 0, 1),
            op(3, "acquire", 2, 20),
            op(1, "release", 3, 10),
        ],
    ),
    "rwlock-readers-share-then-writer": (
        "rwlock",
        [
            op(1, "acquire-read", 0, 1),
            op(2, "acquire-read", 0, 1),
            op(3, "acquire-write", 2, 20),
            op(1, "release-read", 3, 4),
            op(2, "release-read", 5, 10),
            op(3, "release-write", 21, 22),
        ],
    ),
    "rwlock-reader-expired": (
        "rwlock",
        [op(1, "acquire-read", 0, 1), expire(1, 50), op(2, "acquire-write", 40, 60)],
    ),
    "leader-handover": (
        "leader",
        [
            op(1, "elected", 0, 1, result=1),
            op(1, "act", 2, 3, value=1),
            op(2, "elected", 4, 20, result=2),
            op(1, "resigned", 5, 10),
            op(2, "act", 21, 22, value=2),
            op(2, "act", 23, 24, "fail", value=7),
        ],
    ),
    "leader-expired-then-act-unknown": (
        "leader",
        [
            op(1, "elected", 0, 1, result=1),
            expire(1, 30),
            op(1, "act", 40, 41, "info", value=1),
            op(2, "elected", 35, 50, result=4),
        ],
    ),
}

VIOLATIONS: dict[str, tuple[str, list[list[Event]], str]] = {
    "mutex-double-grant": (
        "mutex",
        [op(1, "acquire", 0, 1), op(2, "acquire", 2, 3)],
        "acquire by 2 while 1 holds",
    ),
    "mutex-release-by-non-holder": (
        "mutex",
        [op(1, "acquire", 0, 1), op(2, "release", 2, 3)],
        "release of 2's hold while 1 holds",
    ),
    "mutex-expire-of-non-holder": (
        "mutex",
        [op(1, "acquire", 0, 1), expire(2, 5, kind="ok")],
        "expire of 2's hold while 1 holds",
    ),
    # p1's lost acquire at 0 left an expire; it cannot end the hold p1 got at 20 (ok).
    "mutex-expire-of-another-acquire": (
        "mutex",
        [
            op(1, "acquire", 0, 1, "info"),
            expire(1, 100, acquired=0),
            op(1, "acquire", 20, 21),
            op(2, "acquire", 150, 160),
        ],
        "acquire by 2 while 1 holds",
    ),
    # The same in the older form (the value the holder only): a hold granted by an acquire
    # invoked after the expire's cannot be ended by it.
    "mutex-old-expire-of-a-later-acquire": (
        "mutex",
        [
            op(1, "acquire", 0, 1, "info"),
            expire(1, 100),
            op(1, "acquire", 120, 121),
            op(2, "acquire", 150, 160),
        ],
        "acquire by 2 while 1 holds",
    ),
    # The lease could not have run out before 100: p2's grant at 50..60 is a second holder.
    "mutex-expire-before-its-invoke": (
        "mutex",
        [op(1, "acquire", 0, 1), expire(1, 100), op(2, "acquire", 50, 60)],
        "acquire by 2 while 1 holds",
    ),
    "fenced-token-down-accepted": (
        "fenced-register",
        [op(1, "write", 0, 1, value=[5, "a"]), op(2, "write", 2, 3, value=[3, "b"])],
        'write [3, "b"] accepted after [5, "a"]',
    ),
    "fenced-token-not-increasing": (
        "fenced-register",
        [op(1, "acquire", 0, 1, result=5), op(2, "acquire", 2, 3, result=5)],
        "token 5 granted after token 5",
    ),
    "fenced-stale-read": (
        "fenced-register",
        [
            op(1, "write", 0, 1, value=[1, "a"]),
            op(2, "write", 2, 3, value=[2, "b"]),
            op(3, "read", 4, 5, result=[1, "a"]),
        ],
        'read [1, "a"] while the last accepted write is [2, "b"]',
    ),
    "fenced-unjustified-refusal": (
        "fenced-register",
        [op(1, "write", 0, 1, value=[1, "a"]), op(2, "write", 2, 3, "fail", value=[1, "b"])],
        'write [1, "b"] refused while the last accepted is [1, "a"]',
    ),
    "semaphore-one-holder-too-many": (
        "semaphore:2",
        [op(1, "acquire", 0, 1), op(2, "acquire", 0, 1), op(3, "acquire", 2, 3)],
        "acquire by 3 while 1, 2 hold (2 of 2)",
    ),
    "rwlock-writer-with-reader": (
        "rwlock",
        [op(1, "acquire-read", 0, 1), op(2, "acquire-write", 2, 3)],
        "acquire-write by 2 while readers 1 hold",
    ),
    "rwlock-two-writers": (
        "rwlock",
        [op(1, "acquire-write", 0, 1), op(2, "acquire-write", 2, 3)],
        "acquire-write by 2 while writer 1 holds",
    ),
    "leader-two-leaders": (
        "leader",
        [op(1, "elected", 0, 1, result=1), op(2, "elected", 2, 3, result=2)],
        "elected of 2 while 1 leads (epoch 1)",
    ),
    "leader-epoch-not-increasing": (
        "leader",
        [
            op(1, "elected", 0, 1, result=3),
            op(1, "resigned", 2, 3),
            op(2, "elected", 4, 5, result=3),
        ],
        "elected 2 with epoch 3 after epoch 3",
    ),
    "leader-act-by-non-leader": (
        "leader",
        [op(1, "elected", 0, 1, result=1), op(2, "act", 2, 3, value=1)],
        "act by 2 with epoch 1 while 1 leads (epoch 1)",
    ),
    "leader-act-with-wrong-epoch": (
        "leader",
        [op(1, "elected", 0, 1, result=2), op(1, "act", 2, 3, value=1)],
        "act by 1 with epoch 1 while 1 leads (epoch 2)",
    ),
}


@pytest.mark.parametrize("name", sorted(LEGAL))
def test_a_legal_history_is_linearizable(name: str) -> None:
    model, ops = LEGAL[name]
    verdict = check(model, *ops)
    assert verdict.linearizable, verdict.lines()
    assert verdict.last_line() == f"linearizable: {len(ops)} operations"


@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_one_injected_violation_is_found_and_explained(name: str) -> None:
    model, ops, why = VIOLATIONS[name]
    verdict = check(model, *ops)
    assert not verdict.linearizable
    (failure,) = verdict.failures
    assert failure.why == why
    assert verdict.last_line() == f"not linearizable: 1 of 1 keys under {model}, first 'k': {why}"
