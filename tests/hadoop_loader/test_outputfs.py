"""hadoop_loader/outputfs.py: the output's file system. The local one is
used for real (every loader test goes through it); HDFS and S3 cannot be
reached here, so for them only what needs no server is checked: the paths
Spark and pyarrow are given, and a clear failure."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hadoop_loader.outputfs import OutputError, OutputFS


def test_the_local_file_system(tmp_path):
    out = OutputFS(f"file://{tmp_path}/wh")
    assert out.kind == "local" and out.atomic_rename
    assert out.spark_uri("a", "b") == f"{tmp_path}/wh/a/b" == out.local_path("a", "b")
    out.write_text(("x", "y.json"), '{"a": 1}')
    assert out.read_text("x", "y.json") == '{"a": 1}'
    assert [n for n in os.listdir(tmp_path / "wh" / "x")] == ["y.json"]    # no temp left
    assert out.create_new(("x", "c.json"), "1") is True
    assert out.create_new(("x", "c.json"), "2") is False                    # taken: kept
    assert out.read_text("x", "c.json") == "1"
    assert out.files("x") == [("x/c.json", 1), ("x/y.json", 8)]
    assert out.move("x/y.json", "z/w/y.json") is True
    assert out.move("x/y.json", "z/w/y.json") is False                      # moved before
    assert out.listdir("z", "w") == ["y.json"] and out.listdir("nothing") == []
    out.delete_dir("z")
    assert not out.exists("z")
    with out.open_output("s", "t", "f.bin") as f:
        f.write(b"\x00" * 10)
    assert out.files("s") == [("s/t/f.bin", 10)]


def test_s3a_paths_without_a_server():
    out = OutputFS("s3a://bucket/warehouse/")
    assert out.kind == "s3" and not out.atomic_rename
    assert out.path("_samsa", "offsets") == "bucket/warehouse/_samsa/offsets"
    assert out.spark_uri("page_views") == "s3a://bucket/warehouse/page_views"


def test_hdfs_and_unknown_schemes_fail_clearly():
    with pytest.raises(OutputError, match="libhdfs"):
        OutputFS("hdfs://namenode:8020/warehouse")
    with pytest.raises(OutputError, match="a local path, file://, hdfs:// or s3a://"):
        OutputFS("ftp://host/warehouse")


def test_the_loader_with_an_hdfs_output_fails_fast_with_a_clear_message(tmp_path):
    out = subprocess.run([sys.executable, "-m", "hadoop_loader", "--zookeeper",
                          "127.0.0.1:1/analysis", "--output", "hdfs://namenode:8020/wh"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "nothing was committed" in out.stderr and "libhdfs" in out.stderr
