"""python -m infra.local up|status|down: the multi-datacenter lab on this machine.

The commands only parse options, call ``infra.local.lab.Lab`` (up, down) or
``infra.local.status`` (status) and print; the lab's processes outlive them
(``status`` and ``down`` find them again through the state directory).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from broker.service_kit import cli, settings
from broker.service_kit.settings import ConfigError
from infra.local import status as environment_status
from infra.local.lab import DEFAULT_TOPOLOGY, LAB_RUNTIMES, Lab, LabError
from infra.topology import Topology

DEFAULT_STATE_DIR = ".lab"
EXIT_STATUS = cli.exit_status(
    (0, "up: the lab is up; status: every process runs and every broker is registered; "
        "down: stopped, or nothing was running (it says so)"),
    (1, "up failed (what it started is taken down); status: a process or a broker is "
        "missing; the lab's state cannot be read"),
    (2, "bad usage or bad settings for up (nothing was started)"),
    (130, "interrupted (Ctrl-C)"))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=os.environ.get("SAMSA_LAB_DIR", DEFAULT_STATE_DIR),
                        metavar="STATE_DIR",
                        help="the lab's state directory: state file, logs, data "
                             f"(default $SAMSA_LAB_DIR or {DEFAULT_STATE_DIR})")
    common.add_argument("-q", "--quiet", action="store_true",
                        help="print only warnings and errors of the lab's progress")
    parser = argparse.ArgumentParser(
        prog="python -m infra.local",
        description="The multi-datacenter lab of the Kafka paper's section 5 on this machine: "
                    "one ZooKeeper ensemble; per datacenter a Samsa cluster behind an HAProxy "
                    "load balancer; an analysis cluster; mirrors copying the datacenters into "
                    "it. Processes run detached and outlive the command; the state directory "
                    "holds what runs, the logs (logs/<process>.log) and the data.",
        epilog="Examples:\n"
               "  python -m infra.local up                       # the default topology\n"
               "  python -m infra.local up --set base_port=29000 --set datacenters.dc-a.brokers=3\n"
               "  python -m infra.local up --runtime containers    # the images of make images\n"
               "  python -m infra.local status                   # or --json\n"
               "  python -m infra.local down --purge             # also delete logs and data\n"
               "Topology file format: docs/multi-dc.md and infra/topology.py.\n\n"
               + EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser(
        "up", parents=[common], help="start the lab and wait until every part is ready",
        description="Start ZooKeeper, every broker, every load balancer and every mirror, "
                    "each waited for (registered in ZooKeeper, backends UP, /metrics "
                    "answering), then the monitoring: a lag service over every cluster and "
                    "Prometheus (Debian's prometheus) scraping every process with the alert "
                    "rules of infra/prometheus/alerts.yml, each on a free port that status "
                    "shows (in the netns runtime, each in its host, on a fixed port). If anything fails, what was started is taken down and the "
                    "error shows the tail of the failing process's log. Refused when a lab "
                    "already runs in the state directory.")
    cli.add_settings_options(
        up, config_flags=("--topology", "--config"), log_defaults=None,
        config_help="topology file (TOML; default infra/local/topology.toml)",
        set_example="--set base_port=29000 --set datacenters.dc-a.brokers=3 "
                    "--set mirrors.to-analysis.processes=1 (an array's table by its name)")
    up.set_defaults(config=DEFAULT_TOPOLOGY)
    up.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                    help="how long each step may take to be ready (default 60)")
    up.add_argument("--insecure", action="store_true",
                    help="run the lab open: plaintext listeners, no users, no ACLs, no "
                         "ZooKeeper identities. Without it the lab runs secured (TLS "
                         "listeners asking for SCRAM-SHA-512, ACLs, ZooKeeper on TLS alone "
                         "with identities, "
                         "a certificate authority and secrets made in STATE_DIR/security; "
                         "docs/security.md) unless the topology's [security] table or "
                         "--set security.enabled says otherwise")
    up.add_argument("--no-mirrors", action="store_true",
                    help="leave the mirrors out (start only ZooKeeper, brokers, load balancers)")
    up.add_argument("--no-monitoring", action="store_true",
                    help="leave out the lag service and Prometheus (they run in the "
                         "processes and netns runtimes; --only leaves them out too)")
    up.add_argument("--only", metavar="COMPONENT",
                    help="start one component of the topology in this state directory: "
                         "zookeeper, cluster:NAME (its brokers and load balancer) or "
                         "mirror:NAME; the others run from state directories of their own "
                         "(how Terraform's local environment runs each as a resource)")
    up.add_argument("--runtime", choices=LAB_RUNTIMES, default="processes",
                    help="processes (default): this checkout's code, run by this Python; "
                         "containers: each process a container of the project's images "
                         "(samsa/zookeeper, samsa/samsa, samsa/haproxy: `make images`), with "
                         "host networking, the state directory mounted at the same path, run "
                         "as you; the engine is DOCKER_HOST's, else the default socket's, else "
                         "the project's own dockerd (python -m infra.docker.engine); "
                         "netns: this checkout's processes, each in the network namespace "
                         "of its host, datacenters joined by the WAN links of the "
                         "topology's [network] table (root; docs/network-lab.md)")

    status = sub.add_parser(
        "status", parents=[common], help="show what runs and how it is doing",
        description="Each process (alive, pid, ports), ZooKeeper's members, each cluster's "
                    "registered brokers and topics, each load balancer's backends (UP/DOWN, "
                    "connections), each mirror's lag in bytes (its group's committed offsets "
                    "against the source brokers' latest offsets), the lag service's URL, and "
                    "Prometheus's URL, targets up and alerts firing. STATE_DIR is a lab's or "
                    "Terraform's local environment's (.tf-local: each component in a "
                    "directory of its own, with the audit service and Airflow). Exit status 0 "
                    "when every process runs and every broker is registered, 1 otherwise.")
    status.add_argument("--json", action="store_true", help="print JSON instead of text")

    down = sub.add_parser(
        "down", parents=[common], help="stop every process of the lab",
        description="Stop Prometheus, the lag service and mirrors, then load balancers and "
                    "brokers, then ZooKeeper (SIGTERM, SIGKILL after --timeout), check that no "
                    "process is left and remove the state file. Logs and data stay unless "
                    "--purge.")
    down.add_argument("--purge", action="store_true",
                      help="also delete the state directory: logs and data")
    down.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS",
                      help="how long to wait after SIGTERM before SIGKILL (default 15)")
    for command in (up, status, down):
        cli.end_help_with(command, EXIT_STATUS)
    return parser


def cmd_up(args: argparse.Namespace) -> int:
    values = cli.settings_values(args)
    security = values.setdefault("security", {})
    if args.insecure:
        security["enabled"] = False
    else:
        security.setdefault("enabled", True)      # secured unless the topology says
    if args.print_config:
        cli.print_config(Topology, values)
        return 0
    topology = settings.build(Topology, values)
    lab = Lab(topology, args.dir, runtime=args.runtime)
    lab.up(timeout=args.timeout, mirrors=not args.no_mirrors, only=args.only,
           monitoring=not args.no_monitoring and args.only is None)
    if args.only:
        print(f"{args.only} is up: {len(lab.records)} processes, state in {lab.state_dir}")
    else:
        print(environment_status.render(lab.status()))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    status = environment_status.report(environment_status.open_environment(args.dir))
    print(json.dumps(status, indent=2) if args.json else environment_status.render(status))
    return 0 if environment_status.healthy(status) else 1


def cmd_down(args: argparse.Namespace) -> int:
    try:
        lab = Lab.open(args.dir)
    except LabError:
        if args.purge and os.path.isdir(args.dir):
            import shutil
            shutil.rmtree(args.dir)
            print(f"no lab was running; removed {args.dir}")
            return 0
        print(f"no lab in {os.path.abspath(args.dir)}: nothing to stop")
        return 0
    stopped = lab.down(purge=args.purge, timeout=args.timeout)
    print(f"stopped {len(stopped)} processes" + (f": {', '.join(stopped)}" if stopped else "")
          + ("; removed " + lab.state_dir if args.purge else
             f"; logs and data kept in {lab.state_dir}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)-7s %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    # kazoo logs every failed connection attempt: the lab says it once, clearly
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    # the cluster views of `status` log each broker list they read
    logging.getLogger("broker.coordination").setLevel(logging.WARNING)
    try:
        return {"up": cmd_up, "status": cmd_status, "down": cmd_down}[args.command](args)
    except (LabError, ConfigError) as exc:
        if isinstance(exc, ConfigError) and args.command == "up":
            return cli.fail(exc)        # the settings given to up: exit 2, as every service
        print(f"error: {exc}", file=sys.stderr)   # a lab's state that cannot be read: 1
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
