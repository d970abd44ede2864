"""python -m broker.tools: console tools for Samsa, as Kafka users expect them.

    produce   lines from stdin become messages (optionally "key<sep>value")
    consume   print messages of a partition (or all partitions of a topic)
    topics    create / list / describe / delete topics
    offsets   earliest / latest / before-a-time offsets of a partition
    groups    consumer groups: list, describe (lag), status (Burrow's rules), reset offsets
    reassign  move replicas of replicated partitions (a plan, or --drain-broker N)
    elect-leaders  move the lead of replicated partitions back to their preferred replicas
    users     SCRAM users in ZooKeeper: add (the password from stdin or a file), remove, list
    acls      access control entries in ZooKeeper: add, remove, list
    zookeeper-acls  secure an open cluster's ZooKeeper records in place (a migration)

Every tool but groups, reassign, elect-leaders, users, acls and zookeeper-acls takes
--bootstrap HOST:PORT (default 127.0.0.1:9092, or $SAMSA_BOOTSTRAP); those
take --cluster NAME=ZOOKEEPER (or --zookeeper).
Exit status: 0 on success, 1 on a broker or ZooKeeper error (unreachable
too), 2 on bad usage, 3 when ``groups --status --fail-on LEVEL`` finds a group
at LEVEL or worse, or ``reassign --verify`` finds reassignments still running
(``EXIT_STATUS``, in every tool's --help).
"""
from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
import textwrap

from broker.client.admin import AdminClient
from broker.client.authentication import ClientSecurity
from broker.client.connection import BrokerConnectionError
from broker.client.consumer import Consumer, ConsumerConfig
from broker.lag.evaluator import Status
from broker.lag.group_lag import AdminPool, partition_lags
from broker.client.producer import Producer, ProducerConfig
from broker.coordination.named_cluster import (add_cluster_option, cluster_from,
                                               zookeeper_identity, zookeeper_tls)
from broker.protocol import api, scram
from broker.protocol.errors import ErrorCode, SamsaError
from broker.security.acl import Operation
from broker.service_kit import cli, settings
from broker.service_kit.settings import ConfigError

#: what each exit status means, for every tool (shown in each --help)
EXIT_STATUS = cli.exit_status(
    (0, "done"),
    (1, "the broker or ZooKeeper refused or could not be reached (one line on stderr, "
        "\"error: ...\"); reassign --verify: a reassignment failed; elect-leaders: a "
        "partition's lead could not be moved; users remove: no such user"),
    (2, "bad usage: an unknown option, a missing argument, a malformed line or value, a "
        "plan that cannot be carried out"),
    (3, "groups --status --fail-on LEVEL: a group's status is LEVEL or worse "
        "(OK < WARN < STALL < STOP < REWIND), the report printed all the same; reassign "
        "--verify: reassignments are still running"))
#: the levels of groups --status --fail-on: Burrow's, but OK, by severity
FAIL_LEVELS = tuple(s.name for s in sorted(Status) if s > Status.OK)
EXIT_GROUP_STATUS = 3
EXIT_STILL_RUNNING = 3
#: the operations an ACL entry names (acls --operation)
OPERATIONS = tuple(o.value for o in Operation)
#: how long the produce tool waits for the broker's first answer before it gives up
PRODUCE_ASK_TIMEOUT_S = 5.0

DEFAULT_BOOTSTRAP = os.environ.get("SAMSA_BOOTSTRAP", "127.0.0.1:9092")


def _add_bootstrap(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", "-b", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker or load balancer address (default {DEFAULT_BOOTSTRAP}, "
                        "or $SAMSA_BOOTSTRAP)")
    _add_client_config(p)


def _add_client_config(p: argparse.ArgumentParser) -> None:
    p.add_argument("--client-config", metavar="FILE",
                   default=os.environ.get("SAMSA_CLIENT_CONFIG", ""),
                   help="a TOML file of the client's security settings (tls, tls_ca_file, "
                        "tls_cert_file, tls_key_file, tls_verify_hostname, sasl_username, "
                        "sasl_password_file; docs/security.md), as Kafka's --command-config; "
                        "default $SAMSA_CLIENT_CONFIG")


def _add_zookeeper_cluster(p: argparse.ArgumentParser) -> None:
    """The cluster a ZooKeeper tool works on, and how long it waits for it."""
    add_cluster_option(p, "the cluster: NAME=ZOOKEEPER, or its ZooKeeper connect string with "
                          "the chroot", zookeeper_flags=("--zookeeper", "-z"))
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for ZooKeeper (default 10)")


def _security(args: argparse.Namespace) -> ClientSecurity:
    """The settings of --client-config (none without); ConfigError when the
    file is unusable."""
    path = getattr(args, "client_config", "")
    security = settings.load(ClientSecurity, path) if path else ClientSecurity()
    try:
        security.admin_options()          # the files it names, read now: one clear error
    except (ValueError, OSError) as exc:
        raise ConfigError(f"--client-config {path}: {exc}") from None
    return security


def _admin(args: argparse.Namespace, *a, **kw) -> AdminClient:
    """An AdminClient of --bootstrap with --client-config's security."""
    return AdminClient(args.bootstrap, *a, **kw, **_security(args).admin_options())


def _parse_time(text: str) -> int:
    """'latest', 'earliest', epoch milliseconds, or an ISO time (UTC if no zone)."""
    if text == "latest":
        return api.LATEST
    if text == "earliest":
        return api.EARLIEST
    if text.isdigit():
        return int(text)
    from datetime import datetime, timezone
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not 'latest', 'earliest', epoch ms or an ISO time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


# ------------------------------------------------------------------ produce

def cmd_produce(args: argparse.Namespace) -> int:
    # Ask the broker once (a metadata round trip, so a load balancer with no
    # broker behind it counts as unreachable too) before reading stdin: one
    # clear error now, not the producer's retries, a line each, for ~13 s.
    with _admin(args, "samsa-console-producer",
                request_timeout=PRODUCE_ASK_TIMEOUT_S) as admin:
        admin.metadata([args.topic])
    cfg = ProducerConfig(bootstrap=args.bootstrap, acks=args.acks, batch_size=args.batch_size,
                         linger_ms=args.linger_ms, compression=args.compression,
                         client_id="samsa-console-producer", **_security(args).settings())
    producer = Producer(cfg)
    sep = args.key_separator.encode() if args.key_separator else None
    count = 0
    futures = []
    try:
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key = None
            if sep is not None:
                key, found, value = line.partition(sep)
                if not found:
                    print(f"error: line {count + 1} has no key separator {args.key_separator!r}",
                          file=sys.stderr)
                    return 2
            else:
                value = line
            fut = producer.send(args.topic, value, key=key, partition=args.partition)
            if not futures or futures[-1] is not fut:
                futures.append(fut)
            count += 1
        producer.flush()
        errors = [f.exception() for f in futures if f.exception() is not None]
    finally:
        producer.close()
    if errors:
        print(f"error: {len(errors)} batches failed, first: {errors[0]}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(f"produced {count} messages to {args.topic} (acks={args.acks})", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ consume

def cmd_consume(args: argparse.Namespace) -> int:
    admin = _admin(args)
    try:
        if args.partition is not None:
            partitions = [args.partition]
        else:
            n = admin.partition_count(args.topic)
            if n is None:
                print(f"error: unknown topic {args.topic!r}", file=sys.stderr)
                return 1
            partitions = list(range(n))
    finally:
        admin.close()
    consumer = Consumer(ConsumerConfig(bootstrap=args.bootstrap,
                                       client_id="samsa-console-consumer",
                                       fetch_max_bytes=args.fetch_bytes,
                                       on_corrupt=args.on_corrupt,
                                       **_security(args).settings()))
    start: str | int = "earliest" if args.from_beginning else "latest"
    if args.offset is not None:
        if len(partitions) != 1:
            print("error: --offset needs --partition", file=sys.stderr)
            return 2
        start = args.offset
    tps = [(args.topic, p) for p in partitions]
    consumer.assign(tps, start=start)
    if args.from_time is not None:
        for tp in tps:
            consumer.seek_to_time(tp, args.from_time)
    out = sys.stdout.buffer
    count = 0
    try:
        for m in consumer.messages(timeout_ms=args.timeout_ms):
            if args.json:
                out.write(_message_json(args.topic, m) + b"\n")
                count += 1
                if args.max_messages is not None and count >= args.max_messages:
                    break
                continue
            parts = []
            if args.print_offsets:
                parts.append(f"{m.partition}:{m.offset}".encode())
            if args.print_timestamps:
                parts.append(str(m.timestamp).encode())
            if args.print_keys:
                parts.append(m.key if m.key is not None else b"null")
            parts.append(m.value)
            out.write(b"\t".join(parts) + b"\n")
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
    except KeyboardInterrupt:
        pass
    finally:
        out.flush()
        consumer.close()
    if not args.quiet:
        skipped = (f"; skipped {consumer.corrupt_skips} corrupt ranges "
                   f"({consumer.corrupt_skipped_bytes} bytes)" if consumer.corrupt_skips else "")
        resets = (f"; {consumer.offset_resets} offset resets" if consumer.offset_resets else "")
        print(f"consumed {count} messages{skipped}{resets}", file=sys.stderr)
    return 0


def _message_json(topic: str, m) -> bytes:
    """One message as a JSON line: key and value as text when they are UTF-8,
    else base64, said by ``key_encoding`` / ``value_encoding``."""
    key, key_encoding = _text_or_base64(m.key)
    value, value_encoding = _text_or_base64(m.value)
    return json.dumps({"topic": topic, "partition": m.partition, "offset": m.offset,
                       "next_offset": m.next_offset, "timestamp": m.timestamp,
                       "key": key, "key_encoding": key_encoding,
                       "value": value, "value_encoding": value_encoding}).encode()


def _text_or_base64(data: bytes | None) -> tuple[str | None, str | None]:
    if data is None:
        return None, None
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), "base64"


# ------------------------------------------------------------------ topics

def cmd_topics(args: argparse.Namespace) -> int:
    if args.create is not None and not args.create:
        print("error: --create needs a topic name", file=sys.stderr)
        return 2
    named = cluster_from(args)
    if args.under_replicated or args.unavailable:
        if named is None:
            print("error: --under-replicated and --unavailable need the cluster: --cluster "
                  "NAME=ZOOKEEPER (or --zookeeper)", file=sys.stderr)
            return 2
        return _replica_report(named.zookeeper, args, None)
    if args.describe is not None and named is not None:
        return _replica_report(named.zookeeper, args, [args.describe] if args.describe else None)
    with _admin(args) as admin:
        if args.create:
            config = {}
            for item in args.config:
                k, sep, v = item.partition("=")
                if not sep:
                    print(f"error: --config wants KEY=VALUE, got {item!r}", file=sys.stderr)
                    return 2
                config[k] = v
            admin.create_topic(args.create, args.partitions, config)
            print(f"created topic {args.create} with {args.partitions} partitions")
        elif args.delete:
            admin.delete_topic(args.delete)
            print(f"deleted topic {args.delete}")
        elif args.describe is not None:
            meta = admin.metadata([args.describe] if args.describe else [])
            described = []
            for t in meta.topics:
                if t.error:
                    print(f"error: {t.message}", file=sys.stderr)
                    return 1
                if args.json:
                    described.append({"topic": t.name, "config": dict(t.config), "partitions": [
                        {"partition": p.partition, "earliest": p.earliest, "latest": p.latest,
                         "size_bytes": p.size_bytes, "segments": p.segments}
                        for p in t.partitions]})
                    continue
                conf = ",".join(f"{k}={v}" for k, v in t.config) or "-"
                print(f"Topic: {t.name}\tPartitions: {len(t.partitions)}\tConfig: {conf}")
                for p in t.partitions:
                    print(f"\tPartition: {p.partition}\tEarliest: {p.earliest}\t"
                          f"Latest: {p.latest}\tSize: {p.size_bytes}\tSegments: {p.segments}")
            if args.json:
                print(json.dumps({"topics": described}, indent=1))
        else:
            for name in admin.list_topics():
                print(name)
    return 0


def _replica_report(zookeeper: str, args: argparse.Namespace,
                    topics: list[str] | None) -> int:
    """Replicated partitions from ZooKeeper: all (--describe) or the under-
    replicated or unavailable ones, as Kafka's topics tool prints them."""
    from broker.coordination import replica_admin
    from broker.coordination.zk import make_client, start_client

    client = make_client(zookeeper, identity=zookeeper_identity(args),
                         tls=zookeeper_tls(args))
    start_client(client, zookeeper, timeout=args.timeout, what="topics tool")
    try:
        if topics is not None and not replica_admin.describe(client, topics):
            print(f"error: no replicated topic {topics[0]!r} in {zookeeper} (an unreplicated "
                  f"topic is described by its brokers: --describe without --cluster)",
                  file=sys.stderr)
            return 1
        rows = replica_admin.describe(client, topics)
    finally:
        client.stop()
        client.close()
    if args.under_replicated:
        rows = [r for r in rows if r.under_replicated]
    if args.unavailable:
        rows = [r for r in rows if r.unavailable]
    if args.json:
        print(json.dumps({"partitions": [r.to_json() for r in rows]}, indent=1))
    else:
        for r in rows:
            print(r.line())
    return 0


# ------------------------------------------------------------------ reassign, elect-leaders

def _zookeeper_of(args: argparse.Namespace, tool: str) -> str | None:
    named = cluster_from(args)
    if named is None:
        print(f"error: {tool} needs the cluster: --cluster NAME=ZOOKEEPER (or --zookeeper)",
              file=sys.stderr)
        return None
    return named.zookeeper


def _zk_tool(zookeeper: str, args: argparse.Namespace, what: str, body) -> int:
    """Run ``body(client)`` with a started ZooKeeper client: its exit status;
    a bad plan or request (PlanError) is bad input (2), ZooKeeper failing 1."""
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    from broker.coordination.reassign import PlanError
    from broker.coordination.zk import make_client, start_client

    client = make_client(zookeeper, identity=zookeeper_identity(args),
                         tls=zookeeper_tls(args))
    start_client(client, zookeeper, timeout=args.timeout, what=what)
    try:
        return body(client)
    except PlanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (KazooException, KazooTimeoutError) as exc:
        print(f"error: ZooKeeper at {zookeeper}: {type(exc).__name__} {exc}", file=sys.stderr)
        return 1
    finally:
        client.stop()
        client.close()


def cmd_reassign(args: argparse.Namespace) -> int:
    """Move replicas: print a plan (default), --execute it, or --verify it
    (docs/replication.md, "Moving replicas and preferred leaders")."""
    from broker.coordination import reassign

    if args.plan is None and args.drain_broker is None and not args.verify:
        print("error: reassign needs --plan FILE or --drain-broker N (or --verify alone, for "
              "every reassignment running)", file=sys.stderr)
        return 2
    if args.wait is not None and not (args.execute or args.verify):
        print("error: --wait goes with --execute or --verify", file=sys.stderr)
        return 2
    zookeeper = _zookeeper_of(args, "reassign")
    if zookeeper is None:
        return 2
    text = None
    if args.plan is not None:
        try:
            if args.plan == "-":
                text = sys.stdin.read()
            else:
                with open(args.plan) as f:
                    text = f.read()
        except OSError as exc:
            print(f"error: cannot read the plan: {exc}", file=sys.stderr)
            return 2

    def body(client) -> int:
        if text is not None:
            moves = reassign.parse_plan(text)
        elif args.drain_broker is not None and not args.verify:
            moves = reassign.drain_plan(client, args.drain_broker)
        else:
            moves = None              # --verify of a drain: what runs, and what is left
        if args.verify:
            return _verify(client, reassign, moves, args)
        if not moves:
            print(f"broker {args.drain_broker} holds no replica: nothing to move")
            return 0
        reassign.validate(client, moves)
        current = [reassign.Move(m.topic, m.partition,
                                 reassign.read_assignment(client, m.topic)
                                 .partitions[m.partition]) for m in moves]
        if args.json:
            print(json.dumps({"current": json.loads(reassign.plan_json(current)),
                              "proposed": json.loads(reassign.plan_json(moves))}, indent=1))
        else:
            print("Current replicas (save this to go back):")
            print(reassign.plan_json(current))
            print("Proposed replicas:")
            print(reassign.plan_json(moves))
        if not args.execute:
            if not args.json:
                print("(nothing written: --execute starts it)")
            return 0
        reassign.start(client, moves)
        if not args.json:
            print(f"started {len(moves)} reassignment(s); follow them with: python -m "
                  f"broker.tools reassign --zookeeper {zookeeper} --verify")
        if args.wait is None:
            return 0
        return _verify(client, reassign, moves, args)      # waits up to --wait

    return _zk_tool(zookeeper, args, "reassign tool", body)


def _verify(client, reassign, moves, args: argparse.Namespace) -> int:
    """Print where each reassignment stands: 0 all done, 3 some still
    running, 1 one failed. Without a plan: every one running; with
    --drain-broker: also the replicas still on that broker."""
    import time

    deadline = time.monotonic() + (args.wait or 0)
    while True:
        rows = reassign.progress(client, moves if moves is not None
                                 else reassign.running(client))
        left = []
        if args.drain_broker is not None:
            left = [f"{t}/{p}" for t, a in reassign.replicated_assignments(client)
                    for p, r in enumerate(a.partitions) if args.drain_broker in r]
        busy = any(r.status == "running" for r in rows) or left
        if not busy or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    failed = any(r.status == "failed" for r in rows)
    if args.json:
        print(json.dumps({"reassignments": [r.to_json() for r in rows],
                          "still_on_broker": left}, indent=1))
    else:
        for r in rows:
            print(r.line())
        if args.drain_broker is not None:
            print(f"broker {args.drain_broker} holds no replica any more" if not left else
                  f"broker {args.drain_broker} still holds replicas of {', '.join(left)}")
        if not rows and moves is None:
            print("no reassignment is running")
    return 1 if failed else EXIT_STILL_RUNNING if busy else 0


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    """Ask the controller to hand the lead of partitions to their preferred
    replicas; wait for it and print what became of each."""
    import time

    from broker.coordination import reassign
    from broker.coordination.replica_state import NO_LEADER

    if args.partition is not None and args.topic is None:
        print("error: --partition goes with --topic", file=sys.stderr)
        return 2
    zookeeper = _zookeeper_of(args, "elect-leaders")
    if zookeeper is None:
        return 2

    def body(client) -> int:
        if args.topic is not None:
            assignment = reassign.read_assignment(client, args.topic)
            if assignment is None:
                raise reassign.PlanError(f"{args.topic!r} is not a replicated topic")
            count = len(assignment.partitions)
            if args.partition is not None and not 0 <= args.partition < count:
                raise reassign.PlanError(f"{args.topic} has {count} partitions "
                                         f"(0..{count - 1}), not {args.partition}")
            topics = [(args.topic, assignment)]
        else:
            topics = reassign.replicated_assignments(client)
        chosen = [(t, p, a.partitions[p]) for t, a in topics for p in range(len(a.partitions))
                  if args.partition is None or p == args.partition]
        before = {(t, p): reassign.read_state(client, t, p) for t, p, _r in chosen}
        asked = [(t, p) for t, p, r in chosen if before[(t, p)].leader != r[0]]
        rows, moved_all = [], True
        if asked:
            reassign.request_preferred(client, asked)
            deadline = time.monotonic() + args.wait
            while reassign.preferred_pending(client, asked):
                if time.monotonic() >= deadline:
                    print(f"error: the controller did not take the requests within "
                          f"{args.wait:g} s (is a broker with ZooKeeper running?); they "
                          f"stay in ZooKeeper", file=sys.stderr)
                    return 1
                time.sleep(0.1)
        live = reassign.live_brokers(client)
        for t, p, replicas in chosen:
            old, new = before[(t, p)], reassign.read_state(client, t, p)
            preferred = replicas[0]
            row = {"topic": t, "partition": p, "preferred": preferred,
                   "leader_before": old.leader, "leader": new.leader,
                   "leader_epoch": new.leader_epoch}
            if new.leader == preferred:
                row["result"] = "already" if old.leader == preferred else "moved"
            else:
                moved_all = False
                why = ("not live" if preferred not in live else
                       "not in sync" if preferred not in new.isr else
                       "the partition has no leader" if new.leader == NO_LEADER else
                       "the controller did not move it (see its log)")
                row["result"] = f"not moved: {why}"
            rows.append(row)
        if args.json:
            print(json.dumps({"partitions": rows}, indent=1))
        else:
            for r in rows:
                name = f"{r['topic']}/{r['partition']}"
                if r["result"] == "already":
                    print(f"{name}: led by its preferred replica {r['preferred']}")
                elif r["result"] == "moved":
                    print(f"{name}: leader {r['leader_before']} -> {r['leader']} (preferred "
                          f"replica; epoch {r['leader_epoch']})")
                else:
                    print(f"{name}: leader stays {r['leader']}: preferred replica "
                          f"{r['preferred']} {r['result'].removeprefix('not moved: ')}")
        return 0 if moved_all else 1

    return _zk_tool(zookeeper, args, "elect-leaders tool", body)


# ------------------------------------------------------------------ users, acls

def _read_password(args: argparse.Namespace) -> str | None:
    """The password of ``users add``: one line of standard input (typed
    without echo when it is a terminal) or the first line of --password-file,
    its trailing newline ("\\n" or "\\r\\n") not part of it. None, said on
    stderr, when it cannot be read or is empty."""
    if args.password_stdin and sys.stdin.isatty():
        import getpass
        password = getpass.getpass(f"password of {args.name}: ")
    else:
        try:
            if args.password_stdin:
                line = sys.stdin.buffer.readline()
            else:
                with open(args.password_file, "rb") as f:
                    line = f.readline()
            if line.endswith(b"\n"):
                line = line[:-1].removesuffix(b"\r")
            password = line.decode("utf-8")
        except OSError as exc:
            print(f"error: cannot read the password: {exc}", file=sys.stderr)
            return None
        except UnicodeDecodeError:
            print("error: the password is not UTF-8", file=sys.stderr)
            return None
    if not password:
        print("error: the password is empty", file=sys.stderr)
        return None
    return password


def _name_given_as_needed(args: argparse.Namespace, tool: str) -> bool:
    """add and remove name a user, list none; False (said on stderr) else."""
    if args.action != "list" and args.name is None:
        print(f"error: {tool} {args.action} needs the user's NAME", file=sys.stderr)
        return False
    if args.action == "list" and args.name is not None:
        print(f"error: {tool} list takes no NAME", file=sys.stderr)
        return False
    return True


def cmd_users(args: argparse.Namespace) -> int:
    """users add|remove|list: the users' SCRAM credentials in ZooKeeper."""
    from broker.security import store

    if not _name_given_as_needed(args, "users"):
        return 2
    password_given = args.password_stdin or args.password_file is not None
    if args.action != "add" and (password_given or args.iterations is not None):
        print("error: --password-stdin, --password-file and --iterations go with users add",
              file=sys.stderr)
        return 2
    if args.action == "add" and not password_given:
        print("error: users add needs the password: --password-stdin or --password-file "
              "FILE (never on the command line, where ps shows it)", file=sys.stderr)
        return 2
    iterations = scram.DEFAULT_ITERATIONS if args.iterations is None else args.iterations
    if not scram.MIN_ITERATIONS <= iterations <= scram.MAX_ITERATIONS:
        print(f"error: --iterations is {scram.MIN_ITERATIONS} to {scram.MAX_ITERATIONS}, "
              f"not {iterations}", file=sys.stderr)
        return 2
    if args.name is not None:
        try:
            store.check_user_name(args.name)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    zookeeper = _zookeeper_of(args, "users")
    if zookeeper is None:
        return 2
    credential = None
    if args.action == "add":
        password = _read_password(args)
        if password is None:
            return 2
        credential = scram.ScramCredential.from_password(password, iterations=iterations)

    def body(client) -> int:
        if args.action == "add":
            created = store.set_user(client, args.name, credential)
            print(f"user {args.name} {'created' if created else 'replaced'}")
        elif args.action == "remove":
            if not store.remove_user(client, args.name):
                print(f"error: no user {args.name!r} in {zookeeper}", file=sys.stderr)
                return 1
            print(f"user {args.name} removed")
        else:
            for user in store.list_users(client):
                print(user)
        return 0

    return _zk_tool(zookeeper, args, "users tool", body)


def cmd_http_users(args: argparse.Namespace) -> int:
    """http-users add|remove|list: the users file of an HTTP service."""
    from broker.service_kit import http_security as hs

    if not _name_given_as_needed(args, "http-users"):
        return 2
    ways = sum((args.password_stdin, args.password_file is not None, args.certificate))
    if args.action != "add" and (ways or args.role or args.iterations is not None):
        print("error: --role, --password-stdin, --password-file, --certificate and "
              "--iterations go with http-users add", file=sys.stderr)
        return 2
    if args.action == "add" and (ways != 1 or not args.role):
        print("error: http-users add needs --role and one of --password-stdin, "
              "--password-file FILE (never the password on the command line, where ps shows "
              "it) or --certificate", file=sys.stderr)
        return 2
    if args.action == "add" and args.certificate and args.iterations is not None:
        print("error: --iterations goes with a password", file=sys.stderr)
        return 2
    if args.name is not None and (not args.name.strip() or args.name != args.name.strip()
                                  or args.name.startswith("#")
                                  or any(c.isspace() for c in args.name)
                                  and not args.certificate):
        print(f"error: {args.name!r} is not a user's name (no spaces around it or in a "
              f"password user's, no '#' first: the file's comments begin so)", file=sys.stderr)
        return 2
    try:
        users = hs.read_users_file(args.file) if os.path.exists(args.file) else {}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.action == "list":
        for user in sorted(users.values(), key=lambda u: u.name):
            print(f"{user.name} {user.role} "
                  f"{'certificate' if user.secret == hs.CERTIFICATE else 'password'}")
        return 0
    if args.action == "remove":
        if users.pop(args.name, None) is None:
            print(f"error: no user {args.name!r} in {args.file}", file=sys.stderr)
            return 1
        hs.write_users_file(args.file, users.values())
        print(f"user {args.name} removed")
        return 0
    if args.certificate:
        secret = hs.CERTIFICATE
    else:
        password = _read_password(args)
        if password is None:
            return 2
        try:
            secret = hs.hash_password(password, args.iterations or hs.DEFAULT_ITERATIONS)
        except ValueError as exc:
            print(f"error: --iterations: {exc}", file=sys.stderr)
            return 2
    known = args.name in users
    users[args.name] = hs.HttpUser(args.name, args.role, secret)
    try:
        hs.parse_users(hs.format_users(users.values()))     # the line it makes is one it reads
    except ValueError as exc:
        print(f"error: {str(exc).split(': ', 1)[-1]}", file=sys.stderr)
        return 2
    hs.write_users_file(args.file, users.values())
    print(f"user {args.name} {'replaced' if known else 'created'} ({args.role})")
    return 0


def _operation(text: str) -> str:
    """An --operation as the entries spell it: "READ" and "cluster-action" are taken."""
    return text.strip().lower().replace("-", "_")


def _acl_line(entry) -> str:
    """"User:alice allow read topic literal:events"."""
    return (f"{entry.principal} {entry.permission.value} {entry.operation.value} "
            f"{entry.resource_type.value} {entry.pattern_type.value}:{entry.name}")


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


def _acl_key(acl) -> list[tuple[str, str, int]]:
    """An ACL compared as ZooKeeper means it: the set of (scheme, id, perms)."""
    return sorted((a.id.scheme, a.id.id, a.perms) for a in acl)


#: the subtrees zookeeper-acls secures (the cluster's and its groups' records)
SECURED_SUBTREES = ("brokers", "replication", "security", "consumers")


def cmd_zookeeper_acls(args: argparse.Namespace) -> int:
    """zookeeper-acls: give every node of the cluster the ACL of zk_acls's
    policy, as the cluster's identity (--zookeeper-auth-file)."""
    from kazoo.exceptions import NoNodeError

    from broker.coordination import paths
    from broker.coordination.zk_acls import Identity, acl_for, describe

    zookeeper = _zookeeper_of(args, "zookeeper-acls")
    if zookeeper is None:
        return 2
    from broker.coordination.zk import split_connect_string
    if not split_connect_string(zookeeper)[1]:
        print(f"error: zookeeper-acls works on one cluster's chroot, and {zookeeper} names "
              f"none: it would lock the whole ensemble's root", file=sys.stderr)
        return 2
    if not args.zookeeper_auth_file:
        print("error: zookeeper-acls needs the cluster's identity: --zookeeper-auth-file FILE "
              "(user:password)", file=sys.stderr)
        return 2
    #: the other writers' subtrees, secured for the identity given
    owners: dict[str, Identity] = {}
    for subtree, path in (("schemas", args.schemas), ("mirrored", args.mirrored)):
        if path:
            try:
                owners[subtree] = Identity.from_file(path)
            except ValueError as exc:
                print(f"error: --{subtree}: {exc}", file=sys.stderr)
                return 2
    groups: dict[str, Identity] = {}
    for item in args.group or ():
        group, sep, path = item.partition("=")
        if not sep or not group or not path:
            print(f"error: --group takes GROUP=FILE, not {item!r}", file=sys.stderr)
            return 2
        try:
            groups[group] = Identity.from_file(path)
        except ValueError as exc:
            print(f"error: --group {group}: {exc}", file=sys.stderr)
            return 2

    def wanted(client, path: str):
        """The ACL ``path`` should have; None: leave it as it is."""
        parts = path.strip("/").split("/")
        if path != "/" and parts[0] in owners:
            return owners[parts[0]].default_acl()
        if path == "/" or parts[0] not in SECURED_SUBTREES:
            # the chroot itself (open: every writer creates its subtree
            # there) and the records of others without an identity given
            return None
        if parts[0] == "consumers" and len(parts) > 1:
            identity = groups.get(parts[1])
            if identity is None:
                return None
            return identity.default_acl()
        return acl_for(client, path)

    def body(client) -> int:
        # Holding the owners' identities too, the tool may read the digests
        # of their nodes' ACLs (ZooKeeper shows them to a node's admins
        # alone, else "user:x"), so it sees what already matches, and may
        # set the ACL of a node one of them made open.
        for identity in (*owners.values(), *groups.values()):
            for scheme, credential in identity.auth_data():
                client.add_auth(scheme, credential)
        if not args.dry_run:
            client.ensure_path(paths.CONSUMERS, acl=acl_for(client, paths.CONSUMERS))
        changed, left, others = 0, set(), set()
        todo = ["/"]
        while todo:
            path = todo.pop()
            try:
                children = client.get_children(path)
                current, stat = client.get_acls(path)
            except NoNodeError:
                continue                      # gone meanwhile (an ephemeral node)
            todo += [f"{path.rstrip('/')}/{c}" for c in children]
            acl = wanted(client, path)
            if acl is None:
                if path.startswith(paths.CONSUMERS + "/"):
                    left.add(path.split("/")[2])
                elif path.count("/") == 1 and path != "/":
                    others.add(path)
                continue
            if _acl_key(acl) == _acl_key(current):
                continue
            changed += 1
            if args.dry_run:
                print(f"would set {path}: {describe(current)} -> {describe(acl)}")
                continue
            try:
                client.set_acls(path, acl, version=stat.aversion)
            except NoNodeError:
                continue
            print(f"set {path}: {describe(acl)}")
        verb = "would be secured" if args.dry_run else "secured"
        print(f"{changed} nodes {verb}" + (
            f"; left as they were (no --group identity): the records of group(s) "
            f"{', '.join(sorted(left))}" if left else "") + (
            f"; not the cluster's and no identity given, left as they were: "
            f"{', '.join(sorted(others))}"
            if others else ""))
        return 0
    return _zk_tool(zookeeper, args, "zookeeper-acls tool", body)


def cmd_acls(args: argparse.Namespace) -> int:
    """acls add|remove|list: the access control entries in ZooKeeper."""
    from broker.security import store
    from broker.security.acl import (AclEntry, PatternType, Permission, ResourceType,
                                     validate_principal)

    resource = ((ResourceType.TOPIC, args.topic) if args.topic is not None else
                (ResourceType.GROUP, args.group) if args.group is not None else
                (ResourceType.CLUSTER, store.CLUSTER_RESOURCE) if args.cluster_resource else None)
    if args.action == "list":
        if args.operation or args.deny or args.prefixed:
            print("error: --operation, --deny and --prefixed go with acls add or remove",
                  file=sys.stderr)
            return 2
    else:
        missing = [what for what, absent in (
            ("--principal User:NAME", args.principal is None),
            ("a resource (--topic NAME, --group NAME or --cluster-resource)", resource is None),
            (f"--operation OP ({', '.join(OPERATIONS)})", not args.operation)) if absent]
        if missing:
            print(f"error: acls {args.action} needs {' and '.join(missing)}", file=sys.stderr)
            return 2
        if args.prefixed and resource[0] is ResourceType.CLUSTER:
            print("error: --prefixed goes with --topic or --group", file=sys.stderr)
            return 2
    if args.json and args.action != "list":
        print("error: --json goes with acls list", file=sys.stderr)
        return 2
    entries = []
    try:
        if args.principal is not None:
            validate_principal(args.principal)
        if resource is not None:
            store.check_resource_name(resource[1])
        if args.action != "list":
            permission = Permission.DENY if args.deny else Permission.ALLOW
            pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
            entries = [AclEntry(args.principal, permission, operation, resource[0], resource[1],
                                pattern) for operation in dict.fromkeys(args.operation)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    zookeeper = _zookeeper_of(args, "acls")
    if zookeeper is None:
        return 2

    def body(client) -> int:
        if args.action == "add":
            added = store.add_acls(client, entries)
            print(f"{_entries(added)} added" + (f", {_entries(len(entries) - added)} already "
                                                 f"there" if added < len(entries) else ""))
        elif args.action == "remove":
            removed = store.remove_acls(client, entries)
            print(f"{_entries(removed)} removed" + (f", {_entries(len(entries) - removed)} "
                                                     f"not there" if removed < len(entries)
                                                     else ""))
        else:
            found = store.list_acls(client, args.principal,
                                    resource[0] if resource else None,
                                    resource[1] if resource else None)
            if args.json:
                print(json.dumps({"acls": [e.to_json() for e in found]}, indent=1))
            else:
                for entry in found:
                    print(_acl_line(entry))
        return 0

    return _zk_tool(zookeeper, args, "acls tool", body)


# ------------------------------------------------------------------ offsets

def cmd_offsets(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        partitions = [args.partition] if args.partition is not None else \
            range(admin.partition_count(args.topic) or 0)
        if not partitions:
            print(f"error: unknown topic {args.topic!r}", file=sys.stderr)
            return 1
        found = []
        for p in partitions:
            offsets = admin.offsets(args.topic, p, args.time, args.max_offsets)
            if args.json:
                found.append({"partition": p, "offsets": offsets})
            else:
                print(f"{args.topic}:{p}:{','.join(str(o) for o in offsets)}")
        if args.json:
            print(json.dumps({"topic": args.topic, "partitions": found}, indent=1))
    return 0


# ------------------------------------------------------------------ groups

def cmd_groups(args: argparse.Namespace) -> int:
    from kazoo.exceptions import NoNodeError

    from broker.coordination import offsets as zk_offsets
    from broker.coordination import paths
    from broker.coordination.cluster import ClusterView
    from broker.coordination.ownership import Subscription
    from broker.coordination.zk import make_client, start_client

    if args.fail_on and args.status is None:
        print("error: --fail-on goes with --status", file=sys.stderr)
        return 2
    named = cluster_from(args)
    if named is None:
        print("error: groups needs the cluster: --cluster NAME=ZOOKEEPER (or --zookeeper)",
              file=sys.stderr)
        return 2
    args.zookeeper, args.cluster_name = named.zookeeper, named.name
    security = _security(args)          # the brokers' listeners: --client-config
    options = security.admin_options()
    client = make_client(args.zookeeper, identity=zookeeper_identity(args),
                         tls=zookeeper_tls(args))
    start_client(client, args.zookeeper, timeout=args.timeout, what="groups tool")
    try:
        if args.status is not None:
            return _group_status(client, args, options)
        if args.list or not (args.describe or args.reset_offsets):
            try:
                for group in sorted(client.get_children(paths.CONSUMERS)):
                    print(group)
            except NoNodeError:
                pass
            return 0
        group = args.describe or args.reset_offsets
        if not client.exists(paths.group_path(group)):
            print(f"error: no group {group!r} in {args.zookeeper}", file=sys.stderr)
            return 1
        cluster = ClusterView(client, tls=security.tls)
        try:
            members = client.get_children(paths.consumer_ids_path(group))
        except NoNodeError:
            members = []
        committed = zk_offsets.read_offsets(client, group)
        topics = set(t for t, _ in committed)
        for cid in members:
            try:
                data, _ = client.get(paths.consumer_id_path(group, cid))
                sub = Subscription.from_json(data)
                topics |= {t for t in cluster.topics() if sub.matches(t)}
            except (NoNodeError, ValueError):
                continue
        if args.topic:
            topics = {args.topic}
        if args.reset_offsets:
            if members:
                print(f"error: group {group!r} has {len(members)} running consumers "
                      f"({', '.join(sorted(members))}): stop them before resetting offsets",
                      file=sys.stderr)
                return 1
            wanted = {}
            for topic in sorted(topics):
                for bp in cluster.partitions(topic):
                    wanted[(topic, bp)] = _offset_of(cluster, topic, bp, args.to, options)
            zk_offsets.commit_offsets(client, group, wanted)
            for (topic, bp), offset in sorted(wanted.items()):
                print(f"{topic}\t{bp}\t{offset}")
            print(f"reset {len(wanted)} offsets of group {group}", file=sys.stderr)
            return 0
        if not args.json:
            print("TOPIC\tPARTITION\tOWNER\tCOMMITTED\tLOG-END\tLAG-BYTES")
        described = []
        wanted = [(topic, bp) for topic in sorted(topics) for bp in cluster.partitions(topic)]
        with AdminPool("samsa-groups-tool", **options) as pool:
            lags = partition_lags(cluster, wanted, committed, pool, from_earliest=False)
        for row in lags:
            try:
                owner = client.get(paths.owners_path(group, row.topic, row.partition))[0]
                owner = owner.decode()
            except NoNodeError:
                owner = "-"
            if row.error is not None:
                raise SamsaError(ErrorCode.UNKNOWN, row.error)
            if args.json:
                described.append({"topic": row.topic, "broker_partition": row.partition,
                                  "owner": None if owner == "-" else owner,
                                  "committed": row.position, "log_end": row.log_end,
                                  "lag_bytes": row.lag})
                continue
            print(f"{row.topic}\t{row.partition}\t{owner}\t"
                  f"{row.position if row.position is not None else '-'}\t{row.log_end}\t"
                  f"{row.lag if row.lag is not None else '-'}")
        if args.json:
            print(json.dumps({"group": group, "partitions": described}, indent=1))
        return 0
    finally:
        client.stop()
        client.close()


def _group_status(client, args: argparse.Namespace, options: dict) -> int:
    """--status GROUP (or --status --all): Burrow's evaluation
    (broker/lag/evaluator.py) from --samples looks, --interval apart."""
    import time

    from broker.lag.monitor import LagMonitor
    from broker.lag.evaluator import Thresholds
    from broker.coordination import paths

    monitor = LagMonitor(client, Thresholds(stop_min_ms=int(args.stop_after * 1000)),
                         **options)
    try:
        if args.all:
            groups = monitor.groups()
        else:
            if not args.status:
                print("error: --status needs a GROUP, or --all", file=sys.stderr)
                return 2
            if not client.exists(paths.group_path(args.status)):
                print(f"error: no group {args.status!r} in {args.zookeeper}", file=sys.stderr)
                return 1
            groups = [args.status]
        statuses = {}
        for k in range(args.samples):
            if k:
                time.sleep(args.interval)
            statuses = monitor.evaluate(groups)
    finally:
        monitor.close()
    failed = args.fail_on is not None and any(
        s.status >= Status[args.fail_on] for s in statuses.values())
    verdict = EXIT_GROUP_STATUS if failed else 0
    if args.json:      # {group: Burrow's status object, every partition (its /lag)}
        from broker.lag import burrow
        print(json.dumps({g: burrow.consumer_status(args.cluster_name, s, show_all=True)
                          for g, s in statuses.items()}, indent=1))
        return verdict
    for g, s in statuses.items():
        behind = s.most_behind
        print(f"GROUP {g}  STATUS {s.status.name}  members {len(s.members)}  total lag "
              f"{s.total_lag_bytes:,} bytes" + (
                  f"  most behind {behind.topic}/{behind.partition} "
                  f"({behind.lag_bytes or 0:,} bytes, {_seconds(behind.lag_seconds)})"
                  if behind and behind.lag_bytes else ""))
        for error in s.errors:
            print(f"  error: {error}")
        print("TOPIC\tPARTITION\tSTATUS\tOWNER\tCOMMITTED\tLOG-END\tLAG-BYTES\tLAG-SECONDS")
        for p in s.partitions:
            owner = "-" if p.owner is None else p.owner + ("" if p.owner_alive else " (dead)")
            print(f"{p.topic}\t{p.partition}\t{p.status.name}\t{owner}\t"
                  f"{'-' if p.committed is None else p.committed}\t"
                  f"{'-' if p.log_end is None else p.log_end}\t"
                  f"{'-' if p.lag_bytes is None else p.lag_bytes}\t{_seconds(p.lag_seconds)}")
    return verdict


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _offset_of(cluster, topic: str, bp: str, time_ms: int, options: dict) -> int:
    """A partition's earliest/latest offset, or the first one at or before a time."""
    broker_id, partition = cluster.locate(topic, bp)
    address = cluster.address(broker_id) if broker_id is not None else None
    if address is None:
        raise SamsaError(ErrorCode.UNKNOWN, f"broker {broker_id} is not in the cluster"
                         if broker_id is not None else f"{topic}/{bp} has no leader now")
    with AdminClient(address, **options) as admin:
        offsets = admin.offsets(topic, partition, time_ms)
        if not offsets and time_ms >= 0:
            offsets = admin.offsets(topic, partition, api.EARLIEST)
        return offsets[0]


# ------------------------------------------------------------------ parser

def _paragraphs(*texts: str) -> str:
    """A --help description of several paragraphs (the raw formatter keeps
    them apart), each wrapped."""
    return "\n\n".join(textwrap.fill(text, 78) for text in texts)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m broker.tools",
                                     description="Samsa console tools.", epilog=EXIT_STATUS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("produce", help="send lines from stdin as messages",
                       description="Send each line of standard input as one message.")
    _add_bootstrap(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=int, default=None,
                   help="partition to write (default: by key hash, else sticky per batch)")
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value")
    p.add_argument("--acks", choices=["none", "written", "flushed", "all"], default="written",
                   help="acknowledgement mode (default written)")
    p.add_argument("--batch-size", type=int, default=200, help="messages per batch (200)")
    p.add_argument("--linger-ms", type=int, default=5, help="batch linger time (5)")
    p.add_argument("--compression", choices=["none", "gzip", "lz4", "zstd"], default="none")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser("consume", help="print messages",
                       description="Print messages, one per line. Without --max-messages or "
                                   "--timeout-ms it waits for new messages forever (Ctrl-C "
                                   "stops).")
    _add_bootstrap(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=int, default=None, help="one partition (default all)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (default: latest)")
    where.add_argument("--offset", type=int, help="start at this offset (needs --partition)")
    where.add_argument("--from-time", type=_parse_time, metavar="TIME",
                       help="start near TIME (epoch ms or ISO), never after it")
    p.add_argument("--max-messages", type=int, help="stop after this many messages")
    p.add_argument("--timeout-ms", type=int, help="stop after this long without a message")
    p.add_argument("--print-offsets", action="store_true", help="prefix partition:offset")
    p.add_argument("--print-keys", action="store_true", help="print the key before the value")
    p.add_argument("--print-timestamps", action="store_true", help="print the timestamp (ms)")
    p.add_argument("--fetch-bytes", type=int, default=300 * 1024,
                   help="bytes per partition per fetch (307200)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per message and line: topic, partition, offset, "
                        "next_offset, timestamp, key, value; key and value as text when "
                        "they are UTF-8, else base64 (key_encoding, value_encoding: utf-8 "
                        "or base64; null for no key); the --print-* options are implied")
    p.add_argument("--on-corrupt", choices=["raise", "skip"], default="raise",
                   help="corrupt data: stop with an error naming the offsets (raise, the "
                        "default; exit 1) or skip to where intact data resumes and say so "
                        "on stderr (skip)")
    p.add_argument("--quiet", "-q", action="store_true", help="no summary on stderr")
    p.set_defaults(func=cmd_consume)

    p = sub.add_parser("topics", help="create, list, describe or delete topics",
                       description="Without an action, lists the topics.")
    _add_bootstrap(p)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--create", metavar="TOPIC")
    action.add_argument("--delete", metavar="TOPIC")
    action.add_argument("--describe", metavar="TOPIC", nargs="?", const="",
                        help="partitions, offsets, sizes (all topics if none named); with "
                             "--cluster: each replicated partition's leader, replicas, "
                             "in-sync set and epoch, from ZooKeeper")
    action.add_argument("--under-replicated", action="store_true",
                        help="replicated partitions with a replica out of the in-sync set "
                             "(needs --cluster)")
    action.add_argument("--unavailable", action="store_true",
                        help="replicated partitions without a live leader (needs --cluster)")
    action.add_argument("--list", action="store_true", help="list topic names (default)")
    p.add_argument("--partitions", type=int, default=1, help="for --create (default 1)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="topic setting for --create, e.g. retention.ms=86400000 (repeatable)")
    add_cluster_option(p, "the cluster, for its replicated topics: NAME=ZOOKEEPER, or its "
                          "ZooKeeper connect string with the chroot",
                       zookeeper_flags=("--zookeeper", "-z"))
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for ZooKeeper (10)")
    p.add_argument("--json", action="store_true",
                   help="with --describe: JSON, {\"topics\": [{topic, config, partitions: "
                        "[{partition, earliest, latest, size_bytes, segments}]}]}; with "
                        "--cluster, --under-replicated or --unavailable: {\"partitions\": "
                        "[{topic, partition, replicas, leader, leader_epoch, isr, "
                        "leader_live, restarted, under_replicated, unavailable}]}")
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("offsets", help="earliest, latest or before-a-time offsets",
                       description="Print TOPIC:PARTITION:OFFSETS. --time before-a-time returns "
                                   "segment start offsets, newest first (Kafka 0.7).")
    _add_bootstrap(p)
    p.add_argument("--topic", "-t", required=True)
    p.add_argument("--partition", type=int, default=None, help="one partition (default all)")
    p.add_argument("--time", type=_parse_time, default=api.LATEST,
                   help="latest (default), earliest, epoch ms or ISO time")
    p.add_argument("--max-offsets", type=int, default=1)
    p.add_argument("--json", action="store_true",
                   help="JSON: {topic, partitions: [{partition, offsets}]}")
    p.set_defaults(func=cmd_offsets)

    p = sub.add_parser("groups", help="consumer groups: list, describe (lag), reset offsets",
                       description="Consumer groups kept in ZooKeeper. --describe prints, per "
                                   "partition, its owner, the committed offset, the log end "
                                   "offset and the lag in bytes (offsets are byte positions). "
                                   "--client-config: how to reach brokers that ask for TLS "
                                   "or SCRAM (the log ends and offsets are theirs).")
    _add_zookeeper_cluster(p)
    _add_client_config(p)
    action = p.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="list the groups (default)")
    action.add_argument("--describe", metavar="GROUP")
    action.add_argument("--status", metavar="GROUP", nargs="?", const="",
                        help="Burrow-style health of GROUP (or, with --all, of every group): "
                             "per partition, owned or not: OK, WARN (lag growing), STALL "
                             "(commits, offset not moving), STOP (no commit for longer than "
                             "--stop-after while behind), REWIND (offset went back); lag in "
                             "bytes and seconds; the group is its worst partition "
                             "(docs/lag.md)")
    action.add_argument("--reset-offsets", metavar="GROUP",
                        help="set a STOPPED group's offsets (see --to)")
    p.add_argument("--to", type=_parse_time, default=api.EARLIEST, metavar="WHERE",
                   help="for --reset-offsets: earliest (default), latest, epoch ms or ISO time")
    p.add_argument("--topic", help="only this topic")
    p.add_argument("--all", action="store_true", help="with --status: every group")
    p.add_argument("--samples", type=int, default=1,
                   help="with --status: look this many times, --interval apart; REWIND "
                        "needs two looks that saw different commits, WARN and STALL a full "
                        "window of commits (10), so a single look only tells OK and STOP "
                        "(default 1; the lag service keeps windows: python -m broker.lag)")
    p.add_argument("--interval", type=float, default=5.0,
                   help="with --samples: seconds between looks (default 5)")
    p.add_argument("--stop-after", type=float, default=10.0,
                   help="with --status: seconds without a commit, while behind, that make "
                        "a partition STOP at the least (default 10)")
    p.add_argument("--json", action="store_true",
                   help="with --status: {group: Burrow's status object} (docs/lag.md); with "
                        "--describe: {group, partitions: [{topic, broker_partition, owner, "
                        "committed, log_end, lag_bytes}]}")
    p.add_argument("--fail-on", choices=FAIL_LEVELS, metavar="LEVEL",
                   help="with --status: exit 3 when a group's status is LEVEL or worse, "
                        "for checks (" + " < ".join(FAIL_LEVELS) + "); the report is "
                        "printed all the same")
    p.set_defaults(func=cmd_groups)
    p = sub.add_parser(
        "reassign", help="move replicas of replicated partitions (drain a broker)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Move the replicas of replicated partitions, with no data lost and the "
                    "partitions served throughout: the controller adds the new replicas, "
                    "waits until they are in sync, moves the lead to one of them if needed, "
                    "then drops the old ones (which delete their copies).\n\n"
                    "A plan is JSON: {\"version\": 1, \"partitions\": [{\"topic\": \"t\", "
                    "\"partition\": 0, \"replicas\": [1, 2]}]}, the preferred leader "
                    "first.\nWithout --execute or --verify it checks the plan and prints the "
                    "current replicas (a plan to go back) and the proposed ones; nothing is "
                    "written.")
    _add_zookeeper_cluster(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--plan", metavar="FILE",
                      help="the plan's JSON file ('-': standard input)")
    what.add_argument("--drain-broker", type=int, metavar="N",
                      help="a plan that moves every replica off broker N onto the other live "
                           "brokers (across racks where they declare one, the least loaded "
                           "first), each taking N's rank in the partition's list; with "
                           "--verify: whether N still holds a replica")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--execute", action="store_true",
                        help="write the requests for the controller (refused if one of the "
                             "partitions is being reassigned already)")
    action.add_argument("--verify", action="store_true",
                        help="print where each reassignment of the plan stands (done, still "
                             "running, failed); without a plan: every one running. Exit 0 "
                             "when all are done, 3 while some run, 1 if one failed")
    p.add_argument("--wait", type=float, metavar="SECONDS",
                   help="with --execute or --verify: wait up to this long for the "
                        "reassignments to finish before printing where they stand")
    p.add_argument("--json", action="store_true",
                   help="JSON: {current, proposed} plans; with --verify {reassignments: "
                        "[{topic, partition, replicas, status, current, isr, leader}], "
                        "still_on_broker}")
    p.set_defaults(func=cmd_reassign)

    p = sub.add_parser(
        "elect-leaders", help="move the lead back to the preferred replicas",
        description="Ask the controller to make each partition's preferred replica (the first "
                    "of its replicas) its leader, where it is live and in sync (so it has "
                    "every committed message); the old leader follows it. Prints, per "
                    "partition, the move or why there was none; exit 1 if one could not "
                    "be moved.")
    _add_zookeeper_cluster(p)
    p.add_argument("--topic", "-t", help="only this replicated topic (default: all)")
    p.add_argument("--partition", type=int, help="only this partition (needs --topic)")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds to wait for the controller to act (default 30)")
    p.add_argument("--json", action="store_true",
                   help="JSON: {partitions: [{topic, partition, preferred, leader_before, "
                        "leader, leader_epoch, result}]}")
    p.set_defaults(func=cmd_elect_leaders)

    p = sub.add_parser(
        "users", help="SCRAM users in ZooKeeper: add, remove, list",
        usage="%(prog)s add NAME (--password-stdin | --password-file FILE)\n"
              "           [--iterations N] CLUSTER\n"
              "       %(prog)s remove NAME CLUSTER\n"
              "       %(prog)s list CLUSTER",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_paragraphs(
            "The users brokers authenticate with SCRAM-SHA-512 (docs/security.md), kept in "
            "ZooKeeper (/security/users): for each, a credential made from the password (a "
            "salt, an iteration count, two derived keys), never the password itself.",
            "CLUSTER is --cluster NAME=ZOOKEEPER, or --zookeeper ZOOKEEPER (the connect "
            "string with the cluster's chroot).",
            "add prints \"user NAME created\" (or \"replaced\": a new password for a known "
            "user), remove \"user NAME removed\" (exit 1 when there is no such user), list "
            "one name a line, sorted."))
    p.add_argument("action", choices=["add", "remove", "list"], help="what to do")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="the user (add, remove): 1 to 255 printable characters, no '/'")
    password = p.add_mutually_exclusive_group()
    password.add_argument("--password-stdin", action="store_true",
                          help="add: read the password from standard input, one line (typed "
                               "without echo when it is a terminal); its trailing newline is "
                               "not part of it. Never on the command line: ps would show it")
    password.add_argument("--password-file", metavar="FILE",
                          help="add: the password is FILE's first line, without its newline")
    p.add_argument("--iterations", type=int, metavar="N",
                   help=f"add: PBKDF2 iterations of the credential ({scram.MIN_ITERATIONS} "
                        f"to {scram.MAX_ITERATIONS}; default {scram.DEFAULT_ITERATIONS}: "
                        f"another count tells a peer that the user exists, "
                        f"docs/security.md)")
    _add_zookeeper_cluster(p)
    p.set_defaults(func=cmd_users)

    p = sub.add_parser(
        "acls", help="access control entries in ZooKeeper: add, remove, list",
        usage="%(prog)s add|remove --principal User:NAME RESOURCE [--prefixed]\n"
              "           --operation OP [--operation OP ...] [--deny] CLUSTER\n"
              "       %(prog)s list [--principal User:NAME] [RESOURCE] [--json] CLUSTER",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_paragraphs(
            "Entries that allow (or, with --deny, deny) a principal operations on a "
            "resource, kept in ZooKeeper (/security/acls; docs/security.md). A super user "
            "may do everything; a matching deny wins over any allow; else a matching allow "
            "allows; else the answer is no.",
            "RESOURCE is --topic NAME or --group NAME (\"*\": every one; with --prefixed, "
            "every one whose name starts with NAME), or --cluster-resource: the cluster "
            "itself, the resource named \"cluster\" (--cluster names the cluster's "
            "ZooKeeper, as in the other tools). CLUSTER is --cluster NAME=ZOOKEEPER, or "
            "--zookeeper ZOOKEEPER.",
            "add and remove make one entry per --operation and print how many were added "
            "(removed), and how many were there already (not there). list prints an entry "
            "a line, \"User:alice allow read topic literal:events\" (principal, "
            "permission, operation, resource type, pattern type:name), only those of "
            "--principal and of the RESOURCE's name (exactly), where given."))
    p.add_argument("action", choices=["add", "remove", "list"], help="what to do")
    p.add_argument("--principal", metavar="User:NAME",
                   help="User:<name>, or User:* for every principal")
    resource = p.add_mutually_exclusive_group()
    resource.add_argument("--topic", metavar="NAME", help="a topic, \"*\" or a prefix")
    resource.add_argument("--group", metavar="NAME", help="a consumer group, \"*\" or a prefix")
    resource.add_argument("--cluster-resource", action="store_true",
                          help="the cluster itself (cluster_action: what the brokers' "
                               "replication needs)")
    p.add_argument("--prefixed", action="store_true",
                   help="add, remove: the --topic or --group NAME is a prefix")
    p.add_argument("--operation", action="append", type=_operation, choices=OPERATIONS,
                   metavar="OP", help=f"add, remove: one of {', '.join(OPERATIONS)} "
                                      f"(repeatable)")
    p.add_argument("--deny", action="store_true",
                   help="add, remove: entries that deny (default: allow)")
    p.add_argument("--json", action="store_true",
                   help="list: JSON, {\"acls\": [{principal, permission, operation, "
                        "resource_type, name, pattern_type}]}")
    _add_zookeeper_cluster(p)
    p.set_defaults(func=cmd_acls)

    p = sub.add_parser(
        "zookeeper-acls", help="secure an open cluster's ZooKeeper records in place",
        usage="%(prog)s --zookeeper-auth-file FILE [--group GROUP=FILE ...] "
              "[--schemas FILE] [--mirrored FILE] [--dry-run] CLUSTER",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_paragraphs(
            "A migration for a cluster whose records in ZooKeeper are open: gives every node "
            "of /brokers, /replication, /security and /consumers the ACL of the policy in "
            "docs/security.md (\"ZooKeeper\"), as the cluster's identity "
            "(--zookeeper-auth-file, user:password): the brokers' records and the topics' "
            "writable by it alone and readable by everyone, the users' credentials and the "
            "ACLs readable by it alone, /consumers open to new groups. A consumer group's "
            "records get the identity given with --group GROUP=FILE (its members' "
            "zookeeper_auth_file); the records of a group without one are left as they are, "
            "and named at the end, as are the chroot itself and the other subtrees. The "
            "schema registry's /schemas gets the identity given with --schemas FILE (the "
            "registry's zookeeper_auth_file), the mirrors' marks /mirrored that of "
            "--mirrored FILE (the [credentials] zookeeper_auth_file of the mirrors into "
            "this cluster): changeable by it, readable by everyone.",
            "First restart the brokers with zookeeper_auth_file set to the same identity (they "
            "go on writing the open records), then run this, then restart the groups' members "
            "with theirs. Prints each node it changes (--dry-run: what it would change, "
            "changing nothing) and a count. Run it again at any time: it changes only what "
            "differs."))
    p.add_argument("--group", action="append", metavar="GROUP=FILE",
                   help="a consumer group and the file of its identity (repeatable)")
    p.add_argument("--schemas", metavar="FILE",
                   help="the schema registry's identity: /schemas becomes its")
    p.add_argument("--mirrored", metavar="FILE",
                   help="the identity of the mirrors into this cluster: /mirrored (their "
                        "marks) becomes theirs")
    p.add_argument("--dry-run", action="store_true", help="print what would change, change "
                                                          "nothing")
    _add_zookeeper_cluster(p)
    p.set_defaults(func=cmd_zookeeper_acls)

    p = sub.add_parser(
        "http-users", help="users of the HTTP services (audit, lag, schema registry): add, "
                           "remove, list",
        usage="%(prog)s add NAME --role read|admin (--password-stdin | --password-file FILE "
              "| --certificate)\n           [--iterations N] --file USERS_FILE\n"
              "       %(prog)s remove NAME --file USERS_FILE\n"
              "       %(prog)s list --file USERS_FILE",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_paragraphs(
            "The users file an HTTP service names in its users_file ([http] of the lag "
            "service, [serve.http] of the audit service, [schema_registry.http] of the schema "
            "registry, [metrics_http] of a broker or a mirror, [count.metrics_http] of an "
            "audit counter; docs/security.md, \"HTTP services\"): a user a line, its role "
            "(read: GET; "
            "admin: everything the service serves) and its secret, a PBKDF2-HMAC-SHA512 of "
            "the password, never the password. --certificate: a client that presents a "
            "certificate whose subject is NAME (RFC 4514, CN=prometheus,O=samsa), no "
            "password. The services read the file again when it changes.",
            "The file is replaced at once, readable by its owner only. add prints \"user "
            "NAME created (ROLE)\" (or \"replaced\"), remove \"user NAME removed\" (exit 1 "
            "when there is no such user), list a line per user: name, role, password or "
            "certificate."))
    p.add_argument("action", choices=["add", "remove", "list"], help="what to do")
    p.add_argument("name", nargs="?", metavar="NAME", help="the user (add, remove)")
    p.add_argument("--file", required=True, metavar="USERS_FILE", help="the users file")
    p.add_argument("--role", choices=["read", "admin"], help="add: the user's role")
    secret = p.add_mutually_exclusive_group()
    secret.add_argument("--password-stdin", action="store_true",
                        help="add: read the password from standard input, one line (typed "
                             "without echo when it is a terminal)")
    secret.add_argument("--password-file", metavar="FILE",
                        help="add: the password is FILE's first line, without its newline")
    secret.add_argument("--certificate", action="store_true",
                        help="add: NAME is a client certificate's subject; no password")
    p.add_argument("--iterations", type=int, metavar="N",
                   help="add: PBKDF2 iterations (default 210000; at least 10000)")
    p.set_defaults(func=cmd_http_users)

    for tool in sub.choices.values():     # each tool's --help ends with the exit statuses
        cli.end_help_with(tool, EXIT_STATUS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # kazoo logs every failed connection attempt: the tools say it once, clearly
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        return args.func(args)
    except (ConfigError, SamsaError, BrokerConnectionError, ValueError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, ConfigError) else 1
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
