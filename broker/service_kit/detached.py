"""Detached processes: started by one command, found, checked and stopped by later ones.

A detached process is a SupervisedProcess (a session of its own, so its
pid is its process group id; its output appended to its log) that outlives
the command that started it. What later commands know of it is its
record, a ``DetachedProcess`` (name, pid, start ticks, command, log; a
subclass adds what its owner needs), kept in a JSON state file
(``write_state``/``read_state``): ``{..., "processes": [record, ...]}``.
The lab (infra/local/lab.py), the local daemon (infra/local/daemon.py) and
the local Airflow (infra/local/airflow_stack.py) keep theirs so.

Invariants:

* A pid is trusted only together with the start time recorded beside it
  (``/proc/<pid>/stat``): a later process that got the same pid is neither
  alive nor signalled.
* A process group is signalled as a whole only while its leader is ours
  and alive; once the leader is gone, the members still in its group (the
  group id cannot be reused while it has members) are signalled one by one.
* ``write_state`` replaces the file atomically (written beside it, then
  renamed): a reader never sees half of it.

Not thread-safe. Linux only (/proc).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence, TypeVar

from broker.service_kit.process import (SupervisedProcess, group_members, proc_stat, signal_group,
                                        wait_until)

log = logging.getLogger(__name__)

#: How long ``stop`` waits for what is left after SIGKILL.
KILL_WAIT_S = 10.0

Record = TypeVar("Record", bound="DetachedProcess")


class StateFileError(RuntimeError):
    """A state file exists but cannot be read as one."""


@dataclass
class DetachedProcess:
    """One detached process, as its state file keeps it."""
    name: str
    pid: int
    start_ticks: int            # its start time in /proc/<pid>/stat: with the pid, its identity
    command: list[str]
    log: str
    container: str | None = None    # the container it runs (it is then the docker client)

    @classmethod
    def of(cls: type[Record], process: SupervisedProcess, name: str | None = None,
           **fields: Any) -> Record:
        """The record of ``process``, just started: its pid, start time,
        command and log, its name unless ``name`` is given."""
        stat = proc_stat(process.pid)
        return cls(name=name or process.name, pid=process.pid,
                   start_ticks=stat.start_ticks if stat else -1,
                   command=process.command, log=process.log_path, **fields)

    @classmethod
    def from_json(cls: type[Record], data: dict[str, Any]) -> Record:
        """The record of ``data`` (keys that are no field of ``cls`` ignored)."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def alive(self) -> bool:
        """Whether the process runs (it, not a later one that got its pid;
        a zombie does not run)."""
        stat = proc_stat(self.pid)
        return stat is not None and stat.start_ticks == self.start_ticks and \
            stat.state not in "ZX"

    def leftovers(self) -> list[int]:
        """The processes of its group still running: [pid] while it runs,
        what it left in its group once it is gone (empty when all is gone)."""
        if self.alive():
            return [self.pid]
        stat = proc_stat(self.pid)
        if stat is not None and stat.start_ticks != self.start_ticks:
            # Linux keeps a pid number while a process group of that id has
            # members: reused, so our group emptied before; nothing is ours
            return []
        return group_members(self.pid)

    def signal(self, sig: int) -> None:
        """``sig`` to its process group while it runs, else to each process
        it left in its group; nothing when none is left."""
        if self.alive():
            signal_group(self.pid, sig)     # its own session: pgid == pid
            return
        for pid in self.leftovers():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def wait_gone(processes: Iterable[Record], timeout: float) -> list[Record]:
    """Wait up to ``timeout`` s until nothing of any of ``processes`` runs;
    those of which something still runs."""
    pending = list(processes)

    def gone() -> bool:
        pending[:] = [p for p in pending if p.leftovers()]
        return not pending

    wait_until(gone, timeout)
    return pending


def stop(processes: Sequence[Record], timeout: float,
         send: Callable[[Record, int], None] | None = None) -> list[Record]:
    """SIGTERM to each of ``processes`` at once, SIGKILL to what is left of
    them after ``timeout`` s (then up to KILL_WAIT_S s for it to go);
    those of which something still runs after that. ``send(process, sig)``
    delivers a signal (default: ``process.signal(sig)``), e.g. through a
    container engine."""
    deliver = send or (lambda process, sig: process.signal(sig))
    for process in processes:
        deliver(process, signal.SIGTERM)
    left = wait_gone(processes, timeout)
    if left:
        log.warning("still running %.0f s after SIGTERM, killing: %s", timeout,
                    ", ".join(p.name for p in left))
        for process in left:
            deliver(process, signal.SIGKILL)
        left = wait_gone(left, KILL_WAIT_S)
    return left


def write_state(path: str, processes: Iterable[DetachedProcess], **fields: Any) -> None:
    """Write the state file ``path``: ``fields`` and the ``processes``' records."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = dict(fields, processes=[p.to_json() for p in processes])
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def read_state(path: str, record: type[Record] = DetachedProcess
               ) -> tuple[dict[str, Any], list[Record]] | None:
    """The state file ``path``: its other fields and its records (as
    ``record``); None when there is none. StateFileError when it cannot be
    read."""
    try:
        with open(path) as f:
            data = json.load(f)
        processes = [record.from_json(p) for p in data.pop("processes", [])]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise StateFileError(f"unreadable state file {path}: {exc}") from None
    return data, processes


__all__ = ["DetachedProcess", "StateFileError", "read_state", "stop", "wait_gone",
           "write_state"]
