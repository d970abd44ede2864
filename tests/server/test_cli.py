"""``python -m broker`` as an operator runs it: --help explains every
option, --print-config shows the effective settings (file, options, --set
overrides) as TOML, and a bad setting stops it with exit code 2 and a
message naming the setting."""
from __future__ import annotations

import tomllib

import pytest

from broker.__main__ import build_parser

from broker_helpers import run_module


def test_help_explains_every_option():
    done = run_module("broker", "--help")
    assert done.returncode == 0
    out = done.stdout.decode()
    assert out.startswith("usage: python -m broker")
    options = [s for a in build_parser()._actions for s in a.option_strings if s.startswith("--")]
    assert len(options) >= 10
    for option in options:
        assert option in out
    assert all(a.help for a in build_parser()._actions)


def test_print_config_shows_the_effective_settings(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('port = 9999\ndefault_partitions = 4\n[log]\nflush_ms = 20\n')
    done = run_module("broker", "--config", str(config), "--port", "9100",
                      "--set", "log.flush_messages=77", "--print-config")
    assert done.returncode == 0, done.stderr.decode()
    settings = tomllib.loads(done.stdout.decode())
    assert settings["port"] == 9100                         # the option beats the file
    assert settings["default_partitions"] == 4              # from the file
    assert settings["log"]["flush_ms"] == 20
    assert settings["log"]["flush_messages"] == 77          # --set
    assert settings["log"]["segment_bytes"] == 1 << 30      # a default


@pytest.mark.parametrize("args, message", [
    (["--set", "port=abc"], "port must be an integer, got 'abc'"),
    (["--port", "70000"], "port must be 0..65535"),
    (["--set", "log.flush_ms=-1"], "flush.ms must be >= 0"),
    (["--set", "no_such_setting=1"], "unknown setting 'no_such_setting'"),
    (["--set", "auto_create_topics=maybe"], "auto_create_topics must be true or false"),
    (["--set", "log_level"], "--set wants KEY=VALUE"),
    (["--config", "/nonexistent/broker.toml"], "cannot read config file"),
], ids=["not an integer", "port range", "negative flush.ms", "unknown setting",
        "not a boolean", "no value", "missing config file"])
def test_a_bad_setting_exits_2_with_a_clear_message(args, message):
    done = run_module("broker", *args, "--print-config")
    assert done.returncode == 2
    assert done.stdout == b""
    err = done.stderr.decode()
    assert err.startswith("error: ") and message in err, err
