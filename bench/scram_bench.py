"""Connection set-up with SCRAM-SHA-512 against without (issue 30, point 8):
``make bench-scram``.

One ZooKeeper, two brokers of one cluster: A's plaintext port asks for
nothing, B's asks for SCRAM (a user made with the default 8,192 iterations);
both also have a TLS listener asking for the same. Each round, for each of
the four ways in (A plaintext, B plaintext + SCRAM, A TLS, B TLS + SCRAM;
the order rotating round by round), ``--connections`` connections are made
one after another from this process, each: connect (TLS handshake where
used), authenticate where asked, one Metadata request answered, close. The
figure is the median time of one such connection, in ms.

What SCRAM costs is mostly the client's PBKDF2 (8,192 iterations of
HMAC-SHA-512) and two more round trips; the broker's part is a few HMACs.
Prints the medians of the rounds per way in, and B/A; ``--json`` keeps the
raw rounds. The 2 cores are shared by brokers and client.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench.common import compare_rounds, machine_info, print_round

WAYS = ("plaintext", "plaintext + SCRAM", "TLS", "TLS + SCRAM")
PASSWORD = "bench-password"


def connection_ms(host: str, port: int, tls, sasl, count: int) -> float:
    """The median time of ``count`` connections made, used once, closed."""
    from broker.client.connection import BrokerConnection
    from broker.protocol import api
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        conn = BrokerConnection(host, port, "scram-bench", request_timeout=10, tls=tls,
                                sasl=sasl)
        conn.connect()
        conn.request(api.MetadataRequest(("bench",)))
        conn.close()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scram_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--connections", type=int, default=100, help="per way in per round")
    p.add_argument("--json", metavar="PATH", help="write the rounds and medians here")
    args = p.parse_args(argv)

    from kazoo.client import KazooClient

    from broker.client.authentication import SaslLogin
    from broker.harness import BrokerProcess, ZooKeeperEnsemble
    from broker.protocol.scram import ScramCredential
    from broker.security import store
    from broker.security.ca import CertificateAuthority
    from broker.security.tls import TlsSettings, client_context

    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        zk = ZooKeeperEnsemble(1, os.path.join(tmp, "zk")).start()
        brokers = []
        try:
            connect = zk.connect_string("/scrambench")
            root = KazooClient(hosts=zk.connect_string(""))
            root.start(timeout=15)
            root.ensure_path("/scrambench")
            root.stop()
            client = KazooClient(hosts=connect)
            client.start(timeout=15)
            store.set_user(client, "bench", ScramCredential.from_password(PASSWORD))
            client.stop()
            ca = CertificateAuthority.create(os.path.join(tmp, "ca"))
            cert, key = ca.issue("broker", ["127.0.0.1"], os.path.join(tmp, "certs"))
            for broker_id, auth in ((0, "none"), (1, "scram")):
                brokers.append(BrokerProcess(
                    os.path.join(tmp, f"broker-{broker_id}"), broker_id=broker_id, settings={
                        "zookeeper": connect, "authentication": auth,
                        "tls_authentication": auth, "tls_port": 0, "tls_cert_file": cert,
                        "tls_key_file": key}).start())
            context = client_context(TlsSettings(ca_file=ca.cert_path))
            login = SaslLogin("bench", PASSWORD)
            plain, scram = brokers
            ways = {
                "plaintext": (plain.address, None, None),
                "plaintext + SCRAM": (scram.address, None, login),
                "TLS": (plain.tls_address, context, None),
                "TLS + SCRAM": (scram.tls_address, context, login),
            }
            connection_ms("127.0.0.1", int(scram.address.rsplit(":", 1)[1]), None, login, 5)
            for r in range(args.rounds):
                order = WAYS[r % len(WAYS):] + WAYS[:r % len(WAYS)]
                row = {}
                for way in order:
                    address, tls, sasl = ways[way]
                    host, port = address.rsplit(":", 1)
                    row[way] = connection_ms(host, int(port), tls, sasl, args.connections)
                rounds.append({way: row[way] for way in WAYS})
                print_round(r + 1, args.rounds, rounds[-1], ".2f")
        finally:
            for broker in brokers:
                broker.stop()
            zk.stop()
    medians = {way: statistics.median(row[way] for row in rounds) for way in WAYS}
    for base, secured in (("plaintext", "plaintext + SCRAM"), ("TLS", "TLS + SCRAM")):
        figures = compare_rounds(rounds, base, secured)
        print(f"{secured}: {figures['other']:.2f} ms per connection, {base} "
              f"{figures['base']:.2f} ms: x{figures['ratio_median_of_rounds']:.1f} (median "
              f"of the rounds' ratios)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "connections": args.connections,
                       "rounds": rounds, "medians_ms": medians}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
