"""Build the project's container images offline (``make images``).

    python -m infra.docker.images              # every image, with the layer cache
    python -m infra.docker.images --only zookeeper,samsa
    python -m infra.docker.images --list       # what would be built

No registry is reached. The base image is made from the Debian archive with
``debootstrap --variant=minbase bookworm`` and ``docker import``ed as
``samsa/base:bookworm`` (once per engine: kept in its data root). The
service images install Debian packages on top of it (``docker build
--network host``: apt reaches the archive) and, for ``samsa`` and
``analysis``, the project from its own source with a wheelhouse of its
Python dependencies that pip downloads here, on the host, from the indexes
pip is configured with (the image's pip installs with ``--no-index``).

Each image gets OCI labels (title, source, version, revision: ``--label`` at
build time, the same for all). A multi-stage image's earlier stages are
built first and tagged (``samsa/<image>-<stage>:cache``), so that removing
the project's dangling images after the builds (superseded tags) keeps the
layer cache of those stages. The build times and sizes are printed and kept
in bench/results/images-<date>.json (``--only`` updates its images' entries).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.parse

from infra.docker import engine

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BASE = "samsa/base:bookworm"
SOURCE_URL = "https://github.com/samsa/samsa"      # org.opencontainers.image.source
#: the images the services run
SERVICE_IMAGES = ("zookeeper", "haproxy", "postgres", "samsa", "analysis")
#: the images of the tests alone: a cloud instance's stand-in (systemd, as root)
TEST_IMAGES = ("instance",)
IMAGES = SERVICE_IMAGES + TEST_IMAGES


def latest(name: str) -> str:
    """The tag the services run: ``samsa/<name>:latest`` (one of IMAGES)."""
    if name not in IMAGES:
        raise ValueError(f"no image {name!r}: {', '.join(IMAGES)}")
    return f"samsa/{name}:latest"

MIRROR = "http://deb.debian.org/debian"
# the images' Python: Debian bookworm's python3 (3.11) on its glibc (2.36), so
# a wheel for manylinux_2_5 .. manylinux_2_36 (or the legacy aliases) runs there
PYTHON_VERSION = "3.11"
PLATFORMS = (*(f"manylinux_2_{minor}_x86_64" for minor in range(5, 37)),
             "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "any")
# building the project from its source in the image (--no-build-isolation)
BUILD_REQUIREMENTS = ("setuptools>=68", "wheel")
# what the samsa image runs: the broker, mirror, audit and lag services and the
# tools (pyspark and Airflow belong to the analysis image)
RUNTIME_REQUIREMENTS = ("prometheus-client>=0.20", "zstandard>=0.22", "lz4>=4.3", "kazoo>=2.10",
                        "fastavro>=1.9", "sqlalchemy>=2.0", "alembic>=1.12",
                        "psycopg[binary]>=3.1",
                        # a cloud host's boot: python -m infra.host_secrets reads the
                        # secret store (boto3) and issues the host's certificate
                        "cryptography>=42", "boto3>=1.34", *BUILD_REQUIREMENTS)
# pure-Python packages PyPI has only as source (pyspark: a 456 MB sdist): made
# into a wheel on the host (pip wheel, which keeps it in pip's own cache)
SOURCE_ONLY = ("pyspark",)
SOURCE_ITEMS = ("pyproject.toml", "setup.py", "README.md", "broker", "mirror", "audit",
                "schemas", "infra", "hadoop_loader", "config")
# what images.py writes beside an image's Dockerfile in its build context
CONTEXT_ITEMS = ("src", "wheels")


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


def analysis_requirements() -> tuple[str, ...]:
    """What the analysis image runs: every dependency of the project and its
    ``airflow`` extra, as pyproject.toml lists them (pyspark, pyarrow, pandas,
    Apache Airflow — never apache-airflow-providers-apache-spark, which
    overwrites pyspark's files)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return (*project["dependencies"], *project["optional-dependencies"]["airflow"],
            *BUILD_REQUIREMENTS)


def _link_or_copy(source: str, target: str) -> str:
    """A hard link where the file system allows one (the wheelhouse is large),
    else a copy."""
    try:
        os.link(source, target)
        return target
    except OSError:
        return shutil.copy2(source, target)


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def wheelhouse(directory: str, name: str, requirements: tuple[str, ...]) -> None:
    """``directory``: the wheels of ``requirements`` and of everything they
    depend on, for the images' Python, and a requirements.txt pinning each
    to the version resolved here, so the image installs what the host chose.

    The wheels are downloaded on the host into a cache kept per image in the
    engine's cache directory (``wheelhouse/<name>``); the packages of
    SOURCE_ONLY are built into wheels first. Only the wheels of this
    resolution go into the build context, not older versions in the cache."""
    cache = os.path.join(engine.cache_dir(), "wheelhouse", name)
    os.makedirs(cache, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    target = ["--only-binary=:all:", "--python-version", PYTHON_VERSION,
              *(arg for platform in PLATFORMS for arg in ("--platform", platform))]
    log(f"{name}: the wheelhouse of its Python dependencies (pip download, cached) ...")
    source_only = [r for r in requirements if _requirement_name(r) in SOURCE_ONLY]
    if source_only:
        subprocess.run([*pip, "wheel", "-q", "--no-deps", "-w", cache, *source_only],
                       check=True)
    subprocess.run([*pip, "download", "-q", *target, "--find-links", cache, "-d", cache,
                    *requirements], check=True)
    with tempfile.TemporaryDirectory(prefix="samsa-wheels-") as tmp:
        report = os.path.join(tmp, "report.json")
        subprocess.run([*pip, "install", "-q", "--dry-run", "--ignore-installed", "--no-index",
                        "--find-links", cache, *target, "--report", report, *requirements],
                       check=True)
        with open(report) as f:
            chosen = json.load(f)["install"]
    os.makedirs(directory)
    pins = []
    for item in chosen:
        path = urllib.parse.unquote(urllib.parse.urlsplit(item["download_info"]["url"]).path)
        _link_or_copy(path, os.path.join(directory, os.path.basename(path)))
        pins.append(f"{item['metadata']['name']}=={item['metadata']['version']}")
    with open(os.path.join(directory, "requirements.txt"), "w") as f:
        f.write("\n".join(sorted(pins, key=str.lower)) + "\n")


def project_context(directory: str, name: str, items: tuple[str, ...],
                    requirements: tuple[str, ...]) -> None:
    """The build context of an image with the project inside: ``src/`` (the
    source ``items``) and ``wheels/`` (wheelhouse())."""
    src = os.path.join(directory, "src")
    os.makedirs(src)
    for item in items:
        path = os.path.join(ROOT, item)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(src, item), ignore=shutil.ignore_patterns(
                "__pycache__", "*.so", "*.pyc", "rendered", ".terraform*", "*.tfstate*"))
        elif os.path.exists(path):
            shutil.copy(path, src)
    wheelhouse(os.path.join(directory, "wheels"), name, requirements)


def samsa_context(directory: str) -> None:
    """The samsa image's build context: source and a wheelhouse."""
    project_context(directory, "samsa", SOURCE_ITEMS, RUNTIME_REQUIREMENTS)


def analysis_context(directory: str) -> None:
    """The analysis image's: the same source and the DAGs, and a wheelhouse
    with pyspark and Airflow."""
    project_context(directory, "analysis", SOURCE_ITEMS + ("dags",), analysis_requirements())


CONTEXTS = {"samsa": samsa_context, "analysis": analysis_context}


def stages(dockerfile: str) -> list[str]:
    """The named stages of a Dockerfile before its last one (the image)."""
    with open(dockerfile) as f:
        froms = [line.split() for line in f if line.upper().startswith("FROM ")]
    return [words[3] for words in froms[:-1] if len(words) == 4 and words[2].upper() == "AS"]


def prune(env: dict) -> None:
    """Remove the project's dangling images: tags a rebuild moved to a newer
    image, with their layers no other image uses (only images labelled with
    this project's source: another project's images on the same engine are
    left alone)."""
    out = docker("image", "prune", "-f", "--filter",
                 f"label=org.opencontainers.image.source={SOURCE_URL}", env=env,
                 capture_output=True, text=True)
    reclaimed = [line for line in out.stdout.splitlines() if "reclaimed" in line]
    log("removed the project's dangling images: " + (reclaimed[-1] if reclaimed else "none"))


def build(name: str, env: dict, ver: str, rev: str) -> dict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"samsa-{name}-") as ctx:
        shutil.copytree(os.path.join(HERE, name), ctx, dirs_exist_ok=True)
        if name in CONTEXTS:
            CONTEXTS[name](ctx)
        tag = f"samsa/{name}:{ver}"
        labels = {"title": f"samsa-{name}" if name != "samsa" else "samsa",
                  "source": SOURCE_URL, "version": ver, "revision": rev}
        label_args = [arg for k, v in labels.items()
                      for arg in ("--label", f"org.opencontainers.image.{k}={v}")]
        quiet = subprocess.DEVNULL if not os.environ.get("SAMSA_IMAGES_VERBOSE") else None
        # each earlier stage tagged: a tag keeps its layers (the cache of the
        # next build) out of the dangling images that prune() removes
        targets = [(["--target", stage], f"samsa/{name}-{stage}:cache")
                   for stage in stages(os.path.join(ctx, "Dockerfile"))]
        for target, stage_tag in targets:  # labelled as the project's (prune), untitled
            log(f"{stage_tag}: docker build --target {target[-1]} ...")
            docker("build", "--network", "host", "--build-arg", f"BASE={BASE}", *target,
                   "--label", f"org.opencontainers.image.source={SOURCE_URL}",
                   "-t", stage_tag, ctx, env=env, stdout=quiet)
        log(f"{tag}: docker build ...")
        docker("build", "--network", "host", "--build-arg", f"BASE={BASE}", *label_args,
               "-t", tag, "-t", latest(name), ctx, env=env, stdout=quiet)
    took = time.monotonic() - started
    size = image_size(tag, env)
    log(f"{tag}: {size / 1e6:.0f} MB, built in {took:.1f} s")
    return {"image": tag, "seconds": took, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated: " + ", ".join(IMAGES))
    p.add_argument("--list", action="store_true", help="print the images and exit")
    p.add_argument("--no-record", action="store_true",
                   help="do not write bench/results/images-<date>.json (make test builds so)")
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
    prune(env)
    result["total_seconds"] = time.monotonic() - started
    log(f"done in {result['total_seconds']:.0f} s: " + ", ".join(
        f"{i['image']} {i['bytes'] / 1e6:.0f} MB ({i['seconds']:.0f} s)"
        for i in result["images"]))
    if not a.no_record:
        save(result)
    return 0


def save(result: dict) -> None:
    """Append this run to bench/results/images-<date>.json (``runs``: each
    run's engine, revision, base image and total seconds, and the images it
    built), and keep ``images``: the latest size and build time of every
    image built that day."""
    out = os.path.join(ROOT, "bench", "results", f"images-{result['date']}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    try:
        with open(out) as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        earlier = {}
    runs = earlier.get("runs", [])
    runs.append(result)
    latest_of = {i["image"]: i for run in runs for i in run["images"]}
    with open(out, "w") as f:
        json.dump({"date": result["date"], "images": list(latest_of.values()), "runs": runs},
                  f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
