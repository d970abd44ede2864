"""python -m infra.local.network: the network lab's own commands (its
hosts, links and faults), beside ``python -m infra.local`` (the lab's
processes)."""
from __future__ import annotations

import argparse
import json
import os
import sys

from broker.service_kit import cli, settings
from broker.service_kit.settings import ConfigError
from infra.local.lab import DEFAULT_TOPOLOGY
from infra.local.network import control
from infra.local.network.control import NetworkLabError
from infra.local.network.runner import NetworkLab
from infra.topology import Topology

EXIT_STATUS = cli.exit_status(
    (0, "done (status: the network lab runs)"),
    (1, "the keeper failed, refused the request, or no network lab runs"),
    (2, "bad usage or bad settings"))


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=os.environ.get("SAMSA_LAB_DIR", ".lab"),
                        metavar="STATE_DIR", help="the lab's state directory (default "
                                                  "$SAMSA_LAB_DIR or .lab)")
    parser = argparse.ArgumentParser(
        prog="python -m infra.local.network",
        description="The network lab: every host of the topology in a network namespace of "
                    "its own, each datacenter a /24 behind a router whose links between "
                    "datacenters add the latency, jitter, loss and bandwidth of the "
                    "topology's [[network.links]]. Needs root. docs/network-lab.md.",
        epilog="Examples:\n"
               "  python -m infra.local.network up --set network.subnet=10.78.0.0/16\n"
               "  python -m infra.local.network shape dc-a analysis --rtt-ms 100 --loss 0.005\n"
               "  python -m infra.local.network cut dc-a analysis --one-way\n"
               "  python -m infra.local.network isolate dc-b\n"
               "  python -m infra.local.network block dc-a.broker-0 dc-a.zookeeper-1\n"
               "  python -m infra.local.network heal\n"
               "  python -m infra.local.network exec dc-a.client -- ss -tn\n\n" + EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = sub.add_parser("up", parents=[common], help="build the namespaces, cables and router")
    cli.add_settings_options(up, config_flags=("--topology", "--config"), log_defaults=None,
                             config_help="topology file (default infra/local/topology.toml)",
                             set_example="--set network.subnet=10.78.0.0/16")
    up.set_defaults(config=DEFAULT_TOPOLOGY)
    up.add_argument("--seed", type=int, help="seed of the links' loss and jitter")
    sub.add_parser("down", parents=[common], help="stop the keeper: the namespaces go")
    status = sub.add_parser("status", parents=[common], help="links, counters, hosts")
    status.add_argument("--json", action="store_true")
    for name, what in (("shape", "change a link's latency, jitter, loss or bandwidth"),
                       ("cut", "drop every packet of a link"),
                       ("heal", "let a link (every link, and every host) carry again")):
        command = sub.add_parser(name, parents=[common], help=what)
        command.add_argument("source", nargs="?" if name == "heal" else None,
                             metavar="FROM", help="a datacenter")
        command.add_argument("target", nargs="?" if name == "heal" else None,
                             metavar="TO", help="the other datacenter")
        command.add_argument("--one-way", action="store_true",
                             help="only FROM -> TO (default: both ways)")
        if name == "shape":
            command.add_argument("--rtt-ms", type=float)
            command.add_argument("--jitter-ms", type=float)
            command.add_argument("--loss", type=float, help="a fraction: 0.001 is 0.1 %%")
            command.add_argument("--rate-mbit", type=float, help="0: unlimited")
    sub.add_parser("reset", parents=[common],
                   help="every link back to the topology's shape, every block lifted")
    isolate = sub.add_parser("isolate", parents=[common],
                             help="cut a datacenter off from every other")
    isolate.add_argument("datacenter")
    block = sub.add_parser("block", parents=[common],
                           help="cut a host off from some hosts only (e.g. its ZooKeeper)")
    block.add_argument("host")
    block.add_argument("peers", nargs="+")
    unblock = sub.add_parser("unblock", parents=[common], help="lift a host's blocks")
    unblock.add_argument("host")
    execute = sub.add_parser("exec", parents=[common],
                             help="run a command in a host's network namespace")
    execute.add_argument("host")
    execute.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    for command in sub.choices.values():
        cli.end_help_with(command, EXIT_STATUS)
    return parser


def render(status: dict) -> str:
    lines = ["links:"]
    for link in status["links"]:
        c = link["counters"]
        lines.append(f"  {link['from']:>12} -> {link['to']:<12} {link['describe']:<40} "
                     f"{c['packets']} packets, {c['cut'] + c['lost'] + c['overflowed']} "
                     f"dropped")
    lines.append(f"queued in the router: {status['queued']} packets")
    if status["blocks"]:
        lines.append("blocks: " + "; ".join(f"{h} from {', '.join(p)}"
                                            for h, p in status["blocks"].items()))
    lines.append("hosts:")
    for name, host in status["hosts"].items():
        lines.append(f"  {name:<28} {host['address']:<15} {host['datacenter']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    lab = NetworkLab(args.dir)
    try:
        if args.command == "up":
            topology = settings.build(Topology, cli.settings_values(args))
            document = lab.up(topology, seed=args.seed)
            print(f"network lab up: {len(document['hosts'])} hosts in "
                  f"{len(document['datacenters'])} datacenters, {document['subnet']}; "
                  f"this machine reaches them as {document['root_address']}")
            return 0
        if args.command == "down":
            print("network lab stopped" if lab.down() else "no network lab was running")
            return 0
        if args.command == "status":
            status = lab.status()
            print(json.dumps(status, indent=2) if args.json else render(status))
            return 0
        if args.command == "exec":
            argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            if not argv:
                return cli.fail("exec needs a command after --")
            command = control.enter_command(args.dir, args.host, argv)
            os.execvp(command[0], command)
        fields: dict = {}
        op = args.command
        if op in ("shape", "cut", "heal") and args.source:
            if not args.target:
                return cli.fail(f"{op} needs FROM and TO")
            fields = {"from": args.source, "to": args.target, "both": not args.one_way}
        if op == "shape":
            fields.update({k: v for k, v in (("rtt_ms", args.rtt_ms),
                                             ("jitter_ms", args.jitter_ms),
                                             ("loss", args.loss),
                                             ("rate_mbit", args.rate_mbit)) if v is not None})
        elif op == "isolate":
            fields = {"datacenter": args.datacenter}
        elif op == "block":
            fields = {"host": args.host, "peers": args.peers}
        elif op == "unblock":
            fields = {"host": args.host}
        status = control.request(args.dir, op, **fields)
        status["hosts"] = control.hosts(args.dir)["hosts"]
        print(render(status))
        return 0
    except ConfigError as exc:
        return cli.fail(exc)
    except NetworkLabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
