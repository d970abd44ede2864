"""python -m audit count, as an operator runs it: a real process against a
real cluster, stopped with SIGTERM after a last publish."""
from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

from audit.counting import AUDIT_TOPIC
from audit_helpers import WINDOW, decode_events, page_views
from broker.client.cluster_producer import ClusterProducer
from broker.service_kit.process import SupervisedProcess
from broker_helpers import wait_until
from cluster_helpers import read_all
from schemas import catalog
from schemas.registry import SchemaRegistry
from schemas.wire import ValueWriter


def test_help_and_bad_options():
    out = subprocess.run([sys.executable, "-m", "audit", "count", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "NAME=ZOOKEEPER" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "audit", "count", "--cluster", "nozk"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "NAME=ZOOKEEPER" in bad.stderr
    unknown = subprocess.run([sys.executable, "-m", "audit", "count", "--cluster", "a=b:1/a",
                              "--set", "windows_ms=5"], capture_output=True, text=True,
                             timeout=60)
    assert unknown.returncode == 2 and "unknown setting 'windows_ms'" in unknown.stderr


def test_count_process_publishes_and_stops_cleanly(clusters, tmp_path):
    cluster = clusters("dc-a")
    with SchemaRegistry.open(f"zookeeper://{cluster.connect}") as registry:
        registry.register("page_views", catalog.load("samsa.events.PageViewEvent"))
        now = int(time.time() * 1000)
        values, _ids = page_views(ValueWriter(registry, "page_views"), [now] * 50)
        producer = ClusterProducer(cluster.connect, acks="flushed")
        try:
            for v in values:
                producer.send("page_views", v, timestamp=now)
            producer.flush()
        finally:
            producer.close()
        # a long interval: what it publishes is the last publish on SIGTERM
        proc = SupervisedProcess("audit-count", [
            sys.executable, "-m", "audit", "count", "--cluster", f"dc-a={cluster.connect}",
            "--metrics-port", "0", "--log-format", "json",
            "--set", "publish_interval_ms=600000", "--set", f"window_ms={WINDOW}"],
            str(tmp_path / "count.log"))
        proc.start(ready_line=lambda line: b"counting cluster dc-a" in line)
        proc.wait_ready(60)
        port = int(proc.read_log().split("metrics port ")[1].split('"')[0].split()[0])

        def counted() -> float:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            for line in text.decode().splitlines():
                if line.startswith("samsa_audit_messages_counted_total"):
                    return float(line.split()[-1])
            return 0.0

        wait_until(lambda: counted() == 50, 60, what="50 messages counted")
        assert proc.stop(60) == 0, proc.tail_log()
        events = decode_events(registry, [m.value for ms in read_all(cluster, AUDIT_TOPIC)
                                          .values() for m in ms])
    assert [(e["tier"], e["message_count"]) for e in events] == [("cluster", 50)]


def test_config_file_lists_every_setting_with_its_default():
    import dataclasses

    from audit.config import CountConfig, ServeConfig
    from broker.service_kit import settings
    for table, cls in (("count", CountConfig), ("serve", ServeConfig)):
        values = settings.read_toml("config/audit.toml")[table]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(values) == set(fields), table
        for name, f in fields.items():
            if f.default is not dataclasses.MISSING:
                assert values[name] == f.default, (table, name)
