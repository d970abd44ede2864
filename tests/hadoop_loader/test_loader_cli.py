"""python -m hadoop_loader as a data engineer runs it."""
from __future__ import annotations

import subprocess
import sys
import time

from loader_helpers import BASE, produce, read_rows, rows_per_hour


def loader(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hadoop_loader", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_help_settings_and_a_clear_failure(tmp_path):
    out = loader("--help")
    assert out.returncode == 0 and "spark-submit" in out.stdout and "--set" in out.stdout
    bad = loader("--zookeeper", "a:1/x", "--set", "max_unit_byte=5")
    assert bad.returncode == 2 and "unknown setting 'max_unit_byte'" in bad.stderr
    t0 = time.monotonic()
    down = loader("--zookeeper", "127.0.0.1:1/analysis", "--output", str(tmp_path / "wh"))
    assert down.returncode == 1 and "nothing was committed" in down.stderr
    assert "127.0.0.1:1" in down.stderr and time.monotonic() - t0 < 60


def test_a_load_from_the_command_line(analysis, tmp_path):
    cluster, registry = analysis
    want = produce(cluster, registry, 60, BASE)
    out = loader("--zookeeper", cluster.connect, "--output", f"file://{tmp_path / 'wh'}",
                 "--master", "local[2]", "--whitelist", "page_views")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "60 messages" in out.stdout and "page_views" in out.stdout
    assert rows_per_hour(read_rows(str(tmp_path / "wh"))) == want


def test_config_file_lists_every_setting_with_its_default():
    import dataclasses

    from broker.service_kit import settings
    from hadoop_loader.config import LoaderConfig, WarehouseConfig
    document = settings.read_toml("config/loader.toml")
    for table, cls in (("loader", LoaderConfig), ("warehouse", WarehouseConfig)):
        values = document[table]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        assert set(values) == set(fields), table
        for name, f in fields.items():
            if f.default is not dataclasses.MISSING and name != "output":
                assert values[name] == f.default, name
