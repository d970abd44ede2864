"""Every command line as a script meets it: ``--version`` and an "Exit
status:" table in ``--help`` on each ``python -m`` entry point and each
sub-command, and the installed ``samsa`` command (``make setup`` installs
it beside this Python) dispatching to them with their exit statuses."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest

from broker.commands import COMMANDS
from broker.service_kit import version
from schemas.cli import samsa_version

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMSA = pathlib.Path(sys.executable).parent / "samsa"
ENTRY_POINTS = ["broker", "broker.tools", "mirror", "broker.lag", "audit", "hadoop_loader",
                "schemas", "infra.local", "infra.local.pipeline", "infra.render",
                "infra.local.network"]
#: entry points with sub-commands, and theirs
SUBCOMMANDS = [("broker.tools", c) for c in ("produce", "consume", "topics", "offsets",
                                             "groups", "reassign", "elect-leaders", "users",
                                             "acls", "zookeeper-acls")] \
    + [("audit", c) for c in ("count", "serve", "report", "db")] \
    + [("infra.local", c) for c in ("up", "status", "down")] \
    + [("infra.local.network", c) for c in ("up", "down", "status", "shape", "cut", "heal",
                                            "reset", "isolate", "block", "unblock", "exec")] \
    + [("schemas", c) for c in ("register", "check", "list", "show", "config", "bootstrap",
                                "sync", "shipped")]


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60, check=False,
                          cwd=ROOT)


def pyproject_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def samsa(*args: str) -> subprocess.CompletedProcess:
    assert SAMSA.exists(), f"{SAMSA} is missing: make setup installs the samsa command"
    return run(str(SAMSA), *args)


def test_the_version_is_the_packages_else_pyprojects(monkeypatch):
    assert version.package_version() == metadata.version("samsa") == pyproject_version()
    assert samsa_version() == version.package_version()      # the schemas twin agrees

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", not_installed)
    assert version.package_version() == samsa_version() == pyproject_version()


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_every_entry_point_has_version_and_exit_statuses(module):
    shown = run(sys.executable, "-m", module, "--version")
    assert (shown.returncode, shown.stdout) == (0, f"samsa {pyproject_version()}\n"), \
        shown.stderr
    helped = run(sys.executable, "-m", module, "--help")
    assert helped.returncode == 0, helped.stderr
    assert re.search(r"Exit status:\s+0 ", helped.stdout), helped.stdout
    assert re.search(r"\b2\s+bad (usage|settings)", helped.stdout), helped.stdout


@pytest.mark.parametrize("module, command", SUBCOMMANDS, ids=[" ".join(s) for s in SUBCOMMANDS])
def test_every_subcommand_documents_its_exit_statuses(module, command):
    helped = run(sys.executable, "-m", module, command, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: python -m {module} {command}")
    assert "Exit status" in helped.stdout


def test_samsa_lists_every_command_and_its_module():
    helped = samsa("--help")
    assert helped.returncode == 0, helped.stderr
    for command in COMMANDS:
        assert f"  {command.name} " in helped.stdout
        assert f"(= {command.equivalent()})" in helped.stdout
    assert "Exit status" in helped.stdout
    assert samsa("--version").stdout == f"samsa {pyproject_version()}\n"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_samsa_runs_each_commands_own_help(command):
    helped = samsa(command.name, "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith(f"usage: {command.equivalent()}")
    assert "Exit status" in helped.stdout


def test_samsa_passes_the_commands_exit_status_through(tmp_path):
    assert samsa(*"demo --version".split()).stdout == f"samsa {pyproject_version()}\n"
    # bad usage of a command: the command's 2 and its one line
    missing = samsa("render", "--check", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and len(missing.stderr.splitlines()) == 1, missing.stderr
    # the command's own answer, through
    down = samsa("lab", "down", "--dir", str(tmp_path / "no-lab"))
    assert down.returncode == 0 and "nothing to stop" in down.stdout


@pytest.mark.parametrize("args, says", [([], "required: COMMAND"),
                                        (["nope"], "invalid choice: 'nope'")])
def test_samsa_without_a_known_command_is_bad_usage(args, says):
    done = samsa(*args)
    assert done.returncode == 2 and says in done.stderr
