"""Bringing a network lab up and down: the keeper (keeper.py) run as a
detached process of the lab's state directory, its record in
``<state dir>/network/keeper.json``.

``NetworkLab(state_dir).up(topology)`` writes the topology beside it (if
the lab did not), starts the keeper and waits until it has built every
namespace (its hosts file) or died (the error then carries its log's tail).
``down()`` stops the keeper (SIGTERM; SIGKILL after a timeout) and checks
that its namespaces' holders are gone; a service still running in a host's
namespace keeps that namespace (the lab stops its services first).

Needs root (network namespaces), util-linux (unshare, nsenter, setpriv),
iproute2 and iptables: ``missing_requirements()`` says what is missing, for
tests to skip with the reason.
"""
from __future__ import annotations

import os
import shutil
import sys

from broker.service_kit import detached
from broker.service_kit.detached import DetachedProcess
from broker.service_kit.process import SupervisedProcess, tail, wait_until
from infra.local.network import control
from infra.local.network.control import NetworkLabError
from infra.local.network.plan import lab_id
from infra.topology import Topology, to_toml

TOOLS = ("ip", "iptables-restore", "nsenter", "unshare", "setpriv", "sleep")
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def missing_requirements() -> list[str]:
    """Why no network lab can be built on this machine (empty: it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces)")
    for tool in TOOLS:
        if shutil.which(tool) is None:
            missing.append(f"the {tool} command")
    if not os.path.exists("/dev/net/tun"):
        missing.append("/dev/net/tun")
    return missing


class NetworkLab:
    def __init__(self, state_dir: str, python: str | None = None) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.python = python or sys.executable
        self.directory = control.network_dir(self.state_dir)
        self.state_path = os.path.join(self.directory, "keeper.json")
        self.log_path = os.path.join(self.state_dir, "logs", "network.log")

    def keeper(self) -> DetachedProcess | None:
        try:
            state = detached.read_state(self.state_path)
        except detached.StateFileError as exc:
            raise NetworkLabError(str(exc)) from None
        return state[1][0] if state and state[1] else None

    def running(self) -> bool:
        keeper = self.keeper()
        return keeper is not None and keeper.alive()

    def up(self, topology: Topology | None = None, timeout: float = 60.0,
           seed: int | None = None) -> dict:
        """Build the network; the keeper's hosts document."""
        problems = missing_requirements()
        if problems:
            raise NetworkLabError("the network lab cannot run here: it needs "
                                  + ", ".join(problems))
        if self.running():
            raise NetworkLabError(f"a network lab already runs in {self.state_dir} "
                                  f"(keeper pid {self.keeper().pid}): down it first")
        os.makedirs(self.directory, exist_ok=True)
        if topology is not None:
            with open(os.path.join(self.state_dir, "topology.toml"), "w") as f:
                f.write(to_toml(topology))
        command = [self.python, "-m", "infra.local.network.keeper", "--state-dir",
                   self.state_dir] + ([] if seed is None else ["--seed", str(seed)])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, env.get("PYTHONPATH"))
                                            if p)
        hosts_path = os.path.join(self.directory, "hosts.json")
        if os.path.exists(hosts_path):
            os.unlink(hosts_path)          # left by a killed keeper
        proc = SupervisedProcess("network", command, self.log_path, cwd=self.state_dir,
                                 env=env)
        proc.start()
        record = DetachedProcess.of(proc)
        detached.write_state(self.state_path, [record], state_dir=self.state_dir)
        built = wait_until(lambda: os.path.exists(hosts_path) or proc.poll() is not None,
                           timeout)
        if not built or proc.poll() is not None:
            why = "was not ready after %.0f s" % timeout if not built else proc.exit_status()
            self.down()
            raise NetworkLabError(f"the network lab's keeper {why}\n----- last lines of "
                                  f"{self.log_path} -----\n{tail(self.log_path, 20)}")
        return control.hosts(self.state_dir)

    def down(self, timeout: float = 10.0) -> bool:
        """Stop the keeper; whether one was running."""
        keeper = self.keeper()
        if keeper is None:
            return False
        was = bool(keeper.leftovers())
        left = detached.stop([keeper], timeout)
        if left:
            raise NetworkLabError(f"the network lab's keeper (pid {keeper.pid}) did not stop")
        for name in ("keeper.json", "hosts.json", "control.sock"):
            path = os.path.join(self.directory, name)
            if os.path.exists(path):
                os.unlink(path)
        # the kernel frees a namespace (and the management cable's end here)
        # a moment after its last process: wait, so that an `up` right after
        # finds the range free
        cable = f"/sys/class/net/samsa{lab_id(self.state_dir)}"
        if not wait_until(lambda: not os.path.exists(cable), timeout):
            raise NetworkLabError(f"{os.path.basename(cable)} is still there {timeout:.0f} s "
                                  f"after the keeper stopped: a process of the lab still "
                                  f"runs in the router's namespace")
        return was

    def status(self) -> dict:
        """The keeper's status answer plus its hosts; NetworkLabError when
        none runs."""
        if not self.running():
            raise NetworkLabError(f"no network lab runs in {self.state_dir}")
        answer = control.request(self.state_dir, "status")
        answer["hosts"] = control.hosts(self.state_dir)["hosts"]
        return answer

