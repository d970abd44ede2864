"""All the topics and partition logs of one broker's data directory.

On disk::

    <data dir>/topics/<topic>/topic.json         {"partitions": N, "config": {"retention.ms": "..."},
                                                  "replicated": true}  (a replica of a
                                                  replicated topic: docs/replication.md)
    <data dir>/topics/<topic>/<partition>/...    one partition log (see log.py)

A topic is created by writing its partition directories first and topic.json
last (atomically), so a crash mid-create leaves no half topic: directories
without topic.json are ignored (and reported) at start-up. Deletion removes
topic.json first for the same reason.

Thread-safety: used from the broker's event-loop thread only.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .errors import InvalidConfigError
from .log import Log
from .log_config import LogConfig

log = logging.getLogger(__name__)

TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
TOPIC_FILE = "topic.json"


class TopicExistsError(Exception):
    pass


class UnknownTopicError(KeyError):
    pass


def validate_topic_name(name: str) -> None:
    if not TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise InvalidConfigError(
            f"invalid topic name {name!r}: use 1-200 characters of [A-Za-z0-9._-]")


@dataclass
class Topic:
    name: str
    config: LogConfig
    overrides: dict[str, str]
    logs: list[Log] = field(default_factory=list)
    next_any_partition: int = 0      # round-robin cursor for "any partition" produce
    # the partitions are replicas of a cluster-wide replicated topic (the
    # replication layer decides who may write them), not this broker's own
    replicated: bool = False


class LogManager:
    def __init__(self, data_dir: str, default_config: LogConfig,
                 clock: Callable[[], int]) -> None:
        self.data_dir = data_dir
        self.topics_dir = os.path.join(data_dir, "topics")
        self.default_config = default_config
        self.clock = clock
        self.topics: dict[str, Topic] = {}
        os.makedirs(self.topics_dir, exist_ok=True)
        self._load()

    def _load(self) -> None:
        for name in sorted(os.listdir(self.topics_dir)):
            tdir = os.path.join(self.topics_dir, name)
            meta = os.path.join(tdir, TOPIC_FILE)
            if not os.path.isfile(meta):
                log.warning("ignoring %s: no %s (an interrupted create or delete)", tdir,
                            TOPIC_FILE)
                continue
            with open(meta) as f:
                spec = json.load(f)
            overrides = {str(k): str(v) for k, v in spec.get("config", {}).items()}
            config = self.default_config.with_overrides(overrides)
            topic = Topic(name, config, overrides, replicated=bool(spec.get("replicated")))
            for p in range(int(spec["partitions"])):
                topic.logs.append(Log(os.path.join(tdir, str(p)), config, self.clock,
                                      f"{name}/{p}"))
            self.topics[name] = topic
            log.info("loaded topic %s: %d partitions", name, len(topic.logs))

    def create_topic(self, name: str, partitions: int,
                     overrides: dict[str, str] | None = None,
                     replicated: bool = False) -> Topic:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        if not 1 <= partitions <= 10_000:
            raise InvalidConfigError(f"partitions must be 1..10000, got {partitions}")
        overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        config = self.default_config.with_overrides(overrides)
        tdir = os.path.join(self.topics_dir, name)
        if os.path.exists(tdir):
            shutil.rmtree(tdir)     # leftovers of an interrupted create/delete
        topic = Topic(name, config, overrides, replicated=replicated)
        for p in range(partitions):
            topic.logs.append(Log(os.path.join(tdir, str(p)), config, self.clock,
                                  f"{name}/{p}"))
        tmp = os.path.join(tdir, TOPIC_FILE + ".tmp")
        with open(tmp, "w") as f:
            spec = {"partitions": partitions, "config": overrides}
            if replicated:
                spec["replicated"] = True
            json.dump(spec, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(tdir, TOPIC_FILE))
        self.topics[name] = topic
        log.info("created topic %s with %d partitions %s", name, partitions, overrides or "")
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is None:
            raise UnknownTopicError(name)
        tdir = os.path.join(self.topics_dir, name)
        os.unlink(os.path.join(tdir, TOPIC_FILE))
        for lg in topic.logs:
            lg.delete()
        shutil.rmtree(tdir, ignore_errors=True)
        log.info("deleted topic %s", name)

    def reset_partition(self, name: str, partition: int) -> Log:
        """Delete one partition's log and put an empty one in its place (a
        replica moved off this broker: docs/replication.md). The old Log
        object must not be used afterwards."""
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicError(name)
        old = topic.logs[partition]
        old.delete()
        fresh = Log(old.directory, topic.config, self.clock, f"{name}/{partition}")
        topic.logs[partition] = fresh
        log.info("emptied partition %s/%d", name, partition)
        return fresh

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def all_logs(self) -> Iterator[Log]:
        for topic in self.topics.values():
            yield from topic.logs

    def close(self, clean: bool = True) -> None:
        for lg in self.all_logs():
            try:
                lg.close(clean)
            except OSError as exc:
                log.error("closing %s failed: %s", lg.name, exc)
