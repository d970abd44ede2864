"""`make demo`: start a broker, push messages through the console tools, read
them back; then a small cluster: ZooKeeper, two brokers that register in it,
a producer that finds them there and keys messages across the cluster, and a
consumer group of two that splits the partitions. Prints a summary.
Everything runs in a temporary directory and is cleaned up afterwards.

    python -m broker.demo [--messages 5000] [--partitions 2] [--keep]
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

from broker.harness import BrokerProcess, ZooKeeperEnsemble

TOPIC = "page-views"


def run_tool(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "broker.tools", *args], input=stdin,
                          capture_output=True, check=False, timeout=300)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m broker.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args(argv)

    workdir = tempfile.mkdtemp(prefix="samsa-demo-")
    broker = BrokerProcess(f"{workdir}/broker-0", metrics_port=0)
    print(f"[demo] starting a broker (data in {workdir}/broker-0) ...")
    broker.start()
    ok = False
    try:
        boot = ["--bootstrap", broker.address]
        print(f"[demo] broker serving on {broker.address}, metrics on "
              f"http://127.0.0.1:{broker.metrics_port}/metrics")
        step = run_tool(["topics", *boot, "--create", TOPIC, "--partitions",
                         str(args.partitions)])
        print("[demo]", step.stdout.decode().strip() or step.stderr.decode().strip())

        lines = b"".join(json.dumps({"user": i % 97, "page": f"/item/{i}", "seq": i}).encode()
                         + b"\n" for i in range(args.messages))
        started = time.monotonic()
        step = run_tool(["produce", *boot, "--topic", TOPIC, "--acks", "flushed"], lines)
        produce_s = time.monotonic() - started
        if step.returncode:
            print(step.stderr.decode(), file=sys.stderr)
            return 1
        print(f"[demo] produced {args.messages} messages through the console producer "
              f"(acks=flushed) in {produce_s:.2f}s")

        started = time.monotonic()
        step = run_tool(["consume", *boot, "--topic", TOPIC, "--from-beginning",
                         "--max-messages", str(args.messages), "--timeout-ms", "10000",
                         "--print-offsets"])
        consume_s = time.monotonic() - started
        out = step.stdout.decode().splitlines()
        seqs = sorted(json.loads(line.split("\t", 1)[1])["seq"] for line in out)
        print(f"[demo] consumed {len(out)} messages from {args.partitions} partitions in "
              f"{consume_s:.2f}s; first: {out[0] if out else '-'}")
        ok = seqs == list(range(args.messages))
        print(f"[demo] every message came back exactly once: {'yes' if ok else 'NO'}")

        step = run_tool(["topics", *boot, "--describe", TOPIC])
        print("[demo] topic state:\n" + step.stdout.decode().rstrip())
        step = run_tool(["offsets", *boot, "--topic", TOPIC, "--time", "earliest"])
        print("[demo] earliest offsets: " + " ".join(step.stdout.decode().split()))
        step = run_tool(["offsets", *boot, "--topic", TOPIC, "--time", "latest"])
        print("[demo] latest offsets:   " + " ".join(step.stdout.decode().split()))

        with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics",
                                    timeout=10) as resp:
            metrics = resp.read().decode()
        wanted = ("samsa_messages_in_total", "samsa_bytes_out_total", "samsa_flushes_total",
                  "samsa_sendfile_bytes_total")
        print("[demo] broker metrics:")
        for line in metrics.splitlines():
            if line.startswith(wanted):
                print("   ", line)
    finally:
        code = broker.stop()
        print(f"[demo] broker stopped cleanly (exit {code}); log: {broker.log_path}")
    if ok:
        ok = cluster_demo(workdir, args.messages)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("[demo] OK" if ok else "[demo] FAILED")
    return 0 if ok else 1


def cluster_demo(workdir: str, messages: int) -> bool:
    """ZooKeeper, two brokers, a cluster producer, a consumer group of two."""
    from broker.client.cluster_producer import ClusterProducer
    from broker.client.group_consumer import GroupConsumer

    print("[demo] --- a cluster coordinated through ZooKeeper ---")
    zk = ZooKeeperEnsemble(1, f"{workdir}/zookeeper").start()
    connect = zk.connect_string("/demo-cluster")
    print(f"[demo] ZooKeeper serving at {zk.connect_string()} (cluster chroot /demo-cluster)")
    brokers = []
    consumers = []
    try:
        for i in range(2):
            b = BrokerProcess(f"{workdir}/cluster-broker-{i}", broker_id=i,
                              settings={"zookeeper": connect}).start()
            brokers.append(b)
            run_tool(["topics", "--bootstrap", b.address, "--create", "clicks",
                      "--partitions", "2"])
        print("[demo] brokers 0 and 1 registered; topic 'clicks' has 2 partitions on each")
        with ClusterProducer(connect, acks="flushed") as producer:
            producer.cluster.wait_for(lambda v: len(v.partitions("clicks")) == 4, 10)
            for i in range(messages):
                producer.send("clicks", b"click-%d" % i, key=b"user-%d" % (i % 50))
        print(f"[demo] a cluster producer found the 4 broker-partitions in ZooKeeper and sent "
              f"{messages} messages keyed by user (crc32(key) % 4)")
        consumers = [GroupConsumer(zookeeper=connect, group="demo-group", topics=("clicks",),
                                   consumer_id=f"consumer-{i}") for i in range(2)]
        seen: dict[str, int] = {}
        got = set()
        for c in consumers:
            for m in c.messages(timeout_ms=3000):
                got.add(m.value)
                seen[c.consumer_id] = seen.get(c.consumer_id, 0) + 1
            c.commit()
        for c in consumers:
            print(f"[demo] {c.consumer_id} owns {sorted(bp for _, bp in c.owned())} and "
                  f"consumed {seen.get(c.consumer_id, 0)} messages")
        complete = got == {b"click-%d" % i for i in range(messages)}
        print(f"[demo] the group received every message: {'yes' if complete else 'NO'}")
        step = run_tool(["groups", "--zookeeper", connect, "--describe", "demo-group"])
        print("[demo] python -m broker.tools groups --describe demo-group:\n"
              + step.stdout.decode().rstrip())
        return complete
    finally:
        for c in consumers:
            c.close()
        for b in brokers:
            b.stop()
        zk.stop()


if __name__ == "__main__":
    sys.exit(main())
