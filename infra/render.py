"""The services' configuration for machines elsewhere (Terraform's cloud
environments), rendered from the same topology model the local lab runs
(infra/topology.py): one source of truth.

    python -m infra.render infra/terraform/environments/production          # write
    python -m infra.render --check infra/terraform/environments/production  # compare

An environment directory holds ``topology.toml`` (its datacenters, analysis
cluster, mirrors and their settings, as the lab's file); this writes
``rendered/broker-<cluster>.toml`` for each cluster: every broker setting
with its value (the code's defaults included), but for what each instance
adds at start-up (its id, its address, ``zookeeper`` with the cluster's
chroot). The cloud's fixed ports and data directory replace the lab's port
layout. The rendered files are committed beside the environment and read by
its Terraform (``file(...)``); ``--check`` (run by the tests) fails when a
default changed in the code and the files were not rendered again, so what
Terraform deploys never silently diverges from the code.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from broker.settings import to_toml
from infra.topology import Topology, load_topology

#: what the cloud's instances use instead of the lab's port layout
CLOUD_BROKER = {"port": 9092, "metrics_port": 9093, "data_dir": "/var/lib/samsa/log",
                "log_format": "json"}
#: given by each instance at start-up (module broker-cluster's user data)
PER_INSTANCE = ("broker_id", "host", "advertised_host", "zookeeper")


def broker_toml(topology: Topology, cluster: str) -> str:
    spec = topology.cluster(cluster)
    config = dataclasses.replace(spec.broker_config(0), **CLOUD_BROKER)
    lines = [line for line in to_toml(config).splitlines()
             if line.split(" = ", 1)[0].strip() not in PER_INSTANCE]
    head = [f"# Samsa broker settings of cluster {cluster!r}, rendered by python -m "
            f"infra.render from topology.toml:",
            "# do not edit; each instance adds --broker-id, --host and zookeeper at start-up."]
    return "\n".join(head + lines).rstrip() + "\n"


def render(environment: str) -> dict[str, str]:
    """The rendered files of an environment directory: {relative path: text}."""
    topology = load_topology(os.path.join(environment, "topology.toml"))
    return {os.path.join("rendered", f"broker-{c.name}.toml"): broker_toml(topology, c.name)
            for c in topology.clusters()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m infra.render", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("environments", nargs="+", metavar="ENVIRONMENT_DIR")
    p.add_argument("--check", action="store_true",
                   help="compare with the committed files; exit 1 if any differs")
    args = p.parse_args(argv)
    stale = []
    for environment in args.environments:
        for relative, text in render(environment).items():
            path = os.path.join(environment, relative)
            if args.check:
                try:
                    with open(path) as f:
                        same = f.read() == text
                except FileNotFoundError:
                    same = False
                if not same:
                    stale.append(path)
            else:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
                print(path)
    if stale:
        print("stale (render again: python -m infra.render " + " ".join(args.environments)
              + "):\n  " + "\n  ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
