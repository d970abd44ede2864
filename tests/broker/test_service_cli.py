"""The command-line kit every service shares (broker/service_kit/cli.py):
--print-config answers for every service, also before a cluster is named,
and a wrong value is exit 2 whatever the service."""
from __future__ import annotations

import tomllib

import pytest

from broker_helpers import run_module

#: (module and subcommand, the settings table its --print-config prints, the
#: clusters it needs before it can run, as given on its command line)
SERVICES = [
    (("broker",), None, ()),
    (("mirror",), None, ("--source", "dc-a=127.0.0.1:2181/dc-a",
                         "--target", "analysis=127.0.0.1:2181/analysis")),
    (("broker.lag",), None, ("--cluster", "dc-a=127.0.0.1:2181/dc-a")),
    (("audit", "count"), "count", ("--cluster", "dc-a=127.0.0.1:2181/dc-a")),
    (("audit", "serve"), "serve", ("--cluster", "analysis=127.0.0.1:2181/analysis")),
    (("hadoop_loader",), "loader", ("--cluster", "analysis=127.0.0.1:2181/analysis")),
]
IDS = [" ".join(command) for command, _, _ in SERVICES]


@pytest.mark.parametrize("command, table, clusters", SERVICES, ids=IDS)
def test_print_config_without_a_cluster_shows_what_is_missing(command, table, clusters):
    done = run_module(*command, "--print-config", "--log-level", "DEBUG")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    settings = tomllib.loads(text)
    settings = settings[table] if table else settings
    assert settings["log_level"] == "DEBUG"
    if clusters:
        assert text.startswith("# not complete yet: ")


@pytest.mark.parametrize("command, table, clusters", SERVICES, ids=IDS)
def test_print_config_with_the_clusters_reads_back(command, table, clusters, tmp_path):
    done = run_module(*command, *clusters, "--print-config", "--log-format", "json")
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode()
    assert not text.startswith("#")
    path = tmp_path / "settings.toml"
    path.write_text(text)
    again = run_module(*command, "--config", str(path), "--print-config")
    assert again.returncode == 0 and again.stdout.decode() == text


@pytest.mark.parametrize("command, table, clusters", SERVICES, ids=IDS)
def test_an_unknown_setting_is_exit_2_even_for_print_config(command, table, clusters):
    done = run_module(*command, "--print-config", "--set", "no_such_setting=1")
    assert done.returncode == 2
    assert done.stderr.decode().startswith("error: ") and b"no_such_setting" in done.stderr


@pytest.mark.parametrize("command", [("mirror", "--source"), ("broker.lag", "--cluster"),
                                     ("audit", "count", "--cluster"),
                                     ("hadoop_loader", "--cluster")],
                         ids=lambda c: " ".join(c))
def test_every_service_refuses_the_same_bad_cluster_names(command):
    for bad in ("dc a=127.0.0.1:2181/x", "dc-a=127.0.0.1/x", "127.0.0.1:2181"):
        done = run_module(*command, bad, "--print-config")
        assert done.returncode == 2, (bad, done.stdout)
        assert b"NAME=ZOOKEEPER" in done.stderr, (bad, done.stderr)


def test_the_lab_reads_its_topology_with_the_same_kit(tmp_path):
    done = run_module("infra.local", "up", "--print-config", "--set", "base_port=29000")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "topology.toml"
    path.write_text(done.stdout.decode())
    again = run_module("infra.local", "up", "--topology", str(path), "--print-config")
    assert again.returncode == 0 and again.stdout == done.stdout
    assert tomllib.loads(again.stdout.decode())["base_port"] == 29000
    bad = run_module("infra.local", "up", "--set", "no_such_setting=1")
    assert bad.returncode == 2 and b"no_such_setting" in bad.stderr


#: a value each service's own checks refuse (checks across settings, not types)
WRONG_VALUES = {
    ("broker",): "log.flush_ms=-5",
    ("mirror",): "whitelist=(",
    ("broker.lag",): "interval_s=0",
    ("audit", "count"): "publish_interval_ms=0",
    ("audit", "serve"): "grace_ms=-1",
    ("hadoop_loader",): "on_retention_gap=maybe",
}


@pytest.mark.parametrize("command, table, clusters", SERVICES, ids=IDS)
def test_a_wrong_value_is_refused_also_before_a_cluster_is_named(command, table, clusters):
    setting = WRONG_VALUES[command]
    for named in ((), clusters):
        done = run_module(*command, *named, "--print-config", "--set", setting)
        assert done.returncode == 2, (named, done.stdout)
        assert done.stderr.decode().startswith("error: ") and not done.stdout


@pytest.mark.parametrize("command, table, clusters", SERVICES[1:], ids=IDS[1:])
def test_what_is_missing_is_shown_as_a_comment(command, table, clusters):
    text = run_module(*command, "--print-config").stdout.decode()
    required = [line for line in text.splitlines() if line.endswith(")") and "(required" in line]
    assert required and all(line.startswith("# ") for line in required), text
