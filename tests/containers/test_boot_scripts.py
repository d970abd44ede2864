"""The Terraform modules' boot scripts, run (issue 31, point 2): each script
a module renders runs in a Debian container standing in for its instance
(samsa/instance: systemd as its first process), whose container engine is
this machine's (its socket mounted), and the service it starts must answer.

The script is rendered by Terraform itself (``templatefile`` with the same
inputs the module gives it, but for the test's addresses, the image as this
checkout built it, no data volume and a state directory of the test's, the
same path on the instance and on the engine's host); a test holds the
module's inputs and the test's to the same names.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess

import pytest

from broker_helpers import wait_until
from infra.docker.images import latest

TERRAFORM = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "terraform")
ZOOKEEPER_MODULE = os.path.join(TERRAFORM, "modules", "zookeeper")
#: the ensemble's members: loopback addresses of their own, as each instance
#: has its own private address (their ports are the same, as in the cloud)
MEMBERS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")


def render(template: str, values: dict, directory) -> str:
    """``template`` rendered by ``terraform`` (templatefile), with
    ``boot_common`` the common steps' file and ``values`` the rest."""
    inputs = "\n".join(f"    {key} = {_hcl(value)}" for key, value in values.items())
    common = os.path.abspath(os.path.join(TERRAFORM, "boot", "common.sh"))
    (directory / "main.tf").write_text(
        f'output "script" {{\n  value = templatefile({_hcl(os.path.abspath(template))}, {{\n'
        f'    boot_common = file({_hcl(common)})\n{inputs}\n  }})\n}}\n')
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "TF_IN_AUTOMATION": "1",
           "CHECKPOINT_DISABLE": "1"}
    for command in (["apply", "-auto-approve", "-input=false", "-no-color"],
                    ["output", "-raw", "script"]):
        done = subprocess.run(["terraform", *command], cwd=directory, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    return done.stdout


def _hcl(value) -> str:
    if isinstance(value, int):
        return str(value)
    text = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("${", "$${")
    return f'"{text}"'


def module_template_inputs(module: str) -> set[str]:
    """The names a module passes to its user_data.sh.tftpl."""
    text = open(os.path.join(module, "main.tf")).read()
    call = text[text.index('templatefile("${path.module}/user_data.sh.tftpl", {'):]
    call = call[:call.index("})")]
    return set(re.findall(r"^\s*(\w+)\s*=", call, re.MULTILINE))


def four_letter_word(address: str, word: bytes, port: int = 2181) -> str:
    try:
        with socket.create_connection((address, port), timeout=2) as s:
            s.sendall(word)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode()
    except OSError:
        return ""


def mode(address: str) -> str | None:
    match = re.search(r"^Mode: (\w+)", four_letter_word(address, b"srvr"), re.MULTILINE)
    return match.group(1) if match else None


@pytest.fixture
def instances(containers, docker_host, tmp_path):
    """Start instance stand-ins: ``instances(name, state_dir)``; their
    services' containers (named by the scripts) removed at teardown."""
    socket_path = docker_host.removeprefix("unix://")
    started_services: list[str] = []

    def start(name: str, state_dir: str):
        return containers.run(
            name, latest("instance"), wait=False,
            files={"/sys/fs/cgroup": "/sys/fs/cgroup", "/run/docker.sock:rw": socket_path,
                   f"{state_dir}:rw": state_dir},
            tmpfs=("/run", "/run/lock"))

    start.services = started_services
    yield start
    if started_services:
        subprocess.run(["docker", "rm", "-f", *started_services], capture_output=True)


def boot(instance, script: str) -> subprocess.CompletedProcess:
    """Run ``script`` on ``instance`` as cloud-init runs user data: as root, once."""
    name = instance.container.get_wrapped_container().name
    wait_until(lambda: subprocess.run(
        ["docker", "exec", name, "systemctl", "is-system-running", "--wait"],
        capture_output=True, text=True).stdout.strip() in ("running", "degraded"), 60,
        what=f"systemd on {name}")
    return subprocess.run(["docker", "exec", "-i", name, "bash", "-s"], input=script,
                          capture_output=True, text=True, timeout=600)


def test_the_module_and_the_test_give_the_script_the_same_inputs():
    assert module_template_inputs(ZOOKEEPER_MODULE) == {
        "boot_common", "member_id", "address", "servers", "image", "data_device", "state_dir"}


def test_three_rendered_zookeeper_scripts_boot_an_ensemble_that_systemd_keeps_up(
        instances, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    servers = ",".join(f"{i + 1}={ip}:2888:3888" for i, ip in enumerate(MEMBERS))
    booted = []
    for i, address in enumerate(MEMBERS):
        member = i + 1
        script = render(os.path.join(ZOOKEEPER_MODULE, "user_data.sh.tftpl"), {
            "member_id": member, "address": address, "servers": servers,
            "image": latest("zookeeper"), "data_device": "", "state_dir": str(state)},
            _own_dir(tmp_path, f"render-{member}"))
        instance = instances(f"zookeeper-instance-{member}", str(state))
        instances.services.append(f"zookeeper-{member}")
        done = boot(instance, script)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        booted.append(instance)

    wait_until(lambda: sorted(str(mode(a)) for a in MEMBERS) == ["follower", "follower",
                                                                  "leader"],
               90, what=lambda: f"an ensemble of three: {[mode(a) for a in MEMBERS]}")
    # each member's data is on its instance's state directory, its id in myid
    for i in range(3):
        assert (state / f"zookeeper-{i + 1}" / "myid").read_text().strip() == str(i + 1)
    # the unit is systemd's: a member killed is started again
    name = booted[0].container.get_wrapped_container().name
    assert subprocess.run(["docker", "exec", name, "systemctl", "is-active",
                           "samsa-zookeeper-1"], capture_output=True,
                          text=True).stdout.strip() == "active"
    subprocess.run(["docker", "kill", "zookeeper-1"], check=True, capture_output=True)
    wait_until(lambda: mode(MEMBERS[0]) is None, 30, what="member 1 to go")
    wait_until(lambda: mode(MEMBERS[0]) in ("leader", "follower"), 90,
               what="systemd to start member 1 again and it to rejoin")


def _own_dir(tmp_path, name: str):
    path = tmp_path / name
    path.mkdir()
    return path
