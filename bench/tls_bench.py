"""TLS against plaintext on one broker (issue 30, point 8): ``make bench-tls``.

One broker (its own process) with both listeners, a certificate of the
project's CA (broker/security/ca.py, ECDSA P-256); in each round, on each
listener in turn (A = plaintext, B = TLS, the order alternating round by
round), in a client process of its own:

* produce batch 50: ``--messages`` messages of bench.common's 200-byte
  values, ``send_many`` 50 at a time, acks=none, into a fresh topic, timed
  until the broker's latest offset has them all (as bench/run.py's figure);
* consume: the same partition read from the start with a Consumer (fetch
  size FETCH_BYTES), timed until every message is decoded.

Prints the medians per listener and B/A for each figure; ``--json`` keeps
the raw rounds. Aim (issue 30): TLS at least 0.5 of plaintext for both.
The 2 cores are shared by broker and client: quote ratios of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench.common import (DISTINCT_VALUES, FETCH_BYTES, MESSAGE_BYTES, ROOT, compare_rounds,
                          machine_info, print_round, random_values)

FIGURES = (("produce batch 50, msg/s", "produce"), ("consume, msg/s", "consume"))


def client(args: argparse.Namespace) -> int:
    """One measurement in this process (``--client produce|consume``)."""
    from broker.client.admin import AdminClient
    from broker.client.consumer import Consumer
    from broker.client.producer import Producer
    from broker.security.tls import TlsSettings, client_context
    tls = {"tls": True, "tls_ca_file": args.ca} if args.tls else {}
    context = client_context(TlsSettings(ca_file=args.ca)) if args.tls else None
    n, topic = args.messages, args.topic
    if args.client == "produce":
        values = random_values()
        mask = DISTINCT_VALUES - 1
        chunks = [[values[(k * 50 + j) & mask] for j in range(50)] for k in range(DISTINCT_VALUES)]
        admin = AdminClient(args.bootstrap, tls=context)
        admin.create_topic(topic, 1)
        with Producer(bootstrap=args.bootstrap, acks="none", batch_size=50, linger_ms=5,
                      **tls) as producer:
            producer.conn.connect()
            t0 = time.perf_counter()
            for k in range(n // 50):
                producer.send_many(topic, chunks[k & mask], partition=0)
            producer.flush()
            while admin.latest_offset(topic, 0) < (n // 50) * 50 * MESSAGE_BYTES:
                time.sleep(0.002)
            seconds = time.perf_counter() - t0
        admin.close()
        print(json.dumps({"msgs_per_s": (n // 50) * 50 / seconds, "seconds": seconds}))
        return 0
    with Consumer(bootstrap=args.bootstrap, fetch_max_bytes=FETCH_BYTES, **tls) as consumer:
        consumer.assign([(topic, 0)], start="earliest")
        got = 0
        t0 = time.perf_counter()
        while got < (n // 50) * 50:
            got += len(consumer.poll(1000))
        seconds = time.perf_counter() - t0
    print(json.dumps({"msgs_per_s": got / seconds, "seconds": seconds}))
    return 0


def measure(kind: str, bootstrap: str, tls: bool, ca: str, topic: str, n: int) -> float:
    command = [sys.executable, "-m", "bench.tls_bench", "--client", kind, "--bootstrap",
               bootstrap, "--topic", topic, "--messages", str(n), "--ca", ca]
    if tls:
        command.append("--tls")
    out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True,
                         timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])["msgs_per_s"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tls_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--messages", type=int, default=400_000)
    p.add_argument("--json", metavar="PATH", help="write the rounds and medians here")
    p.add_argument("--client", choices=("produce", "consume"), help=argparse.SUPPRESS)
    p.add_argument("--bootstrap", help=argparse.SUPPRESS)
    p.add_argument("--topic", help=argparse.SUPPRESS)
    p.add_argument("--ca", help=argparse.SUPPRESS)
    p.add_argument("--tls", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.client:
        return client(args)
    from broker.harness import BrokerProcess
    from broker.security.ca import CertificateAuthority
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        ca = CertificateAuthority.create(os.path.join(tmp, "ca"))
        cert, key = ca.issue("broker-0", ["127.0.0.1", "localhost"], os.path.join(tmp, "certs"))
        broker = BrokerProcess(os.path.join(tmp, "data"), settings={
            "tls_port": 0, "tls_cert_file": cert, "tls_key_file": key,
            "log.flush_ms": 50}).start()
        try:
            for r in range(args.rounds):
                sides = [("A", False), ("B", True)]
                if r % 2:
                    sides.reverse()
                row = {"round": r}
                for name, tls in sides:
                    topic = f"tls-bench-{r}-{name}"
                    address = broker.tls_address if tls else broker.address
                    for label, kind in FIGURES:
                        row[f"{name} {kind}"] = measure(kind, address, tls, ca.cert_path, topic,
                                                        args.messages)
                rounds.append(row)
                print_round(r + 1, args.rounds, row, ",.0f")
        finally:
            broker.stop()
    medians = {}
    for label, kind in FIGURES:
        figures = compare_rounds(rounds, f"A {kind}", f"B {kind}")
        medians[kind] = {"plaintext": figures["base"], "tls": figures["other"],
                         "ratio": figures["ratio"],
                         "ratio_median_of_rounds": figures["ratio_median_of_rounds"]}
        print(f"{label}: plaintext {figures['base']:,.0f}, TLS {figures['other']:,.0f}, "
              f"TLS/plaintext {figures['ratio']:.2f} (median of the rounds' ratios "
              f"{figures['ratio_median_of_rounds']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "messages": args.messages,
                       "rounds": rounds, "medians": medians}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
