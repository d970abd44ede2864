"""`make demo`: start a broker, push messages through the console tools, read
them back, print a summary. Everything runs in a temporary directory and is
cleaned up afterwards.

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

from broker.harness import BrokerProcess

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
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("[demo] OK" if ok else "[demo] FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
