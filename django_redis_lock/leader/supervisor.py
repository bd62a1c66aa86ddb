"""The supervisor behind ``manage.py locks lead NAME -- COMMAND``: run COMMAND only while this
process leads NAME.

It waits to lead, then starts COMMAND with ``DJANGO_REDIS_LOCK_EPOCH`` (the leadership's epoch)
in its environment, and watches three things at once: the child exiting, the leadership being
found lost, and a SIGTERM or SIGINT to the supervisor.

- The child exits on its own: the supervisor resigns at once and exits with the child's code.
- The leadership is lost (a renewal found it taken, or Redis was out of reach past the lease):
  the child gets SIGTERM, then SIGKILL after ``grace`` seconds, and the supervisor goes back to
  waiting to lead. A child that outlives its leadership (a paused supervisor cannot stop it)
  writes with an epoch the storage refuses: the epoch is what protects the data.
- SIGTERM or SIGINT to the supervisor: the child gets SIGTERM (SIGKILL after ``grace``), and
  once it has stopped the supervisor resigns, so a waiting follower leads at once instead of
  waiting out the lease; it exits with the child's code. While it waits to lead, it leaves the
  queue and exits with 128 + the signal.
- Redis out of reach while it waits to lead: it tries again, after 0.5 s, then twice as long
  each time up to 10 s, until Redis answers (a follower outlives an outage; a leader whose
  renewals fail loses the leadership at the end of its lease, stops its child, and waits so).

Everything waits on one event: no polling loop.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from django_redis_lock.exceptions import LockNotOwned, LockUnavailable
from django_redis_lock.leader.leadership import Leadership

logger = logging.getLogger("django_redis_lock")

#: The environment variable that carries the epoch to the child.
EPOCH_VARIABLE = "DJANGO_REDIS_LOCK_EPOCH"
#: The first and the longest pause between two tries to reach Redis while waiting to lead.
RETRY_SECONDS = (0.5, 10.0)
#: The signals that stop the supervisor (and its child).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stop(BaseException):
    """Raised into a supervisor waiting to lead by SIGTERM or SIGINT: the wait leaves the
    queue (as any interrupted acquire does)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it: its code, or 128 + the signal that ended it."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    """Runs ``command`` while this process leads ``leadership`` (see the module)."""

    def __init__(
        self,
        leadership: Leadership,
        command: Sequence[str],
        *,
        grace: float,
        say: Callable[[str], None] = logger.info,
    ) -> None:
        self.leadership = leadership
        self.command = list(command)
        self.grace = grace
        self._say = say
        self._wake = threading.Event()  # the child exited, the leadership was lost, or stop
        self._stop_signal: int | None = None
        self._waiting = False  # waiting to lead: a stop signal interrupts the wait
        leadership.on_loss(self._wake.set)

    def run(self) -> int:
        """Lead and run the command until it exits, or a stop signal comes; its exit code."""
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        try:
            while True:
                try:
                    self._lead()
                except _Stop as stop:
                    if self.leadership.is_leader:  # the signal came as the wait ended
                        self._resign()
                    self._say(f"Stopped while waiting to lead {self.leadership.name!r}.")
                    return 128 + stop.signum
                code = self._supervise()
                if code is not None:
                    return code
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum
        self._wake.set()
        if self._waiting:
            raise _Stop(signum)

    def _lead(self) -> None:
        self._waiting = True
        try:
            self._raise_if_stopped()
            self._say(f"Waiting to lead {self.leadership.name!r}.")
            delay = RETRY_SECONDS[0]
            while True:
                try:
                    if self.leadership.acquire():
                        break
                except LockUnavailable as exc:  # a follower outlives a Redis outage
                    self._say(f"Redis is unavailable ({exc}); trying again in {delay:g} s.")
                    self._wake.wait(delay)  # a stop signal interrupts it
                    self._wake.clear()
                    self._raise_if_stopped()
                    delay = min(delay * 2, RETRY_SECONDS[1])
        finally:
            self._waiting = False
        self._raise_if_stopped()  # a signal that came as it took the leadership

    def _raise_if_stopped(self) -> None:
        if self._stop_signal is not None:
            raise _Stop(self._stop_signal)

    def _supervise(self) -> int | None:
        """Run the child while leading; its exit code, or None when the leadership was lost
        (then wait to lead again)."""
        epoch = self.leadership.epoch
        self._say(f"Leading {self.leadership.name!r} (epoch {epoch}): starting the command.")
        self._wake.clear()
        if self.leadership.lost.is_set():  # lost before the child started: none to stop
            self._resign()
            return None
        child = subprocess.Popen(self.command, env={**os.environ, EPOCH_VARIABLE: str(epoch)})
        exited = threading.Event()
        threading.Thread(target=self._wait_for, args=(child, exited), daemon=True).start()
        self._wake.wait()
        if exited.is_set():  # on its own
            self._resign()
            code = exit_code(child.returncode)
            self._say(f"The command exited with {code}; resigned.")
            return code
        if self._stop_signal is not None:
            code = self._stop(child, exited, "the supervisor was asked to stop")
            self._resign()
            self._say(f"Resigned the leadership of {self.leadership.name!r}.")
            return code
        self._stop(child, exited, "the leadership was lost")
        self._resign()  # the lost hold: only forgotten
        return None

    def _wait_for(self, child: subprocess.Popen[Any], exited: threading.Event) -> None:
        child.wait()
        exited.set()
        self._wake.set()

    def _stop(self, child: subprocess.Popen[Any], exited: threading.Event, why: str) -> int:
        """SIGTERM the child, SIGKILL it after the grace period; its exit code."""
        self._say(f"Stopping the command ({why}): SIGTERM.")
        child.send_signal(signal.SIGTERM)
        if not exited.wait(self.grace):
            self._say(f"The command outlived {self.grace:g} s of grace: SIGKILL.")
            child.kill()
            exited.wait()
        return exit_code(child.returncode)

    def _resign(self) -> None:
        try:
            self.leadership.release()
        except LockNotOwned:  # lost meanwhile: nothing to give back
            pass
        except LockUnavailable as exc:  # its lease ends it; the watchdog gives it back
            self._say(f"Could not resign at once, Redis is unavailable: {exc}")
