"""python -m mirror: its settings file, its command line, its metrics."""
from __future__ import annotations

import dataclasses
import pathlib
import signal

import pytest

from broker.service_kit.settings import ConfigError, to_toml
from broker_helpers import run_module, scrape_metrics, wait_until
from broker.service_kit.settings import load
from mirror.config import MirrorConfig
from mirror_helpers import mirror_config

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_documented_file_holds_the_defaults():
    documented = load(MirrorConfig, str(ROOT / "config" / "mirror.toml"))
    defaults = MirrorConfig(sources=documented.sources, target=documented.target)
    assert documented == defaults
    assert [s.name for s in documented.sources] == ["dc-a", "dc-b"]
    # every setting is in the file
    text = (ROOT / "config" / "mirror.toml").read_text()
    for field in dataclasses.fields(MirrorConfig):
        assert f"{field.name} =" in text or f"[{field.name}]" in text or \
            f"[[{field.name}]]" in text, field.name


def test_settings_round_trip_and_overrides(tmp_path):
    config = load(MirrorConfig, str(ROOT / "config" / "mirror.toml"),
                                {"batch_size": "50", "whitelist": "a|b"})
    assert config.batch_size == 50 and config.whitelist == "a|b"
    path = tmp_path / "m.toml"
    path.write_text(to_toml(config))
    assert load(MirrorConfig, str(path)) == config
    with pytest.raises(ConfigError, match="unknown setting 'bach_size'"):
        load(MirrorConfig, str(path), {"bach_size": "1"})
    with pytest.raises(ConfigError, match="batch_size must be an integer"):
        load(MirrorConfig, str(path), {"batch_size": "many"})
    with pytest.raises(ConfigError, match="must be >= 1"):
        load(MirrorConfig, str(path), {"max_unacknowledged": "0"})


def test_help_and_bad_input():
    out = run_module("mirror", "--help")
    assert out.returncode == 0
    for option in (b"--config", b"--source", b"--target", b"--whitelist", b"--blacklist",
                   b"--set", b"--metrics-port", b"--print-config"):
        assert option in out.stdout
    bad = run_module("mirror", "--source", "dc-a=127.0.0.1:2181/x", "--target",
                     "an=127.0.0.1:2181/x")
    assert bad.returncode == 2 and b"loop" in bad.stderr
    bad = run_module("mirror", "--source", "no-equals-sign", "--target", "an=127.0.0.1:1/y")
    assert bad.returncode == 2 and b"NAME=ZOOKEEPER" in bad.stderr
    printed = run_module("mirror", "--source", "a=127.0.0.1:2181/a", "--target",
                         "b=127.0.0.1:2181/b", "--set", "linger_ms=7", "--print-config")
    assert printed.returncode == 0 and b"linger_ms = 7" in printed.stdout


@pytest.mark.slow
def test_zookeeper_unreachable_is_a_clear_error(tmp_path):
    from broker_helpers import unused_port
    port = unused_port()
    out = run_module("mirror", "--source", f"a=127.0.0.1:{port}/a", "--target",
                     f"b=127.0.0.1:{port}/b", "--metrics-port", "-1", timeout=90)
    assert out.returncode == 1
    assert b"ZooKeeper" in out.stderr and str(port).encode() in out.stderr


def test_metrics_per_source_partition(clusters, cluster_producers, mirror_processes):
    dc_a, analysis = clusters("dc-a"), clusters("analysis")
    bps = dc_a.create_topic("events", 2)
    producer = cluster_producers(dc_a)
    for i in range(1000):
        producer.send("events", b"v" * 200, timestamp=None)
    producer.flush(30)
    from broker_helpers import unused_port
    port = unused_port()
    proc = mirror_processes(mirror_config([dc_a], analysis, metrics_port=port))

    def copied():
        try:
            samples = scrape_metrics(port)
        except OSError:
            return None
        total = sum(v for (name, labels), v in samples.items()
                    if name == "samsa_mirror_messages_total")
        return samples if total == 1000 else None

    samples = wait_until(copied, 60, what="the metrics to show the copy")
    for bp in bps:
        labels = frozenset({"source": "dc-a", "topic": "events", "partition": bp}.items())
        assert samples[("samsa_mirror_messages_total", labels)] > 0
        assert samples[("samsa_mirror_record_age_seconds", labels)] >= 0

    def lag_is_zero():
        samples = scrape_metrics(port)
        lags = {labels: v for (name, labels), v in samples.items()
                if name == "samsa_mirror_lag_bytes"}
        return len(lags) == 2 and all(v == 0 for v in lags.values()) and samples

    wait_until(lag_is_zero, 30, what="the lag probe to report 0 behind")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
