"""Supervised child processes: one way to start, await and stop them.

Used by the broker and ZooKeeper harnesses, the local lab, the benchmarks
and the test fixtures.

* Every process runs in a session of its own, so its pid is its process
  group id and a stop reaches whatever it forked (a JVM's helpers, a shell
  script's children).
* Its stdout and stderr are appended to a log file, after a header line
  naming the command and the time.
* Readiness is either a line of its output, seen as it is written (the
  output then passes through a reader thread on its way to the log, and
  nothing polls), or a callable polled until it answers true. Either way a
  process that exits first fails the start at once, with the log's tail.
* A stop is polite first (SIGTERM to the leader, or a callable such as
  ``rabbitmqctl stop``), then, after a timeout, SIGTERM and at last SIGKILL
  to whatever is left of the group. A process group is signalled only while
  it is known to be ours: the leader not yet reaped, or (for processes known
  only by pid, as the lab's are after a restart of its CLI) the pid's start
  time unchanged (broker/service_kit/detached.py keeps such processes).

The pid-level helpers (``proc_stat``, ``group_members``,
``group_cpu_seconds``, ``signal_group``) read Linux's /proc.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable

POLL_S = 0.05
#: How long a process whose output ended is given to exit.
EXIT_AFTER_OUTPUT_S = 5.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


class ProcessStartError(RuntimeError):
    """The process exited, or was not ready in time; the message carries its log's tail."""


# --------------------------------------------------------------------------- pids

@dataclass(frozen=True)
class ProcStat:
    state: str            # R, S, D, Z, X, ...
    pgid: int
    start_ticks: int      # start time since boot, in clock ticks: with the pid, an identity
    cpu_ticks: int        # utime + stime, all threads


def proc_stat(pid: int) -> ProcStat | None:
    """What /proc/<pid>/stat says of ``pid``; None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    fields = data[data.rindex(b")") + 2:].split()     # fields[0] is field 3 (state)
    return ProcStat(state=fields[0].decode(), pgid=int(fields[2]), start_ticks=int(fields[19]),
                    cpu_ticks=int(fields[11]) + int(fields[12]))


def _all_stats() -> list[tuple[int, ProcStat]]:
    stats = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = proc_stat(int(entry))
            if stat is not None:
                stats.append((int(entry), stat))
    return stats


def command_lines() -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every live (not zombie) process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue            # it ended while we looked
        stat = proc_stat(int(entry))
        if stat is not None and stat.state not in "ZX":
            found.append((int(entry), argv[:-1] if argv and argv[-1] == b"" else argv))
    return found


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the process group ``pgid``."""
    return [pid for pid, stat in _all_stats() if stat.pgid == pgid and stat.state not in "ZX"]


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system, all threads) of the live processes of a group."""
    return sum(stat.cpu_ticks for _pid, stat in _all_stats() if stat.pgid == pgid) / CLK_TCK


def signal_group(pgid: int, sig: int) -> bool:
    """``sig`` to the process group; False if it has no member left."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = POLL_S) -> bool:
    """Poll ``condition`` until it is true (True) or ``timeout`` s passed (False).
    For what has no event to wait on: another process's state in /proc, a port."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def read_from(path: str, start: int = 0) -> str:
    """A log file from byte ``start`` on."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"


def tail(path: str, lines: int = 40, max_bytes: int = 256 * 1024) -> str:
    """The last ``lines`` lines of a log file (read from its last ``max_bytes``)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - max_bytes))
            return b"".join(f.read().splitlines(keepends=True)[-lines:]).decode(errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"


# --------------------------------------------------------------------------- one process

class SupervisedProcess:
    """One child process in its own session, its output in ``log_path``.

    ``start(ready_line=...)`` watches its output for a line; ``wait_ready()``
    waits for that line or for a callable. ``stop()`` is the polite stop, then
    the hard way (see the module's docstring); ``kill()`` is a crash (SIGKILL
    to the group). Not thread-safe: one thread drives a process. A stopped
    process can be started again (same command, same log, appended).
    """

    def __init__(self, name: str, command: list[str], log_path: str, *,
                 cwd: str | None = None, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.stop_notes: list[str] = []     # what the last stop had to do beyond the polite one
        self._ready = threading.Event()       # the ready line seen, or the output ended
        self._line_seen = threading.Event()   # the ready line seen
        self._reader: threading.Thread | None = None

    # ------------------------------------------------------------ state

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc is not None else None

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_status(self) -> str:
        """'is running', 'exited with status N' or 'was killed by SIGX'."""
        code = self.poll()
        if self.proc is None:
            return "was never started"
        if code is None:
            return "is running"
        return f"exited with status {code}" if code >= 0 else \
            f"was killed by {signal.Signals(-code).name}"

    # ------------------------------------------------------------ start

    def start(self, ready_line: Callable[[bytes], bool] | None = None) -> "SupervisedProcess":
        """Start the process (not waiting for it: see wait_ready()). With
        ``ready_line``, every line of its output is shown to it until it
        returns true, which makes the process ready."""
        if self.is_running():
            raise ProcessStartError(f"{self.name} is already running (pid {self.pid})")
        if self._reader is not None:
            self._reader.join(timeout=10)     # the last run's output is all in the log
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        # fresh ones: the old reader must not set them
        self._ready, self._line_seen = ready, line_seen = threading.Event(), threading.Event()
        log = open(self.log_path, "ab")
        try:
            log.write(f"----- {self.name} started at {time.strftime('%Y-%m-%d %H:%M:%S')}: "
                      f"{shlex.join(self.command)}\n".encode())
            log.flush()
            output = subprocess.PIPE if ready_line is not None else log
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=output,
                                         stderr=subprocess.STDOUT, cwd=self.cwd, env=self.env,
                                         start_new_session=True)
        except BaseException:
            log.close()
            raise
        if ready_line is None:
            log.close()
            self._reader = None
        else:
            self._reader = threading.Thread(target=self._copy_output,
                                            args=(self.proc, log, ready_line, ready, line_seen),
                                            name=f"{self.name}-output", daemon=True)
            self._reader.start()
        return self

    @staticmethod
    def _copy_output(proc: subprocess.Popen, log, ready_line: Callable[[bytes], bool],
                     ready: threading.Event, line_seen: threading.Event) -> None:
        with log:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                if not ready.is_set() and ready_line(line):
                    line_seen.set()
                    ready.set()
        ready.set()     # the output ended (the process exits): unblock wait_ready()

    def wait_ready(self, timeout: float, ready: Callable[[], bool] | None = None) -> None:
        """Wait for the ready line (see start()) or, with ``ready``, until it
        answers true. ProcessStartError, with the log's tail, if the process
        exits first or is not ready in time; the process is then killed."""
        if ready is None:
            ok = self._ready.wait(timeout) and self._line_seen.is_set() and self.poll() is None
            if self._ready.is_set() and not self._line_seen.is_set():
                try:            # the output ended first: its exit is a moment away
                    self.proc.wait(EXIT_AFTER_OUTPUT_S)
                except subprocess.TimeoutExpired:
                    pass
        else:
            ok = wait_until(lambda: self.poll() is not None or ready(), timeout) \
                and self.poll() is None
        if not ok:
            why = (f"{self.exit_status()} before it was ready" if self.poll() is not None
                   else f"was not ready after {timeout:.0f} s")
            self.kill()
            raise ProcessStartError(f"{self.name} {why}; last lines of {self.log_path}:\n"
                                    f"{self.tail_log()}")

    # ------------------------------------------------------------ stop

    def send_signal(self, sig: int) -> None:
        """``sig`` to the leader only (nothing if it has exited)."""
        if self.is_running():
            self.proc.send_signal(sig)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the leader's exit (subprocess.TimeoutExpired after ``timeout``)."""
        if self.proc is None:
            return None
        code = self.proc.wait(timeout)
        self._join_reader()
        return code

    def terminate(self, polite: Callable[[], None] | None = None) -> None:
        """The polite stop, not waiting: ``polite()`` or SIGTERM to the group."""
        if not self.is_running():
            return
        try:
            if polite is not None:
                polite()
            else:
                signal_group(self.proc.pid, signal.SIGTERM)
        except Exception as exc:   # noqa: BLE001 - a stop must go on to the hard way
            self.stop_notes.append(f"polite stop failed: {exc}")

    def wait_stopped(self, timeout: float = 30.0, grace: float = 5.0) -> int | None:
        """Wait ``timeout`` s for the leader, then SIGTERM and SIGKILL (``grace``
        s each) to what is left of the group; the leader's exit status."""
        if self.proc is None:
            return None
        pgid = self.proc.pid
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop_notes.append(f"still running {timeout:.0f} s after the polite stop")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            # the leader is our child and reaped only below or by wait(): while
            # it is a zombie or alive, pgid cannot belong to anyone else
            if not group_members(pgid):
                break
            self.stop_notes.append(f"sent {sig.name} to process group {pgid}")
            if not signal_group(pgid, sig):
                break
            wait_until(lambda: not group_members(pgid), grace)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.stop_notes.append("the leader did not die")
        left = group_members(pgid)
        if left:
            self.stop_notes.append(f"process group {pgid} still has {left}")
        self._join_reader()
        return self.proc.returncode

    def stop(self, timeout: float = 30.0, polite: Callable[[], None] | None = None) -> int | None:
        """Polite stop, wait, then the hard way; the exit status (None if never
        started). ``stop_notes`` says what had to be done beyond the polite stop."""
        self.stop_notes = []
        self.terminate(polite)
        return self.wait_stopped(timeout)

    def kill(self) -> None:
        """SIGKILL to the group: a crash, nothing flushed that was not already."""
        if self.proc is None:
            return
        if self.proc.poll() is None or group_members(self.proc.pid):
            signal_group(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._join_reader()

    def _join_reader(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=10)

    # ------------------------------------------------------------ log

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def read_log(self, start: int = 0) -> str:
        """The log from byte ``start`` on (see log_size())."""
        return read_from(self.log_path, start)

    def tail_log(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def __repr__(self) -> str:
        return f"SupervisedProcess({self.name!r}, pid={self.pid}, {self.exit_status()})"
