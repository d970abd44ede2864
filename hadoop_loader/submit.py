"""The load as a ``spark-submit`` job: its command line, and the zip of the
project's code that Spark ships to executors on other machines.

    python -m hadoop_loader.submit --config config/loader.toml [--set k=v] [--dry-run]
    python -m hadoop_loader.submit --build-py-files dist/samsa-py-files.zip

The command is pyspark's own ``spark-submit`` (or ``[warehouse]
spark_submit``) with ``--master`` from the loader's settings, the driver's
and executors' Python set to this interpreter (``spark.pyspark.python``),
``--py-files`` when ``[warehouse] py_files`` names a zip, any
``spark_args``, then the job (``hadoop_loader/__main__.py``) with its own
options. Its exit status is the job's: 0 loaded, 1 failed (nothing
committed), 2 bad settings, 3 an hour to reload cannot be (hadoop_loader/cli.py).
"""
from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import zipfile

#: the packages a loader's executors import (their pure-Python code; the C
#: accelerators are optional and fall back to Python when absent)
SHIPPED_PACKAGES = ("broker", "schemas", "audit", "hadoop_loader")

log = logging.getLogger(__name__)


def default_spark_submit() -> str:
    import pyspark
    return os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-submit")


def job_script() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")


def command(config_path: str, overrides: list[str] = (), *, spark_submit: str = "",
            master: str = "local[*]", py_files: str = "", spark_args: str = "",
            app_name: str = "samsa-hadoop-loader", job_args: list[str] = ()) -> list[str]:
    """The spark-submit command line of one load (``job_args``: more of the
    job's own options, e.g. ``--reload-hour``)."""
    argv = [spark_submit or default_spark_submit(), "--master", master, "--name", app_name,
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", f"spark.pyspark.driver.python={sys.executable}"]
    if py_files:
        argv += ["--py-files", py_files]
    argv += shlex.split(spark_args)
    argv += [job_script(), "--config", config_path]
    for item in overrides:
        argv += ["--set", item]
    return argv + list(job_args)


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return env


def run(argv: list[str], line=print) -> int:
    """Run the command, each output line to ``line`` as it comes; its exit
    status (negative: killed by that signal)."""
    process = subprocess.Popen(argv, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        for text in process.stdout:
            line(text.rstrip("\n"))
    finally:
        process.stdout.close()
        rc = process.wait()
    return rc


def build_py_files(target: str, root: str | None = None) -> str:
    """A zip of the shipped packages' Python code (and the schemas' .avsc
    files) at ``target``, for ``--py-files``; its path."""
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
    with zipfile.ZipFile(target + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        for package in SHIPPED_PACKAGES:
            for dirpath, dirs, files in os.walk(os.path.join(root, package)):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".py", ".avsc", ".ini", ".mako")):
                        path = os.path.join(dirpath, name)
                        z.write(path, os.path.relpath(path, root))
    os.replace(target + ".tmp", target)
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hadoop_loader.submit", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", metavar="FILE", help="settings file ([loader], [warehouse])")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a loader setting for the job (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    p.add_argument("--build-py-files", metavar="ZIP",
                   help="write the zip of the project's code for --py-files and exit")
    args = p.parse_args(argv)
    if args.build_py_files:
        print(build_py_files(args.build_py_files))
        return 0
    if not args.config:
        p.error("--config is required")
    from hadoop_loader.config import read_settings
    from broker.service_kit.settings import ConfigError
    try:
        loader, warehouse = read_settings(args.config, args.set)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    argv = command(args.config, args.set, spark_submit=warehouse.spark_submit,
                   master=loader.master, py_files=warehouse.py_files,
                   spark_args=warehouse.spark_args, app_name=loader.app_name)
    if args.dry_run:
        print(shlex.join(argv))
        return 0
    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
