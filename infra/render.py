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
chroot); and ``rendered/mirror-<mirror>.toml`` for each mirror, every
mirror setting with each cluster's ZooKeeper left as a template variable
(``${zookeeper.<cluster>}``) that Terraform fills in; and
``rendered/acls-<cluster>.toml``, the cluster's ACLs when it runs secured
(what each service needs there, as in the secured lab). The cloud's fixed ports and data directory replace the lab's port
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

from broker.service_kit import cli
from broker.service_kit.settings import ConfigError, to_toml
from infra.topology import Topology, load_topology, mirror_config

#: what the cloud's instances use instead of the lab's port layout
CLOUD_BROKER = {"port": 9092, "metrics_port": 9093, "data_dir": "/var/lib/samsa/log",
                "log_format": "json"}
#: given by each instance at start-up (module broker-cluster's user data;
#: the rack is the instance's availability zone)
PER_INSTANCE = ("broker_id", "host", "advertised_host", "zookeeper", "rack")


def broker_toml(topology: Topology, cluster: str) -> str:
    spec = topology.cluster(cluster)
    config = dataclasses.replace(spec.broker_config(0), **CLOUD_BROKER)
    lines = [line for line in to_toml(config).splitlines()
             if line.split(" = ", 1)[0].strip() not in PER_INSTANCE]
    head = [f"# Samsa broker settings of cluster {cluster!r}, rendered by python -m "
            f"infra.render from topology.toml:",
            "# do not edit; each instance adds --broker-id, --host, zookeeper and its zone as rack "
            "at start-up."]
    return "\n".join(head + lines).rstrip() + "\n"


#: the mirror's /metrics port on its instances
CLOUD_MIRROR_METRICS_PORT = 9095


def zookeeper_placeholder(cluster: str) -> str:
    """Where a cluster's ZooKeeper connect string goes in a rendered mirror
    file: a template variable Terraform fills (``templatestring``)."""
    return "${zookeeper.%s}" % cluster.replace("-", "_").replace(".", "_")


def mirror_toml(topology: Topology, mirror: str) -> str:
    config = dataclasses.replace(mirror_config(topology, mirror, 0), metrics_host="0.0.0.0",
                                 metrics_port=CLOUD_MIRROR_METRICS_PORT)
    text = to_toml(config)
    # the model's (lab) connect strings give way to the cloud's, known at apply time
    for ref in (*config.sources, config.target):
        text = text.replace(f'"{ref.zookeeper}"', f'"{zookeeper_placeholder(ref.name)}"')
    head = [f"# Samsa mirror settings of mirror {mirror!r}, rendered by python -m infra.render "
            f"from topology.toml:",
            "# do not edit; Terraform fills in each cluster's ZooKeeper (templatestring)."]
    return "\n".join(head + text.splitlines()).rstrip() + "\n"


def render(environment: str) -> dict[str, str]:
    """The rendered files of an environment directory: {relative path: text}."""
    topology = load_topology(os.path.join(environment, "topology.toml"))
    files = {os.path.join("rendered", f"broker-{c.name}.toml"): broker_toml(topology, c.name)
             for c in topology.clusters()}
    for m in topology.mirrors:
        files[os.path.join("rendered", f"mirror-{m.name}.toml")] = mirror_toml(topology, m.name)
    for c in topology.clusters():
        files[os.path.join("rendered", f"acls-{c.name}.toml")] = acls_toml(topology, c.name)
    return files


def acls_toml(topology: Topology, cluster: str) -> str:
    """The ACLs of ``cluster`` in a secured environment: exactly what each
    service needs there (infra/local/lab_security.cluster_acls, as in the
    secured lab), as ``python -m infra.host_secrets provision --acls`` reads them."""
    from infra.host_secrets import acls_toml as entries_toml
    from infra.local.lab_security import cluster_acls
    head = (f"# Samsa ACLs of cluster {cluster!r}, rendered by python -m infra.render from "
            f"topology.toml: do not edit.\n")
    return head + entries_toml(cluster_acls(topology, cluster))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m infra.render", description=__doc__,
        epilog=cli.exit_status(
            (0, "rendered; with --check: every rendered file is up to date"),
            (1, "--check: a rendered file differs from the topology or is missing (each "
                "named on stderr)"),
            (2, "bad usage, or an environment that cannot be rendered: no topology.toml, "
                "a topology that is not valid (one line on stderr)")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("environments", nargs="+", metavar="ENVIRONMENT_DIR")
    p.add_argument("--check", action="store_true",
                   help="compare with the committed files; exit 1 if any differs")
    args = p.parse_args(argv)
    stale = []
    for environment in args.environments:
        try:
            rendered = render(environment)
        except (ConfigError, OSError) as exc:
            return cli.fail(f"cannot render {environment}: {exc}")
        for relative, text in rendered.items():
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
