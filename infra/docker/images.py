"""Build the project's container images offline (``make images``).

    python -m infra.docker.images              # every image, with the layer cache
    python -m infra.docker.images --only zookeeper,samsa
    python -m infra.docker.images --list       # what would be built

No registry is reached. The base image is made from the Debian archive with
``debootstrap --variant=minbase bookworm`` and ``docker import``ed as
``samsa/base:bookworm`` (once per engine: kept in its data root). The
service images install Debian packages on top of it (``docker build
--network host``: apt reaches the archive) and, for ``samsa``, the project
from its own source with a wheelhouse of its runtime dependencies that pip
downloads here, on the host, from the indexes pip is configured with.

Each image gets OCI labels (title, source, version, revision: ``--label`` at
build time, the same for all); the build times and
sizes are printed and kept in bench/results/images-<date>.json.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from infra.docker import engine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BASE = "samsa/base:bookworm"
SOURCE_URL = "https://github.com/samsa/samsa"      # org.opencontainers.image.source
IMAGES = ("zookeeper", "haproxy", "postgres", "samsa")
MIRROR = "http://deb.debian.org/debian"
# what the samsa image runs: the broker, mirror, audit and lag services and the
# tools (pyspark and Airflow belong to the analysis image)
RUNTIME_REQUIREMENTS = ("prometheus-client>=0.20", "zstandard>=0.22", "lz4>=4.3", "kazoo>=2.10",
                        "fastavro>=1.9", "sqlalchemy>=2.0", "alembic>=1.12",
                        "psycopg[binary]>=3.1", "setuptools>=68", "wheel")
SOURCE_ITEMS = ("pyproject.toml", "setup.py", "README.md", "broker", "mirror", "audit",
                "schemas", "infra", "hadoop_loader", "config")


def log(msg: str) -> None:
    print(f"[images {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def version() -> tuple[str, str]:
    """(the project's version, the git revision)."""
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        v = next((line.split("=", 1)[1].strip().strip('"') for line in f
                  if line.startswith("version")), "dev")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True).stdout.strip() or "unknown"
    return v, rev


def docker(*args: str, env: dict, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], env=env, check=check, **kw)


def has_image(name: str, env: dict) -> bool:
    return docker("image", "inspect", name, env=env, check=False,
                  capture_output=True).returncode == 0


def image_size(name: str, env: dict) -> int:
    out = docker("image", "inspect", "--format", "{{.Size}}", name, env=env,
                 capture_output=True, text=True)
    return int(out.stdout.strip())


def build_base(env: dict) -> float:
    """debootstrap + docker import, unless the engine has the image."""
    if has_image(BASE, env):
        log(f"{BASE}: present")
        return 0.0
    if not shutil.which("debootstrap"):
        if os.geteuid() != 0:
            raise SystemExit("debootstrap is missing: sudo apt-get install debootstrap")
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq",
                        "--no-install-recommends", "debootstrap"], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="samsa-base-") as root:
        log(f"{BASE}: debootstrap --variant=minbase bookworm ...")
        subprocess.run(["debootstrap", "--variant=minbase", "bookworm", root, MIRROR],
                       check=True, stdout=subprocess.DEVNULL)
        # keep the image small: no apt lists or caches, no docs
        for sub in ("var/lib/apt/lists", "var/cache/apt", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
        os.makedirs(os.path.join(root, "var/lib/apt/lists/partial"), exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        docker("import", "--change", 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:'
               '/usr/bin:/sbin:/bin', "-", BASE, env=env, stdin=tar.stdout,
               stdout=subprocess.DEVNULL)
        tar.wait()
    took = time.monotonic() - started
    log(f"{BASE}: made in {took:.0f} s")
    return took


def samsa_context(directory: str) -> None:
    """The samsa image's build context: source and a wheelhouse."""
    src = os.path.join(directory, "src")
    os.makedirs(src)
    for item in SOURCE_ITEMS:
        path = os.path.join(ROOT, item)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(src, item), ignore=shutil.ignore_patterns(
                "__pycache__", "*.so", "*.pyc", "rendered", ".terraform*", "*.tfstate*"))
        elif os.path.exists(path):
            shutil.copy(path, src)
    wheels = os.path.join(directory, "wheels")
    cache = os.path.join(engine.cache_dir(), "wheelhouse")
    os.makedirs(cache, exist_ok=True)
    log("samsa: the wheelhouse of its runtime dependencies (pip download, cached) ...")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                    "--python-version", "3.11", "--platform", "manylinux2014_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--platform", "any",
                    "-d", cache, *RUNTIME_REQUIREMENTS], check=True)
    shutil.copytree(cache, wheels)
    with open(os.path.join(wheels, "requirements.txt"), "w") as f:
        f.write("\n".join(RUNTIME_REQUIREMENTS) + "\n")


def build(name: str, env: dict, ver: str, rev: str) -> dict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"samsa-{name}-") as ctx:
        shutil.copytree(os.path.join(HERE, name), ctx, dirs_exist_ok=True)
        if name == "samsa":
            samsa_context(ctx)
        tag = f"samsa/{name}:{ver}" if name != "samsa" else f"samsa/samsa:{ver}"
        log(f"{tag}: docker build ...")
        labels = {"title": f"samsa-{name}" if name != "samsa" else "samsa",
                  "source": SOURCE_URL, "version": ver, "revision": rev}
        docker("build", "--network", "host", "--build-arg", f"BASE={BASE}",
               *[arg for k, v in labels.items()
                 for arg in ("--label", f"org.opencontainers.image.{k}={v}")],
               "-t", tag, "-t", tag.rsplit(":", 1)[0] + ":latest", ctx, env=env,
               stdout=subprocess.DEVNULL if not os.environ.get("SAMSA_IMAGES_VERBOSE") else None)
    took = time.monotonic() - started
    size = image_size(tag, env)
    log(f"{tag}: {size / 1e6:.0f} MB, built in {took:.1f} s")
    return {"image": tag, "seconds": took, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated: " + ", ".join(IMAGES))
    p.add_argument("--list", action="store_true", help="print the images and exit")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.only.split(",")] if a.only else list(IMAGES)
    unknown = set(names) - set(IMAGES)
    if unknown:
        p.error(f"unknown images: {', '.join(sorted(unknown))}")
    if a.list:
        print("\n".join([BASE] + [f"samsa/{n}" for n in names]))
        return 0
    host = engine.up()
    env = {**os.environ, "DOCKER_HOST": host}
    log(f"engine: {host}")
    ver, rev = version()
    started = time.monotonic()
    result = {"date": dt.date.today().isoformat(), "engine": host, "version": ver,
              "revision": rev, "base_seconds": build_base(env),
              "base_bytes": image_size(BASE, env), "images": []}
    for name in names:
        result["images"].append(build(name, env, ver, rev))
    result["total_seconds"] = time.monotonic() - started
    log(f"done in {result['total_seconds']:.0f} s: " + ", ".join(
        f"{i['image']} {i['bytes'] / 1e6:.0f} MB ({i['seconds']:.0f} s)"
        for i in result["images"]))
    out = os.path.join(ROOT, "bench", "results", f"images-{result['date']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
