"""``samsa``: one installed command for every Samsa entry point.

``samsa COMMAND ARGS...`` is ``python -m MODULE ARGS...``, run in this
process (runpy, as ``python -m`` does): the same options, the same output,
the same exit status, each documented in ``samsa COMMAND --help`` (whose
usage line names the module). It only dispatches: no command's logic lives
here, and nothing is imported before a command is chosen, so ``samsa
--help`` and ``--version`` start quickly. ``pyproject.toml``'s
``[project.scripts]`` installs it.
"""
from __future__ import annotations

import argparse
import runpy
import sys
from dataclasses import dataclass

from broker.service_kit import cli


@dataclass(frozen=True)
class Command:
    name: str
    module: str                 # run as python -m MODULE
    summary: str
    prefix: tuple[str, ...] = ()    # arguments put before the user's (a tool's name)

    def equivalent(self) -> str:
        return " ".join(("python -m", self.module) + self.prefix)


COMMANDS = (
    Command("broker", "broker", "run a broker"),
    Command("topics", "broker.tools", "create, list, describe or delete topics", ("topics",)),
    Command("produce", "broker.tools", "send lines of stdin as messages", ("produce",)),
    Command("consume", "broker.tools", "print messages", ("consume",)),
    Command("offsets", "broker.tools", "earliest, latest or before-a-time offsets",
            ("offsets",)),
    Command("groups", "broker.tools", "consumer groups: list, describe, status, reset",
            ("groups",)),
    Command("reassign", "broker.tools", "move replicas of replicated partitions (drain a "
            "broker)", ("reassign",)),
    Command("elect-leaders", "broker.tools", "move the lead back to the preferred replicas",
            ("elect-leaders",)),
    Command("lag", "broker.lag", "the lag service (Burrow's rules, JSON and Prometheus)"),
    Command("mirror", "mirror", "mirror datacenter clusters into the analysis cluster"),
    Command("audit", "audit", "count a cluster's tier, serve the audit, report, db"),
    Command("loader", "hadoop_loader", "one warehouse load into Parquet (PySpark)"),
    Command("schemas", "schemas", "the schema registry: register, check, list, show, ..."),
    Command("lab", "infra.local", "the multi-datacenter lab: up, status, down"),
    Command("demo", "infra.local.pipeline", "the whole pipeline on this machine: up, down"),
    Command("render", "infra.render", "render the cloud environments' settings (--check)"),
)
BY_NAME = {c.name: c for c in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    width = max(len(c.name) for c in COMMANDS)
    listing = "\n".join(f"  {c.name:<{width}}  {c.summary}\n  {'':<{width}}  "
                        f"(= {c.equivalent()})" for c in COMMANDS)
    p = argparse.ArgumentParser(
        prog="samsa",
        description="Samsa, a log pipeline after the Kafka paper. Each command is the "
                    "python -m entry point\nnamed beside it, with the same options and exit "
                    "statuses (samsa COMMAND --help).\n\ncommands:\n" + listing,
        epilog="Examples:\n"
               "  samsa broker --port 9092 --data-dir /tmp/samsa\n"
               "  echo hello | samsa produce --topic clicks\n"
               "  samsa groups --cluster dc-a=127.0.0.1:2181/dc-a --status --all "
               "--fail-on STOP\n\n"
               + cli.exit_status(
                   (0, "samsa --help, samsa --version"),
                   (2, "no command, or an unknown one"),
                   ("*", "otherwise the command's own exit status (samsa COMMAND --help)")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("command", metavar="COMMAND", choices=list(BY_NAME),
                   help="one of the commands above")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the command's own options (samsa COMMAND --help)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    command = BY_NAME[args.command]
    sys.argv = [f"samsa {command.name}", *command.prefix, *args.args]
    # the module's own `sys.exit(main())` ends the process with its status
    runpy.run_module(command.module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
