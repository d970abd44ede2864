"""Broker settings: file + overrides, validation, and the documented defaults file."""
import dataclasses
import pathlib

import pytest

from broker.__main__ import parse_config
from broker.config import BrokerConfig, ConfigError, load_config, to_toml
from broker.service_kit.http_security import HttpSecurity
from broker.storage.log_config import LogConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_documented_defaults_file_matches_the_code():
    assert load_config(str(ROOT / "config" / "broker.toml")) == BrokerConfig()


def test_every_setting_is_in_the_documented_file():
    text = (ROOT / "config" / "broker.toml").read_text()
    tables = {"log": LogConfig, "metrics_http": HttpSecurity}
    for f in dataclasses.fields(BrokerConfig):
        if f.name not in tables:
            assert f"\n{f.name} =" in text or text.startswith(f"{f.name} ="), f.name
    for table, cls in tables.items():
        assert f"\n[{table}]\n" in text, table
        for f in dataclasses.fields(cls):
            assert f"\n{f.name} =" in text, (table, f.name)


def test_file_then_overrides(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('port = 1234\ndata_dir = "/x"\n[log]\nflush_ms = 7\n')
    cfg = load_config(str(path), {"port": "99", "log.retention_bytes": "100"})
    assert (cfg.port, cfg.data_dir, cfg.log.flush_ms, cfg.log.retention_bytes) == (99, "/x", 7, 100)


def test_print_config_round_trips(tmp_path):
    cfg = load_config(None, {"port": 5, "log.segment_bytes": 4096, "auto_create_topics": "false"})
    path = tmp_path / "c.toml"
    path.write_text(to_toml(cfg))
    assert load_config(str(path)) == cfg


@pytest.mark.parametrize("overrides, message", [
    ({"prot": 1}, "unknown setting 'prot'"),
    ({"port": "abc"}, "port must be an integer"),
    ({"port": 70000}, "port must be 0..65535"),
    ({"log.flush_messages": 0}, "flush.messages must be >= 1"),
    ({"log.bogus": 1}, "unknown setting 'log.bogus'"),
    ({"auto_create_topics": "perhaps"}, "must be true or false"),
    ({"log_format": "xml"}, "log_format"),
])
def test_bad_settings_are_refused_clearly(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_bad_file_is_refused_clearly(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("port = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(str(path))
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(str(tmp_path / "missing.toml"))


def test_command_line_options():
    cfg, _ = parse_config(["--port", "0", "--data-dir", "/d", "--broker-id", "3",
                           "--set", "log.flush_ms=5", "--set", "default_partitions=8"])
    assert (cfg.port, cfg.data_dir, cfg.broker_id, cfg.log.flush_ms, cfg.default_partitions) == \
        (0, "/d", 3, 5, 8)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_config(["--set", "nonsense"])
