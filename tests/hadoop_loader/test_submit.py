"""The load as a spark-submit job (hadoop_loader/submit.py): the command,
the zip of the code for executors elsewhere, a load run that way, and one
load at a time per output."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import threading

import pytest

from hadoop_loader import job, submit
from loader_helpers import BASE, produce, read_rows, rows_per_hour


def settings(tmp_path, connect: str, **warehouse) -> str:
    path = tmp_path / "loader.toml"
    extra = "".join(f'{k} = "{v}"\n' for k, v in warehouse.items())
    path.write_text(f'[loader]\nzookeeper = "{connect}"\noutput = "{tmp_path / "wh"}"\n'
                    f'master = "local[2]"\n[warehouse]\n{extra}')
    return str(path)


def test_the_command_line(tmp_path):
    config = settings(tmp_path, "127.0.0.1:2181/analysis", py_files="/opt/samsa.zip",
                      spark_args="--conf spark.executor.memory=2g")
    out = subprocess.run([sys.executable, "-m", "hadoop_loader.submit", "--config", config,
                          "--set", "whitelist=page_views", "--dry-run"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv = shlex.split(out.stdout)
    assert argv[0].endswith("pyspark/bin/spark-submit")
    assert argv[argv.index("--master") + 1] == "local[2]"
    assert argv[argv.index("--py-files") + 1] == "/opt/samsa.zip"
    assert f"spark.pyspark.python={sys.executable}" in argv
    assert "spark.executor.memory=2g" in argv
    job_at = argv.index(submit.job_script())
    assert argv[job_at + 1:] == ["--config", config, "--set", "whitelist=page_views"]
    bad = subprocess.run([sys.executable, "-m", "hadoop_loader.submit", "--config", config,
                          "--set", "nope=1", "--dry-run"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "unknown setting 'loader.nope'" in bad.stderr


def test_the_py_files_zip_carries_the_code_executors_import(tmp_path):
    target = submit.build_py_files(str(tmp_path / "dist" / "samsa.zip"))
    # a fresh interpreter without the project on its path (-S: no .pth, so no
    # editable install), given only the zip and the third-party packages
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
            "import hadoop_loader.pull, schemas.catalog, audit.counting; "
            "print(hadoop_loader.pull.__file__); "
            "print(len(schemas.catalog.names()))")
    out = subprocess.run([sys.executable, "-S", "-c", code, target,
                          sysconfig.get_paths()["purelib"]], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split()
    assert lines[0].startswith(target) and int(lines[1]) >= 6      # the .avsc files came too


@pytest.mark.slow
def test_a_load_by_spark_submit_with_py_files(analysis, tmp_path):
    cluster, registry = analysis
    want = produce(cluster, registry, 90, BASE)
    zipped = submit.build_py_files(str(tmp_path / "samsa.zip"))
    config = settings(tmp_path, cluster.connect, py_files=zipped)
    out = subprocess.run([sys.executable, "-m", "hadoop_loader.submit", "--config", config,
                          "--set", "audit=false"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:]
    assert "90 messages" in out.stdout
    assert rows_per_hour(read_rows(str(tmp_path / "wh"))) == want


def test_one_load_at_a_time_per_output(tmp_path):
    root = str(tmp_path)
    holding, release = threading.Event(), threading.Event()

    def hold():
        with job.output_lock(root, 5):
            holding.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    holding.wait(30)
    try:
        with pytest.raises(job.LoadBusy, match=f"another load of {root} is running "
                                               f"\\(pid {os.getpid()}\\)"):
            with job.output_lock(root, 0.3):
                pass
    finally:
        release.set()
        holder.join(30)
    with job.output_lock(root, 0.3):        # free again
        pass
