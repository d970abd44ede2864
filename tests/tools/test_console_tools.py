"""The console tools end to end, as a user runs them (``python -m
broker.tools ...`` in a subprocess) against a real broker: topic admin,
produce from stdin, consume, offsets, --help, their --json for machines, and
the errors a user meets."""
from __future__ import annotations

import base64
import json
import re
import time
import zlib

import pytest

from broker.client.admin import AdminClient
from broker.tools.__main__ import PRODUCE_ASK_TIMEOUT_S

from broker_helpers import connect, read_partition, run_module, unused_port

SUBCOMMANDS = ["produce", "consume", "topics", "offsets"]


def tool(*args: str, stdin: bytes | None = None):
    return run_module("broker.tools", *args, stdin=stdin)


def ok(*args: str, stdin: bytes | None = None) -> str:
    """Run a tool that must succeed; its standard output."""
    done = tool(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.mark.parametrize("command", [[], *([c] for c in SUBCOMMANDS)],
                         ids=["tools", *SUBCOMMANDS])
def test_help_of_every_subcommand(command):
    out = ok(*command, "--help")
    assert out.startswith("usage: python -m broker.tools")
    for word in (SUBCOMMANDS if not command else ["--bootstrap"]):
        assert word in out


def test_topics_create_list_describe_delete(module_broker, topic):
    boot = ("--bootstrap", module_broker.address)
    out = ok("topics", *boot, "--create", topic, "--partitions", "3",
             "--config", "flush.messages=1", "--config", "retention.ms=3600000")
    assert out.strip() == f"created topic {topic} with 3 partitions"
    assert topic in ok("topics", *boot, "--list").split()
    assert topic in ok("topics", *boot).split()                   # --list is the default

    described = ok("topics", *boot, "--describe", topic).splitlines()
    assert described[0].startswith(f"Topic: {topic}\tPartitions: 3\tConfig: ")
    assert "flush.messages=1" in described[0] and "retention.ms=3600000" in described[0]
    assert [re.match(r"\tPartition: (\d+)\tEarliest: 0\tLatest: 0\t", line).group(1)
            for line in described[1:]] == ["0", "1", "2"]

    again = tool("topics", *boot, "--create", topic)
    assert again.returncode == 1
    assert b"TOPIC_ALREADY_EXISTS" in again.stderr

    assert ok("topics", *boot, "--delete", topic).strip() == f"deleted topic {topic}"
    assert topic not in ok("topics", *boot, "--list").split()
    gone = tool("topics", *boot, "--describe", topic)
    assert gone.returncode == 1 and b"unknown topic" in gone.stderr


def test_produce_keyed_lines_then_consume_them(module_broker, topic):
    boot = ("--bootstrap", module_broker.address)
    ok("topics", *boot, "--create", topic, "--partitions", "3")
    sent = [(b"user-%d" % (i % 5), b"click %d: a=b" % i) for i in range(30)]
    stdin = b"".join(k + b"=" + v + b"\n" for k, v in sent)      # splits at the first "="
    done = tool("produce", *boot, "--topic", topic, "--key-separator", "=",
                "--acks", "flushed", stdin=stdin)
    assert done.returncode == 0, done.stderr.decode()
    assert f"produced 30 messages to {topic}".encode() in done.stderr

    out = ok("consume", *boot, "--topic", topic, "--from-beginning", "--max-messages", "30",
             "--timeout-ms", "10000", "--print-offsets", "--print-keys")
    rows = [line.split(b"\t") for line in out.encode().splitlines()]
    assert len(rows) == 30
    with connect(module_broker.address) as conn:
        stored = {(p, m.offset): m for p in range(3) for m in read_partition(conn, topic, p)}
    for where, key, value in rows:
        partition, offset = map(int, where.split(b":"))
        assert partition == zlib.crc32(key) % 3
        assert (stored[partition, offset].key, stored[partition, offset].value) == (key, value)
    for key in {k for k, _v in sent}:
        assert [v for _w, k, v in rows if k == key] == [v for k, v in sent if k == key]

    # without --max-messages: stops once --timeout-ms passes with nothing new
    started = time.monotonic()
    done = tool("consume", *boot, "--topic", topic, "--from-beginning", "--timeout-ms", "500")
    assert done.returncode == 0
    assert time.monotonic() - started >= 0.5
    assert sorted(done.stdout.splitlines()) == sorted(v for _k, v in sent)
    assert b"consumed 30 messages" in done.stderr

    out = ok("consume", *boot, "--topic", topic, "--partition", "0", "--offset", "0",
             "--max-messages", "2", "--timeout-ms", "5000", "--quiet")
    assert len(out.splitlines()) == 2

    bad = tool("produce", *boot, "--topic", topic, "--key-separator", "=",
               stdin=b"k=v\nno separator here\n")
    assert bad.returncode == 2
    assert b"line 2 has no key separator" in bad.stderr


def test_offsets_earliest_and_latest(module_broker, topic):
    boot = ("--bootstrap", module_broker.address)
    ok("topics", *boot, "--create", topic, "--partitions", "2")
    ok("produce", *boot, "--topic", topic, "--acks", "flushed", "--batch-size", "1",
       stdin=b"one\ntwo\nthree\n")
    assert ok("offsets", *boot, "--topic", topic, "--time", "earliest").split() == \
        [f"{topic}:0:0", f"{topic}:1:0"]
    with AdminClient(module_broker.address) as admin:
        latest = [admin.latest_offset(topic, p) for p in range(2)]
    assert all(latest)      # "any partition" dealt the three lines out to both
    assert ok("offsets", *boot, "--topic", topic, "--time", "latest").split() == \
        [f"{topic}:{p}:{latest[p]}" for p in range(2)]
    assert ok("offsets", *boot, "--topic", topic, "--partition", "1").split() == \
        [f"{topic}:1:{latest[1]}"]


def test_json_for_machines(module_broker, topic):
    boot = ("--bootstrap", module_broker.address)
    ok("topics", *boot, "--create", topic, "--partitions", "2",
       "--config", "retention.ms=3600000")
    lines = [b"k1=hello", b"\xff=\x80\x81 not text", b"caf\xc3\xa9=\xc3\xa9t\xc3\xa9"]
    ok("produce", *boot, "--topic", topic, "--partition", "0", "--key-separator", "=",
       "--acks", "flushed", stdin=b"".join(line + b"\n" for line in lines))

    # consume --json: one object per line; text when UTF-8, else base64
    out = ok("consume", *boot, "--topic", topic, "--partition", "0", "--from-beginning",
             "--max-messages", "3", "--timeout-ms", "10000", "--json", "--quiet")
    shown = [json.loads(line) for line in out.splitlines()]
    with connect(module_broker.address) as conn:
        stored = read_partition(conn, topic, 0)
    assert [(m["topic"], m["partition"], m["offset"], m["next_offset"], m["timestamp"])
            for m in shown] == [(topic, 0, m.offset, m.next_offset, m.timestamp)
                                for m in stored]

    def raw(text, encoding):
        return None if text is None else \
            base64.b64decode(text) if encoding == "base64" else text.encode()
    assert [(raw(m["key"], m["key_encoding"]), raw(m["value"], m["value_encoding"]))
            for m in shown] == [tuple(line.split(b"=", 1)) for line in lines]
    assert [(m["key_encoding"], m["value_encoding"]) for m in shown] == \
        [("utf-8", "utf-8"), ("base64", "base64"), ("utf-8", "utf-8")]
    assert shown[2]["key"] == "café" and shown[2]["value"] == "été"

    # topics --describe --json
    described = json.loads(ok("topics", *boot, "--describe", topic, "--json"))
    [one] = described["topics"]
    assert one["topic"] == topic and one["config"]["retention.ms"] == "3600000"
    end = stored[-1].next_offset
    assert [(p["partition"], p["earliest"], p["latest"]) for p in one["partitions"]] == \
        [(0, 0, end), (1, 0, 0)]
    assert one["partitions"][0]["size_bytes"] == end and one["partitions"][0]["segments"] >= 1

    # offsets --json: what the text says, as JSON
    for when in ("earliest", "latest"):
        text = ok("offsets", *boot, "--topic", topic, "--time", when).split()
        found = json.loads(ok("offsets", *boot, "--topic", topic, "--time", when, "--json"))
        assert found == {"topic": topic, "partitions": [
            {"partition": int(row.split(":")[1]),
             "offsets": [int(o) for o in row.split(":")[2].split(",") if o]} for row in text]}
    assert json.loads(ok("offsets", *boot, "--topic", topic, "--partition", "0", "--json"))[
        "partitions"] == [{"partition": 0, "offsets": [end]}]


@pytest.mark.parametrize("command", [["consume", "--topic", "no-such-topic"],
                                     ["offsets", "--topic", "no-such-topic"],
                                     ["topics", "--describe", "no-such-topic"]],
                         ids=lambda c: c[0])
def test_an_unknown_topic_is_a_clear_error(module_broker, command):
    done = tool(*command, "--bootstrap", module_broker.address)
    assert done.returncode == 1
    assert done.stderr.decode().startswith("error: ")
    assert "unknown topic 'no-such-topic'" in done.stderr.decode()


@pytest.mark.parametrize("command", [["topics", "--list"], ["consume", "--topic", "t"],
                                     ["offsets", "--topic", "t"], ["produce", "--topic", "t"]],
                         ids=lambda c: c[0])
@pytest.mark.slow
def test_an_unreachable_broker_is_a_clear_error(command):
    address = f"127.0.0.1:{unused_port()}"
    done = tool(*command, "--bootstrap", address, stdin=b"a line\n")
    assert done.returncode == 1
    last = done.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("error: ")
    assert f"cannot connect to broker {address}" in last


def test_produce_to_an_unreachable_broker_gives_up_at_once_in_one_line():
    address = f"127.0.0.1:{unused_port()}"
    started = time.monotonic()
    done = tool("produce", "--bootstrap", address, "--topic", "t", stdin=b"a line\n")
    took = time.monotonic() - started
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == \
        [f"error: cannot connect to broker {address}: Connection refused"]
    assert took < PRODUCE_ASK_TIMEOUT_S, took        # not the producer's ~13 s of retries


@pytest.mark.parametrize("args, says", [
    (["--fail-on", "STOP"], "error: --fail-on goes with --status"),
    (["--status", "g", "--fail-on", "BAD"], "invalid choice: 'BAD'")], ids=["alone", "bad"])
def test_groups_fail_on_is_checked_before_zookeeper_is_asked(args, says):
    done = tool("groups", "--cluster", f"dc=127.0.0.1:{unused_port()}/dc", *args)
    assert done.returncode == 2
    assert says in done.stderr.decode().strip().splitlines()[-1]
