"""The Docker engine the images are built with and the container tests use.

    python -m infra.docker.engine up      # print DOCKER_HOST=... (starting one if needed)
    python -m infra.docker.engine status
    python -m infra.docker.engine down    # stop the dockerd this project started
    python -m infra.docker.engine down-if-idle   # the same, unless containers run on it

An engine the user already has is used as it is: ``DOCKER_HOST``, else the
default socket (/var/run/docker.sock) when it answers. Otherwise the project
starts its own ``dockerd`` — never a system one — with its data root in a
cache directory that survives between runs on one machine (layers and
images are kept), its own socket and pid file, and no bridge network
(``--bridge=none --iptables=false --ip-masq=false``): containers run with
host networking only, because traffic to private-range addresses is
forbidden on the machines this project is built on. Debian's ``docker.io``
is installed with apt when dockerd is missing and this runs as root.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

from broker.service_kit.process import wait_until

DEFAULT_SOCKET = "/var/run/docker.sock"


def cache_dir() -> str:
    """Where the project's own engine keeps its data (SAMSA_DOCKER_CACHE)."""
    return os.environ.get("SAMSA_DOCKER_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "samsa-docker")


def _paths() -> dict[str, str]:
    base = cache_dir()
    return {"base": base, "data": os.path.join(base, "data"),
            "socket": os.path.join(base, "docker.sock"),
            "pidfile": os.path.join(base, "dockerd.pid"),
            "log": os.path.join(base, "dockerd.log"),
            "exec": os.path.join(base, "exec")}


def answers(host: str, timeout: float = 10.0) -> bool:
    """Does a Docker engine answer at ``host`` (unix://... or tcp://...)?"""
    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        out = subprocess.run([docker, "version", "--format", "{{.Server.Version}}"],
                             env={**os.environ, "DOCKER_HOST": host}, capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def existing_engine() -> str | None:
    """DOCKER_HOST or the default socket, if an engine answers there."""
    host = os.environ.get("DOCKER_HOST")
    if host:
        return host if answers(host) else None
    if os.path.exists(DEFAULT_SOCKET) and answers(f"unix://{DEFAULT_SOCKET}"):
        return f"unix://{DEFAULT_SOCKET}"
    return None


def own_pid() -> int | None:
    """The pid of the dockerd this project started, if it runs (a pid file
    left by a dockerd that died may name a pid reused by another program:
    that one is never ours to stop)."""
    try:
        with open(_paths()["pidfile"]) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/comm") as f:
            return pid if f.read().strip() == "dockerd" else None
    except (OSError, ValueError):
        return None


def ensure_installed() -> None:
    """dockerd and docker present, or installed from Debian (as root)."""
    if shutil.which("dockerd") and shutil.which("docker"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("dockerd is missing: install Debian's docker.io "
                         "(sudo apt-get install docker.io), or set DOCKER_HOST to an engine")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-qq",
                    "--no-install-recommends", "docker.io"], check=True, env=env)


def up(timeout: float = 60.0) -> str:
    """The DOCKER_HOST of a running engine: the user's, or the project's own."""
    host = existing_engine()
    if host:
        return host
    if os.environ.get("DOCKER_HOST"):
        raise SystemExit(f"DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer: start that "
                         f"engine, or unset DOCKER_HOST to use the default socket or the "
                         f"project's own dockerd")
    p = _paths()
    host = f"unix://{p['socket']}"
    if own_pid() and answers(host):
        return host
    ensure_installed()
    for d in (p["base"], p["data"], p["exec"]):
        os.makedirs(d, exist_ok=True)
    if os.path.exists(p["socket"]):
        os.unlink(p["socket"])                  # left by a dockerd that died
    log = open(p["log"], "ab")
    subprocess.Popen([shutil.which("dockerd"), "--data-root", p["data"], "--exec-root", p["exec"],
                      "--host", host, "--pidfile", p["pidfile"], "--bridge=none",
                      "--iptables=false", "--ip-masq=false"],
                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    if wait_until(lambda: answers(host, timeout=5), timeout, interval=0.2):
        return host
    raise SystemExit(f"dockerd did not answer at {host} within {timeout:.0f} s; see {p['log']}")


def down(timeout: float = 30.0) -> bool:
    """Stop the dockerd this project started (its containers stop with it).
    False if none ran."""
    pid = own_pid()
    if pid is None:
        _unmount_leftovers()
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    _unmount_leftovers()
    return True


def running_containers(host: str) -> list[str]:
    """Names of the containers running on the engine at ``host``."""
    out = subprocess.run(["docker", "ps", "--format", "{{.Names}}"], capture_output=True,
                         text=True, env={**os.environ, "DOCKER_HOST": host}, timeout=30)
    return out.stdout.split() if out.returncode == 0 else []


def down_if_idle() -> str:
    """Stop the project's dockerd unless containers run on it (a lab or a
    Terraform environment started as containers): what ``make test`` does
    at its end. Returns what was done, to print."""
    if own_pid() is None:
        _unmount_leftovers()
        return "no dockerd of this project runs"
    busy = running_containers(f"unix://{_paths()['socket']}")
    if busy:
        return (f"the project's dockerd keeps running: {len(busy)} container(s) run on it "
                f"({', '.join(busy[:5])}{', ...' if len(busy) > 5 else ''}); "
                f"`make images-down` stops it")
    down()
    return "stopped the project's dockerd"


def _unmount_leftovers() -> None:
    """dockerd leaves its host network namespace bind-mounted under the exec
    root (exec/netns/default) after it exits: unmount it, so nothing of the
    engine stays behind and its cache directory can be removed."""
    netns = os.path.join(_paths()["exec"], "netns")
    if not os.path.isdir(netns):
        return
    for name in os.listdir(netns):
        path = os.path.join(netns, name)
        if os.path.ismount(path):
            subprocess.run(["umount", "-l", path], check=False, capture_output=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["up", "down", "down-if-idle", "status"])
    a = p.parse_args(argv)
    if a.action == "up":
        print(f"DOCKER_HOST={up()}")
    elif a.action == "down-if-idle":
        print(down_if_idle())
    elif a.action == "down":
        print("stopped the project's dockerd" if down() else "no dockerd of this project runs")
    else:
        own = own_pid()
        own_host = f"unix://{_paths()['socket']}"
        host = existing_engine() or (own_host if own and answers(own_host) else None)
        print(f"engine: {host or 'none answering'}; the project's dockerd: "
              f"{f'pid {own}' if own else 'not running'} (data in {cache_dir()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
