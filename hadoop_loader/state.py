"""The loader's offsets, stored with the output (not in the brokers, not in
ZooKeeper), as Camus kept them; and, per event hour, the offset ranges its
rows were loaded from.

Layout under the output root::

    _samsa/offsets/00000000000000000042.json   a commit: {"run": ..., "offsets": {...}}
    _samsa/hours/date=2026-11-26/hour=10.json  {"ranges": {"page_views/0-1": [[0, 9120]]}}

A commit is one new file, created only if absent (outputfs.py's
``create_new``: locally a hard link of a written temporary file, atomic;
on HDFS and S3 a check, then a write); its sequence number is one more than
the last. The newest commit is the loader's position; older ones are kept (a short
history) and pruned beyond ``keep``. The offsets are keyed by
``"topic/broker_id-partition"`` (a broker-partition, as the consumer names
it), or ``"topic/partition"`` for a partition of a replicated topic (whoever
leads it: byte offsets are the same on every replica): where the next load
starts reading each.

A load writes its data first and commits its offsets last: a run that dies
before the commit leaves the previous position, and the next run loads the
same ranges again into a fresh staging area (see the job), so each message
lands in the output once.

An hour's ranges (``HourRanges``) are what a reload of that hour re-reads:
every load that wrote rows of the hour into a topic adds, for each of the
topic's broker-partitions, the whole range [start, end) it read, not the
offsets of those rows alone (finding those would cost a look at every
message on the normal path). So the ranges hold every row of the hour,
and other hours' rows too, which the reload filters out: hourly loads keep
that to about two hours of data; a catch-up load over many hours adds its
whole range to each of them. Ranges that touch are merged. They are
written during the publish, before the offsets commit, from the publish
manifest (an interrupted publish writes them when it is finished): adding
a range twice changes nothing.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

OFFSETS_DIR = "_samsa/offsets"
HOURS_DIR = "_samsa/hours"


class StateError(RuntimeError):
    pass


@dataclass
class Commit:
    sequence: int
    run: str
    offsets: dict[str, int]
    committed_ms: int
    extra: dict = field(default_factory=dict)


def hour_id(hour_ms: int) -> str:
    """"YYYY-MM-DD/HH" (UTC) of the hour starting at ``hour_ms``: how a
    load's rows and the hour records are keyed."""
    return time.strftime("%Y-%m-%d/%H", time.gmtime(hour_ms // 1000))


def hour_partition(topic: str, hour_ms: int) -> str:
    """A topic's hour partition, relative to the output root."""
    date, _, hh = hour_id(hour_ms).partition("/")
    return f"{topic}/date={date}/hour={hh}"


def key(topic: str, name: str) -> str:
    """The key of a partition, by its name ("b-p", or a replicated one's "p")."""
    return f"{topic}/{name}"


def parse_key(text: str) -> tuple[str, str]:
    """(topic, partition name) of a key."""
    topic, _, name = text.rpartition("/")
    return topic, name


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


def merge_ranges(ranges) -> list[list[int]]:
    """[start, end) ranges sorted, those that overlap or touch made one."""
    merged: list[list[int]] = []
    for start, end in sorted((int(a), int(b)) for a, b in ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


class HourRanges:
    """Per event hour ("YYYY-MM-DD/HH", as a load's rows are keyed), the
    offset ranges per broker-partition key that hold its rows (the module's
    docstring says how exact). Not thread-safe: one load at a time writes
    (the output's lock)."""

    def __init__(self, output) -> None:
        from hadoop_loader.outputfs import OutputFS
        self.fs = output if isinstance(output, OutputFS) else OutputFS(output)

    @staticmethod
    def _name(hour: str) -> tuple[str, str, str]:
        date, _, hh = hour.partition("/")
        return (HOURS_DIR, f"date={date}", f"hour={hh}.json")

    def get(self, hour: str) -> dict[str, list[list[int]]] | None:
        """The hour's ranges, None when no load recorded any."""
        name = self._name(hour)
        if not self.fs.exists(*name):
            return None
        try:
            data = json.loads(self.fs.read_text(*name))
            return {k: merge_ranges(v) for k, v in data["ranges"].items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(f"unreadable hour record {self.fs.path(*name)}: {exc}") from None

    def add(self, additions: dict[str, dict[str, list[int]]]) -> None:
        """Merge ``{hour: {key: [start, end]}}`` into the records (each
        hour's file replaced whole)."""
        for hour, ranges in sorted(additions.items()):
            found = self.get(hour) or {}
            for k, (start, end) in ranges.items():
                found[k] = merge_ranges(found.get(k, []) + [[start, end]])
            self.fs.write_json(self._name(hour), {"ranges": found})
