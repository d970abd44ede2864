"""The loader's offsets, stored with the output (not in the brokers, not in
ZooKeeper), as Camus kept them.

Layout under the output root::

    _samsa/offsets/00000000000000000042.json   a commit: {"run": ..., "offsets": {...}}

A commit is one new file, created only if absent (outputfs.py's
``create_new``: locally a hard link of a written temporary file, atomic;
on HDFS and S3 a check, then a write); its sequence number is one more than
the last. The newest commit is the loader's position; older ones are kept (a short
history) and pruned beyond ``keep``. The offsets are keyed by
``"topic/broker_id-partition"`` (a broker-partition, as the consumer names
it): where the next load starts reading each.

A load writes its data first and commits its offsets last: a run that dies
before the commit leaves the previous position, and the next run loads the
same ranges again into a fresh staging area (see the job), so each message
lands in the output once.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

OFFSETS_DIR = "_samsa/offsets"


class StateError(RuntimeError):
    pass


@dataclass
class Commit:
    sequence: int
    run: str
    offsets: dict[str, int]
    committed_ms: int
    extra: dict = field(default_factory=dict)


def key(topic: str, broker_id: int, partition: int) -> str:
    return f"{topic}/{broker_id}-{partition}"


def parse_key(text: str) -> tuple[str, int, int]:
    topic, _, bp = text.rpartition("/")
    broker, _, partition = bp.partition("-")
    return topic, int(broker), int(partition)


class OffsetStore:
    """The commits of one output root (any file system outputfs.py serves)."""

    def __init__(self, output, keep: int = 20) -> None:
        from hadoop_loader.outputfs import OutputFS
        self.fs = output if isinstance(output, OutputFS) else OutputFS(output)
        self.keep = keep

    def _name(self, sequence: int) -> tuple[str, str]:
        return (OFFSETS_DIR, f"{sequence:020d}.json")

    def _sequences(self) -> list[int]:
        names = self.fs.listdir(OFFSETS_DIR)
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def latest(self) -> Commit | None:
        """The newest commit, None before the first load."""
        for sequence in reversed(self._sequences()):
            try:
                data = json.loads(self.fs.read_text(*self._name(sequence)))
            except (OSError, ValueError) as exc:
                raise StateError(f"unreadable offsets commit "
                                 f"{self.fs.path(*self._name(sequence))}: {exc}") from None
            return Commit(sequence, data["run"], {k: int(v) for k, v in data["offsets"].items()},
                          int(data["committed_ms"]), data.get("extra", {}))
        return None

    def offsets(self) -> dict[str, int]:
        found = self.latest()
        return dict(found.offsets) if found else {}

    def commit(self, offsets: dict[str, int], run: str | None = None,
               extra: dict | None = None) -> Commit:
        """Write a new commit holding ``offsets`` merged over the last one's."""
        last = self.latest()
        merged = dict(last.offsets) if last else {}
        for k, v in offsets.items():
            if v < merged.get(k, 0):
                raise StateError(f"offset of {k} would move back: {merged[k]} -> {v}")
            merged[k] = v
        commit = Commit((last.sequence + 1) if last else 1, run or uuid.uuid4().hex,
                        merged, int(time.time() * 1000), dict(extra or {}))
        text = json.dumps({"run": commit.run, "offsets": merged,
                           "committed_ms": commit.committed_ms, "extra": commit.extra},
                          indent=1, sort_keys=True)
        if not self.fs.create_new(self._name(commit.sequence), text):
            raise StateError(f"{self.fs.path(*self._name(commit.sequence))} exists: another "
                             f"load committed at the same time")
        self._prune()
        return commit

    def _prune(self) -> None:
        for sequence in self._sequences()[:-self.keep]:
            self.fs.delete_file(*self._name(sequence))
