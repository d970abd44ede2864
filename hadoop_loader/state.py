"""The loader's offsets, stored with the output (not in the brokers, not in
ZooKeeper), as Camus kept them.

Layout under the output root::

    _samsa/offsets/00000000000000000042.json   a commit: {"run": ..., "offsets": {...}}

A commit is one new file, written under a temporary name and renamed into
place (atomic on a POSIX file system, and what Hadoop file systems offer
for a single file); its sequence number is one more than the last. The
newest commit is the loader's position; older ones are kept (a short
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
import os
import time
import uuid
from dataclasses import dataclass, field

OFFSETS_DIR = os.path.join("_samsa", "offsets")


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


def local_path(output: str) -> str:
    """The local directory of a ``file://`` output (or a plain path)."""
    if output.startswith("file://"):
        return output[len("file://"):]
    if "://" in output:
        raise StateError(f"{output}: only file:// outputs are handled here (others go through "
                         f"the Spark job's Hadoop file system)")
    return output


class OffsetStore:
    """The commits of one output root (a local directory)."""

    def __init__(self, output: str, keep: int = 20) -> None:
        self.root = local_path(output)
        self.directory = os.path.join(self.root, OFFSETS_DIR)
        self.keep = keep

    def _sequences(self) -> list[int]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def latest(self) -> Commit | None:
        """The newest commit, None before the first load."""
        for sequence in reversed(self._sequences()):
            path = os.path.join(self.directory, f"{sequence:020d}.json")
            try:
                with open(path) as f:
                    data = json.load(f)
            except (OSError, ValueError) as exc:
                raise StateError(f"unreadable offsets commit {path}: {exc}") from None
            return Commit(sequence, data["run"], {k: int(v) for k, v in data["offsets"].items()},
                          int(data["committed_ms"]), data.get("extra", {}))
        return None

    def offsets(self) -> dict[str, int]:
        found = self.latest()
        return dict(found.offsets) if found else {}

    def commit(self, offsets: dict[str, int], run: str | None = None,
               extra: dict | None = None) -> Commit:
        """Write a new commit holding ``offsets`` merged over the last one's."""
        os.makedirs(self.directory, exist_ok=True)
        last = self.latest()
        merged = dict(last.offsets) if last else {}
        for k, v in offsets.items():
            if v < merged.get(k, 0):
                raise StateError(f"offset of {k} would move back: {merged[k]} -> {v}")
            merged[k] = v
        commit = Commit((last.sequence + 1) if last else 1, run or uuid.uuid4().hex,
                        merged, int(time.time() * 1000), dict(extra or {}))
        path = os.path.join(self.directory, f"{commit.sequence:020d}.json")
        if os.path.exists(path):
            raise StateError(f"{path} exists: another load committed at the same time")
        tmp = os.path.join(self.directory, f".{commit.sequence:020d}.{commit.run}.tmp")
        with open(tmp, "w") as f:
            json.dump({"run": commit.run, "offsets": merged, "committed_ms": commit.committed_ms,
                       "extra": commit.extra}, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)          # fails if another commit took the sequence
        except FileExistsError:
            raise StateError(f"{path} exists: another load committed at the same time") \
                from None
        finally:
            os.unlink(tmp)
        self._prune()
        return commit

    def _prune(self) -> None:
        for sequence in self._sequences()[:-self.keep]:
            try:
                os.unlink(os.path.join(self.directory, f"{sequence:020d}.json"))
            except FileNotFoundError:
                pass
