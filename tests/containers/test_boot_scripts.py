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

import contextlib
import json
import os
import re
import socket
import ssl
import subprocess

import pytest

from broker_helpers import wait_until
from cloud_helpers import access_key, fill_secret_store, readable_by, role_metadata
from infra.docker.images import latest
from infra.local.cloud_stand_ins import InstanceMetadataStandIn

TERRAFORM = os.path.join(os.path.dirname(__file__), "..", "..", "infra", "terraform")
ZOOKEEPER_MODULE = os.path.join(TERRAFORM, "modules", "zookeeper")
BROKER_MODULE = os.path.join(TERRAFORM, "modules", "broker-cluster")
MIRROR_MODULE = os.path.join(TERRAFORM, "modules", "mirror")
AUDIT_MODULE = os.path.join(TERRAFORM, "modules", "audit")
ANALYSIS_MODULE = os.path.join(TERRAFORM, "modules", "analysis-stack")
RENDERED = os.path.join(TERRAFORM, "environments", "production", "rendered")
#: the broker's instance address (as the metadata stand-in gives it)
BROKER_ADDRESS = "127.0.0.31"
#: the ensemble's members: loopback addresses of their own, as each instance
#: has its own private address (their ports are the same, as in the cloud)
MEMBERS = ("127.0.0.21", "127.0.0.22", "127.0.0.23")
#: the secured environment's secrets (module secrets' name) and region
SECRETS, REGION = "samsa-boot", "us-east-1"
#: each instance's private DNS name in the metadata: the name its address
#: resolves back to. Here every member's connections to another come from
#: 127.0.0.1 (the kernel's source address on loopback), which resolves to
#: localhost; in a VPC, the instance's address to its ip-10-...internal name
LOOPBACK_NAME = "localhost"
#: the datacenter's load balancer's DNS name, which producers dial over TLS
LOAD_BALANCER_NAME = "samsa-boot-lb-0123456789.elb.us-east-1.amazonaws.com"


def render(template: str, values: dict, directory, local_values: dict | None = None) -> str:
    """``template`` rendered by ``terraform`` (templatefile), with
    ``boot_common`` the common steps' file and ``values`` the rest;
    ``local_values``: HCL expressions as locals (``local.NAME`` in values).
    ``ssm_agent_base`` is "" (no SSM agent: Amazon's bucket cannot be
    reached here) unless ``values`` give a stand-in's."""
    values = {"ssm_agent_base": "", **values}
    inputs = "\n".join(f"    {key} = {_hcl(value)}" for key, value in values.items())
    common = os.path.abspath(os.path.join(TERRAFORM, "boot", "common.sh"))
    local_block = "".join(f"  {key} = {expression}\n"
                          for key, expression in (local_values or {}).items())
    (directory / "main.tf").write_text(
        (f"locals {{\n{local_block}}}\n" if local_block else "")
        + f'output "script" {{\n  value = templatefile({_hcl(os.path.abspath(template))}, {{\n'
        f'    boot_common = file({_hcl(common)})\n{inputs}\n  }})\n}}\n')
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "TF_IN_AUTOMATION": "1",
           "CHECKPOINT_DISABLE": "1"}
    for command in (["apply", "-auto-approve", "-input=false", "-no-color"],
                    ["output", "-raw", "script"]):
        done = subprocess.run(["terraform", *command], cwd=directory, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    return done.stdout


class Hcl(str):
    """A value given to ``render`` as an HCL expression (as the module
    computes it: ``templatestring(...)``), not as a string."""


def _hcl(value) -> str:
    if isinstance(value, Hcl):
        return str(value)
    if isinstance(value, int):
        return str(value)
    # a JSON string is an HCL one, but for HCL's template sequences
    return json.dumps(str(value)).replace("${", "$${").replace("%{", "%%{")


@contextlib.contextmanager
def ssm_agent_bucket(tmp_path):
    """Amazon's bucket of the SSM agent, standing in (the real one cannot be
    reached here): a Debian package named amazon-ssm-agent, whose unit only
    waits, served over HTTP at the path the bucket has it. Yields the base
    URL a module passes (``ssm_agent_base``)."""
    import http.server
    import threading

    package = tmp_path / "ssm-package"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(
        "Package: amazon-ssm-agent\nVersion: 0.0.0-stand-in\nArchitecture: all\n"
        "Maintainer: Samsa tests <tests@samsa.invalid>\n"
        "Description: a stand-in of Amazon's SSM agent (tests/containers)\n")
    unit = package / "lib" / "systemd" / "system"
    unit.mkdir(parents=True)
    (unit / "amazon-ssm-agent.service").write_text(
        "[Unit]\nDescription=SSM agent (stand-in)\n\n[Service]\nExecStart=/bin/sleep infinity\n"
        "\n[Install]\nWantedBy=multi-user.target\n")
    arch = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True,
                          check=True).stdout.strip()
    served = tmp_path / "ssm-bucket" / "latest" / f"debian_{arch}"
    served.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(package),
                    str(served / "amazon-ssm-agent.deb")], check=True, capture_output=True)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *_args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: Quiet(*a, directory=str(tmp_path / "ssm-bucket")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/latest"
    finally:
        server.shutdown()
        server.server_close()


def hold_package_database(instance, tmp_path, seconds: int = 8) -> None:
    """Another install in progress on ``instance``, as unattended-upgrades
    runs at a fresh instance's first boot: a package whose preinst sleeps,
    installed by dpkg in the background, which holds dpkg's lock meanwhile.
    Returns once the lock is held; ``/run/busy-upgrade-done`` marks its end."""
    package = tmp_path / "busy-package"
    (package / "DEBIAN").mkdir(parents=True)
    (package / "DEBIAN" / "control").write_text(
        "Package: samsa-busy-upgrade\nVersion: 0.0.0\nArchitecture: all\n"
        "Maintainer: Samsa tests <tests@samsa.invalid>\n"
        "Description: holds dpkg's lock a while (tests/containers)\n")
    preinst = package / "DEBIAN" / "preinst"
    preinst.write_text(f"#!/bin/sh\ntouch /run/busy-upgrade-started\nsleep {seconds}\n"
                       "touch /run/busy-upgrade-done\n")
    preinst.chmod(0o755)
    deb = tmp_path / "busy.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(package), str(deb)],
                   check=True, capture_output=True)
    name = instance.container.get_wrapped_container().name
    subprocess.run(["docker", "cp", str(deb), f"{name}:/tmp/busy.deb"], check=True,
                   capture_output=True)
    subprocess.run(["docker", "exec", "-d", name, "dpkg", "-i", "/tmp/busy.deb"], check=True)
    wait_until(lambda: subprocess.run(["docker", "exec", name, "test", "-e",
                                       "/run/busy-upgrade-started"]).returncode == 0, 30,
               what="the background install to hold dpkg's lock")


def wait_healthy(container: str, timeout: float = 60) -> None:
    """Until the image's health check calls ``container`` healthy."""
    def status() -> str:
        return subprocess.run(["docker", "inspect", "-f", "{{.State.Health.Status}}", container],
                              capture_output=True, text=True).stdout.strip()
    wait_until(lambda: status() == "healthy", timeout,
               what=lambda: f"{container}'s container to be healthy (it is {status()!r})")


def unit_state(instance, unit: str) -> str:
    name = instance.container.get_wrapped_container().name
    return subprocess.run(["docker", "exec", name, "systemctl", "is-active", unit],
                          capture_output=True, text=True).stdout.strip()


def module_template_inputs(module: str) -> set[str]:
    """The names a module passes to its user_data.sh.tftpl."""
    text = open(os.path.join(module, "main.tf")).read()
    call = text[text.index('templatefile("${path.module}/user_data.sh.tftpl", {'):]
    call = call[:call.index("})")]
    return set(re.findall(r"^\s*(\w+)\s*=", call, re.MULTILINE))


def four_letter_word(address: str, word: bytes, port: int = 2181,
                     context: ssl.SSLContext | None = None) -> str:
    """``word``'s answer from the member at ``address`` (over TLS with
    ``context``, the member's address checked against its certificate); ""
    when it gives none."""
    try:
        with contextlib.ExitStack() as stack:
            s = stack.enter_context(socket.create_connection((address, port), timeout=2))
            if context is not None:
                s = stack.enter_context(context.wrap_socket(s, server_hostname=address))
            s.sendall(word)
            chunks = []
            while chunk := s.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode()
    except OSError:
        return ""


def mode(address: str, context: ssl.SSLContext | None = None) -> str | None:
    match = re.search(r"^Mode: (\w+)", four_letter_word(address, b"srvr", context=context),
                      re.MULTILINE)
    return match.group(1) if match else None


@pytest.fixture
def instances(containers, docker_host, request):
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

    started_instances: list[str] = []

    def start_instance(name: str, state_dir: str):
        instance = start(name, state_dir)
        started_instances.append(instance.container.get_wrapped_container().name)
        return instance

    start_instance.services = started_services
    yield start_instance
    if any(getattr(getattr(request.node, f"rep_{when}", None), "failed", False)
           for when in ("setup", "call")):
        for name in started_services:
            logs = subprocess.run(["docker", "logs", "--tail", "40", name],
                                  capture_output=True, text=True)
            print(f"----- the service container {name}: last 40 lines -----\n"
                  f"{logs.stdout}{logs.stderr}")
        for name in started_instances:
            journal = subprocess.run(["docker", "exec", name, "journalctl", "--no-pager",
                                      "-n", "30", "-u", "samsa-*"], capture_output=True,
                                     text=True)
            print(f"----- the samsa units of {name}: last 30 journal lines -----\n"
                  f"{journal.stdout}{journal.stderr}")
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


#: where cloud-init keeps an instance's user data, and the scripts it runs at every boot
CLOUD_INIT_USER_DATA = "/var/lib/cloud/instance/scripts/part-001"
CLOUD_INIT_PER_BOOT = "/var/lib/cloud/scripts/per-boot/samsa-boot.sh"


def boot_as_cloud_init(instance, script: str) -> subprocess.CompletedProcess:
    """Run ``script`` as cloud-init runs user data: written to its file
    under /var/lib/cloud, then run from there, as root, once."""
    name = instance.container.get_wrapped_container().name
    subprocess.run(["docker", "exec", "-i", name, "sh", "-c",
                    f"mkdir -p {os.path.dirname(CLOUD_INIT_USER_DATA)} && "
                    f"cat > {CLOUD_INIT_USER_DATA} && chmod 0700 {CLOUD_INIT_USER_DATA}"],
                   input=script, text=True, check=True, capture_output=True)
    boot(instance, "true")                      # systemd up first
    return subprocess.run(["docker", "exec", name, CLOUD_INIT_USER_DATA],
                          capture_output=True, text=True, timeout=600)


def test_the_modules_and_the_tests_give_the_scripts_the_same_inputs():
    common = {"boot_common", "ssm_agent_base", "metadata_url", "image", "secrets",
              "secrets_endpoint"}
    assert module_template_inputs(ZOOKEEPER_MODULE) == common | {
        "member_id", "address", "servers", "tools_image", "data_device", "state_dir",
        "config_dir"}
    assert module_template_inputs(BROKER_MODULE) == common | {
        "broker_id", "zookeeper", "broker_config", "acls", "certificate_names", "data_device",
        "state_dir", "config_dir"}
    assert module_template_inputs(MIRROR_MODULE) == common | {
        "process", "mirror_config", "config_dir"}
    assert module_template_inputs(AUDIT_MODULE) == common | {
        "zookeeper", "db_host", "db_port", "db_name", "db_secret_arn", "config_dir"}
    assert module_template_inputs(ANALYSIS_MODULE) == common | {
        "warehouse_config", "db_host", "db_port", "db_name", "db_secret_arn", "state_dir",
        "config_dir"}


def boot_ensemble(instances, tmp_path, state, secured: dict | None = None,
                  context: ssl.SSLContext | None = None) -> tuple[list, list[str]]:
    """The three members' scripts, rendered and run on three instances: the
    instances and their scripts, once the ensemble has a leader and two
    followers. ``secured``: the secret store's endpoint and each member's
    metadata URL (``{"endpoint": ..., "metadata": [...]}``), and the members'
    TLS port asked with ``context``; else they run open."""
    servers = ",".join(f"{i + 1}={ip}:2888:3888" for i, ip in enumerate(MEMBERS))
    booted, scripts = [], []
    for i, address in enumerate(MEMBERS):
        member = i + 1
        script = render(os.path.join(ZOOKEEPER_MODULE, "user_data.sh.tftpl"), {
            "metadata_url": secured["metadata"][i] if secured else "http://169.254.169.254",
            "member_id": member, "address": address, "servers": servers,
            "image": latest("zookeeper"), "tools_image": latest("samsa"),
            "secrets": SECRETS if secured else "",
            "secrets_endpoint": secured["endpoint"] if secured else "",
            "data_device": "", "state_dir": str(state),
            "config_dir": str(state / f"etc-zookeeper-{member}")},
            _own_dir(tmp_path, f"render-{member}"))
        instance = instances(f"zookeeper-instance-{member}", str(state))
        instances.services.append(f"zookeeper-{member}")
        done = boot(instance, script)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        booted.append(instance)
        scripts.append(script)
    wait_until(lambda: sorted(str(mode(a, context)) for a in MEMBERS) == [
        "follower", "follower", "leader"], 90,
        what=lambda: f"an ensemble of three: {[mode(a, context) for a in MEMBERS]}")
    return booted, scripts


def test_three_rendered_zookeeper_scripts_boot_an_ensemble_that_systemd_keeps_up(
        instances, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    booted, scripts = boot_ensemble(instances, tmp_path, state)
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
    # the script run again (by hand, after a change) does what is missing and
    # restarts the member with its unit as it now says
    before = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", "zookeeper-1"],
                            capture_output=True, text=True).stdout
    again = boot(booted[0], scripts[0])
    assert again.returncode == 0, again.stderr[-3000:]
    wait_until(lambda: subprocess.run(["docker", "inspect", "-f", "{{.Id}}", "zookeeper-1"],
                                      capture_output=True, text=True).stdout not in ("", before),
               30, what="member 1's container started anew")
    wait_until(lambda: mode(MEMBERS[0]) in ("leader", "follower"), 90,
               what="member 1 to rejoin after the script ran again")


@pytest.mark.parametrize("cluster", ["dc-us-east", "analysis"])
def test_a_secured_broker_script_fits_ec2s_user_data_once_compressed(tmp_path, cluster):
    """EC2 takes 16 KB of user data at most (before base64). A secured
    broker's script, with production's rendered settings and ACLs, is over
    that as it is (the defect: AWS would have refused every broker), so
    module service-instances passes it gzip-compressed, which cloud-init
    unpacks."""
    import gzip
    script = render(os.path.join(BROKER_MODULE, "user_data.sh.tftpl"), {
        "ssm_agent_base": "https://amazon-ssm-us-east-1.s3.us-east-1.amazonaws.com/latest",
        "metadata_url": "http://169.254.169.254", "broker_id": 0,
        "zookeeper": "10.10.0.10:2181,10.10.16.10:2181,10.10.32.10:2181/" + cluster,
        "broker_config": open(os.path.join(RENDERED, f"broker-{cluster}.toml")).read(),
        "acls": open(os.path.join(RENDERED, f"acls-{cluster}.toml")).read(),
        "image": "111122223333.dkr.ecr.us-east-2.amazonaws.com/samsa/samsa:0.1.0-aaaaaaaaaaaa",
        "secrets": "samsa-prod", "secrets_endpoint": "",
        "certificate_names": Hcl(f'["{LOAD_BALANCER_NAME}"]'), "data_device": "/dev/xvdb",
        "state_dir": "/var/lib/samsa", "config_dir": "/etc/samsa"}, _own_dir(tmp_path, "render"))
    compressed = len(gzip.compress(script.encode()))
    assert compressed <= 16384, (len(script), compressed)
    instances = open(os.path.join(TERRAFORM, "modules", "service-instances", "main.tf")).read()
    assert "user_data_base64            = base64gzip(" in instances
    print(f"{cluster}: the broker's script is {len(script)} bytes, {compressed} compressed")


def test_a_rendered_broker_script_boots_a_broker_that_joins_the_ensemble(instances, tmp_path):
    from broker.client.cluster_producer import ClusterProducer
    from broker.coordination import paths
    from kazoo.client import KazooClient

    state = tmp_path / "state"
    state.mkdir()
    boot_ensemble(instances, tmp_path, state)
    zookeeper = ",".join(f"{a}:2181" for a in MEMBERS) + "/dc-us-east"
    metadata = InstanceMetadataStandIn({"local-ipv4": BROKER_ADDRESS,
                                        "placement/availability-zone": "us-east-1b"})
    with metadata.serving() as url, ssm_agent_bucket(tmp_path) as ssm_agent_base:
        script = render(os.path.join(BROKER_MODULE, "user_data.sh.tftpl"), {
            "ssm_agent_base": ssm_agent_base,
            "metadata_url": url, "broker_id": 0, "zookeeper": zookeeper,
            "broker_config": one_broker_settings(),
            "acls": open(os.path.join(RENDERED, "acls-dc-us-east.toml")).read(),
            "image": latest("samsa"), "secrets": "", "secrets_endpoint": "",
            "certificate_names": Hcl("[]"), "data_device": "", "state_dir": str(state),
            "config_dir": str(state / "etc-broker-0")}, _own_dir(tmp_path, "render-broker"))
        instance = instances("broker-instance-0", str(state))
        instances.services.append("broker-0")
        # unattended-upgrades installing at first boot: the script's
        # installs wait for dpkg's lock (plain dpkg failed at once, and the
        # instance came up without its SSM agent)
        boot(instance, "true")                  # systemd up first
        hold_package_database(instance, tmp_path)
        name = instance.container.get_wrapped_container().name
        # the boot starts while the lock is held (its second step installs)
        assert subprocess.run(["docker", "exec", name, "test", "-e",
                               "/run/busy-upgrade-done"]).returncode != 0
        done = boot_as_cloud_init(instance, script)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        # a container's /proc/sys is read-only: the WAN buffers are not in
        # effect, the script says so and goes on (tests/infra/test_boot_common.py
        # applies them on this machine's kernel)
        assert "warning: the WAN buffer sizes are not in effect" in done.stderr, done.stderr
        # the script installed itself among cloud-init's per-boot scripts
        name = instance.container.get_wrapped_container().name
        per_boot = subprocess.run(["docker", "exec", name, "cat", CLOUD_INIT_PER_BOOT],
                                  capture_output=True, text=True)
        assert per_boot.returncode == 0 and per_boot.stdout == script, per_boot.stderr
        mode = subprocess.run(["docker", "exec", name, "stat", "-c", "%a", CLOUD_INIT_PER_BOOT],
                              capture_output=True, text=True).stdout.strip()
        assert mode == "700"
        # a reboot: cloud-init runs the per-boot copy; it does what is
        # missing (nothing), restarts the unit, and installs no second copy
        again = subprocess.run(["docker", "exec", name, CLOUD_INIT_PER_BOOT],
                               capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        copies = subprocess.run(["docker", "exec", name, "ls", os.path.dirname(
            CLOUD_INIT_PER_BOOT)], capture_output=True, text=True).stdout.split()
        assert copies == [os.path.basename(CLOUD_INIT_PER_BOOT)]
    assert {"local-ipv4", "placement/availability-zone"} <= set(metadata.asked)
    # issue 31: the SSM agent (Session Manager) installed from the bucket and running
    assert unit_state(instance, "amazon-ssm-agent") == "active", done.stderr[-3000:]

    zk = KazooClient(hosts=zookeeper.split("/")[0], timeout=10)    # the chroot comes later
    zk.start(timeout=15)
    try:
        wait_until(lambda: zk.exists("/dc-us-east" + paths.broker_id_path(0)), 60,
                   what="the booted broker to register in the ensemble")
        registered = zk.get("/dc-us-east" + paths.broker_id_path(0))[0].decode()
        assert registered.startswith(f"{BROKER_ADDRESS}:9092"), registered
        assert zk.get("/dc-us-east" + paths.broker_rack_path(0))[0].decode() == "us-east-1b"
    finally:
        zk.stop()
        zk.close()
    with ClusterProducer(zookeeper, acks="flushed") as producer:
        sent = [producer.send("boot-check", b"event-%d" % i) for i in range(20)]
        producer.flush(timeout=60)
    assert [f.exception() for f in sent] == [None] * 20
    # the image's health check asks the metrics port where the broker binds it
    wait_healthy("broker-0")
    # its log is on the instance's state directory, its settings as rendered
    assert any((state / "broker-0" / "log").iterdir())
    assert (state / "etc-broker-0" / "broker.toml").read_text().startswith(
        "# Samsa broker settings of cluster 'dc-us-east'")


@pytest.mark.parametrize("zone", ["missing", "empty"])
def test_a_broker_without_a_zone_in_its_metadata_does_not_start(instances, tmp_path, zone):
    # its zone is its rack: a broker started without one would put a
    # partition's replicas in one zone
    state = tmp_path / "state"
    state.mkdir()
    metadata = InstanceMetadataStandIn({"local-ipv4": BROKER_ADDRESS} if zone == "missing" else
                                       {"local-ipv4": BROKER_ADDRESS,
                                        "placement/availability-zone": ""})
    with metadata.serving() as url:
        script = render(os.path.join(BROKER_MODULE, "user_data.sh.tftpl"), {
            "metadata_url": url, "broker_id": 0, "zookeeper": "127.0.0.21:2181/dc-us-east",
            "broker_config": one_broker_settings(), "acls": "", "image": latest("samsa"),
            "secrets": "", "secrets_endpoint": "", "certificate_names": Hcl("[]"),
            "data_device": "", "state_dir": str(state), "config_dir": str(state / "etc")},
            _own_dir(tmp_path, "render-broker"))
        instance = instances("broker-instance-nozone", str(state))
        done = boot(instance, script)
    assert done.returncode != 0
    assert "no instance metadata placement/availability-zone" in done.stderr, done.stderr
    name = instance.container.get_wrapped_container().name
    assert subprocess.run(["docker", "exec", name, "test", "-e",
                           "/etc/systemd/system/samsa-broker-0.service"]).returncode == 1


def test_a_rendered_mirror_script_copies_the_datacenters_into_analysis(
        instances, tmp_path, zookeeper, broker_factory):
    from broker.client.cluster_producer import ClusterProducer
    from cluster_helpers import Cluster, chroot_client, read_all

    clusters = {}
    for name in ("dc-us-east", "dc-eu-west", "analysis"):
        connect = zookeeper.connect_string(f"/boot-mirror-{name}")
        clusters[name] = Cluster(chroot_client(connect), connect, broker_factory)
        clusters[name].add_broker(0, {"log.flush_ms": 10})
    # the module's config: the rendered file with each cluster's ZooKeeper
    # filled in by templatestring, as module mirror's local.config
    rendered = os.path.abspath(os.path.join(RENDERED, "mirror-to-analysis.toml"))
    filled = ", ".join(f"{name.replace('-', '_')} = {_hcl(c.connect)}"
                       for name, c in clusters.items())
    script = render(os.path.join(MIRROR_MODULE, "user_data.sh.tftpl"), {
        # the SSM agent's bucket unreachable: the boot goes on without it
        "ssm_agent_base": "http://127.0.0.1:9/latest",
        "metadata_url": "http://169.254.169.254", "process": 0, "secrets": "",
        "secrets_endpoint": "",
        "mirror_config": Hcl(f"templatestring(local.template, {{ zookeeper = {{ {filled} }} }})"),
        "image": latest("samsa"), "config_dir": str(tmp_path / "etc-mirror-0")},
        _own_dir(tmp_path, "render-mirror"), {"template": f"file({_hcl(rendered)})"})
    assert 'group = "mirror-to-analysis"' in script
    instance = instances("mirror-instance-0", str(tmp_path))
    instances.services.append("mirror-0")
    done = boot(instance, script)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "warning: the SSM agent was not installed from http://127.0.0.1:9/latest/debian_" \
        in done.stderr, done.stderr[-3000:]
    assert unit_state(instance, "amazon-ssm-agent") != "active"

    with ClusterProducer(clusters["dc-us-east"].connect, acks="flushed") as producer:
        sent = [producer.send("page-views", b"view-%d" % i) for i in range(100)]
        producer.flush(timeout=30)
    assert [f.exception() for f in sent] == [None] * 100

    def copied() -> set[bytes]:
        try:
            return {m.value for ms in read_all(clusters["analysis"], "page-views").values()
                    for m in ms}
        except Exception:          # noqa: BLE001 - the topic is not there yet
            return set()

    wait_until(lambda: copied() == {b"view-%d" % i for i in range(100)}, 90,
               what=lambda: f"the booted mirror to copy 100 messages ({len(copied())} so far)")


def test_secured_scripts_boot_a_tls_ensemble_and_a_broker_only_users_reach(instances, tmp_path):
    # issue 30's cloud: every instance reads its secrets from the store with
    # its role's credentials (the metadata service's), issues its certificate
    # with the environment's authority, and its service runs secured
    from broker.client.cluster_producer import ClusterProducer
    from broker.coordination import paths
    from broker.coordination.zk import make_client, start_client
    from broker.coordination.zk_tls import ZooKeeperTls
    from kazoo.exceptions import NoAuthError

    standin, passwords, ca_cert = fill_secret_store(REGION, SECRETS, str(tmp_path / "operator"))
    context = ssl.create_default_context(cafile=ca_cert)
    state = tmp_path / "state"
    state.mkdir()
    zookeeper = ",".join(f"{a}:2181" for a in MEMBERS) + "/dc-us-east"
    with contextlib.ExitStack() as stack:
        endpoint = stack.enter_context(standin.serving())
        member_metadata = [InstanceMetadataStandIn({
            "local-ipv4": address, "local-hostname": LOOPBACK_NAME, "placement/region": REGION,
            **role_metadata("zookeeper")}) for address in MEMBERS]
        urls = [stack.enter_context(m.serving()) for m in member_metadata]
        boot_ensemble(instances, tmp_path, state, {"endpoint": endpoint, "metadata": urls},
                      context)
        # TLS alone on the client port; the members speak TLS to each other
        # (the ensemble formed over it)
        assert four_letter_word(MEMBERS[0], b"srvr") == ""
        for i in range(3):
            zoo_cfg = subprocess.run(["docker", "exec", f"zookeeper-{i + 1}", "cat",
                                      "/conf/zoo.cfg"], capture_output=True, text=True).stdout
            assert "secureClientPort=2181" in zoo_cfg and "sslQuorum=true" in zoo_cfg, zoo_cfg
            assert "\nclientPort=" not in zoo_cfg
        assert all("iam/security-credentials/samsa-zookeeper" in m.asked
                   for m in member_metadata)

        broker_metadata = InstanceMetadataStandIn({
            "local-ipv4": BROKER_ADDRESS, "local-hostname": LOOPBACK_NAME,
            "placement/availability-zone": "us-east-1b", "placement/region": REGION,
            **role_metadata("broker")})
        url = stack.enter_context(broker_metadata.serving())
        config_dir = state / "etc-broker-0"
        script = render(os.path.join(BROKER_MODULE, "user_data.sh.tftpl"), {
            "metadata_url": url, "broker_id": 0, "zookeeper": zookeeper,
            "broker_config": one_broker_settings(),
            "acls": open(os.path.join(RENDERED, "acls-dc-us-east.toml")).read(),
            "image": latest("samsa"), "secrets": SECRETS, "secrets_endpoint": endpoint,
            "certificate_names": Hcl(f'["{LOAD_BALANCER_NAME}"]'), "data_device": "",
            "state_dir": str(state), "config_dir": str(config_dir)},
            _own_dir(tmp_path, "render-broker"))
        instance = instances("broker-instance-0", str(state))
        instances.services.append("broker-0")
        done = boot(instance, script)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "credentials written" in done.stdout, done.stdout[-3000:]
    # its certificate names its address, its DNS name and the load balancer
    # (producers dial that name over TLS)
    from cryptography import x509
    cert = x509.load_pem_x509_certificate(
        (config_dir / "security" / "certs" / "broker-0.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(a) for a in names.get_values_for_type(x509.IPAddress)} == {BROKER_ADDRESS}
    assert set(names.get_values_for_type(x509.DNSName)) == {LOOPBACK_NAME, LOAD_BALANCER_NAME}
    # the image's health check asks /healthz over HTTPS (its /metrics wants a user)
    wait_healthy("broker-0")
    # what the broker read is its role's: no other service's identity
    assert (config_dir / "security" / "zookeeper" / "cluster.zk").exists()
    assert not (config_dir / "security" / "zookeeper" / "mirror.zk").exists()

    # a stranger's ZooKeeper client (TLS, no identity) changes nothing of the cluster's
    stranger = make_client(zookeeper, tls=ZooKeeperTls(True, ca_cert))
    start_client(stranger, zookeeper)
    try:
        wait_until(lambda: stranger.exists(paths.broker_id_path(0)), 60,
                   what="the secured broker to register")
        # its TLS listener is what clients find (its plaintext one, 9094,
        # no security group opens)
        assert stranger.get(paths.broker_tls_path(0))[0].decode() == f"{BROKER_ADDRESS}:9092"
        assert stranger.get(paths.broker_rack_path(0))[0].decode() == "us-east-1b"
        with pytest.raises(NoAuthError):
            stranger.set(paths.broker_tls_path(0), b"10.0.0.66:9092")
        with pytest.raises(NoAuthError):
            stranger.delete(paths.broker_id_path(0))
    finally:
        stranger.stop()
        stranger.close()

    password_file = tmp_path / "producer.password"
    password_file.write_text(passwords["producer"] + "\n")
    os.chmod(password_file, 0o600)

    def produce(**credentials) -> set[str]:
        with ClusterProducer(zookeeper, acks="flushed", zookeeper_tls=ZooKeeperTls(True, ca_cert),
                             tls=True, tls_ca_file=ca_cert, **credentials) as producer:
            sent = [producer.send("page-views", b"view-%d" % i) for i in range(20)]
            producer.flush(timeout=60)
        return {type(f.exception()).__name__ + str(f.exception())
                for f in sent if f.exception()}

    # the producer with its password from the store, over TLS (certificate
    # and address checked): every message taken
    assert produce(sasl_username="producer", sasl_password_file=str(password_file)) == set()
    # a wrong password: refused
    password_file.write_text("not-the-password\n")
    refused = produce(sasl_username="producer", sasl_password_file=str(password_file))
    assert refused and all("SASL_AUTHENTICATION_FAILED" in e for e in refused), refused


def test_a_rendered_audit_script_serves_from_rds_and_takes_its_rotation(
        instances, containers, tmp_path, zookeeper):
    # issue 31's named defects: the database's master user is the one RDS
    # made (module postgres: the database's name, "audit"), not a name of
    # ours; its password, in the secret RDS keeps and rotates, is read again
    import urllib.request

    port, database, store, arn = rds(containers, tmp_path, "audit", "rds-pw-1")
    metadata = InstanceMetadataStandIn({
        "local-ipv4": "127.0.0.41", "local-hostname": LOOPBACK_NAME, "placement/region": REGION,
        **role_metadata("audit")})
    state = tmp_path / "state"
    state.mkdir()
    config_dir = state / "etc-audit"
    with store.serving() as endpoint, metadata.serving() as url:
        script = render(os.path.join(AUDIT_MODULE, "user_data.sh.tftpl"), {
            "metadata_url": url, "image": latest("samsa"), "secrets": "",
            "secrets_endpoint": endpoint,
            "zookeeper": zookeeper.connect_string("/boot-audit-analysis"),
            "db_host": "127.0.0.1", "db_port": port, "db_name": "audit",
            "db_secret_arn": arn, "config_dir": str(config_dir)},
            _own_dir(tmp_path, "render-audit"))
        instance = instances("audit-instance", str(state))
        instances.services += ["audit", "audit-db-credentials"]
        done = boot(instance, script)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        def verdicts() -> int:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8090/api/verdicts",
                                            timeout=5) as answer:
                    return answer.status
            except OSError as exc:
                return getattr(exc, "code", 0)

        wait_until(lambda: verdicts() == 200, 90,
                   what=lambda: f"the audit to answer from its database ({verdicts()})")
        credentials = config_dir / "security" / "database.json"
        assert json.loads(credentials.read_text()) == {"username": "audit",
                                                       "password": "rds-pw-1"}
        name = instance.container.get_wrapped_container().name
        assert subprocess.run(["docker", "exec", name, "systemctl", "is-active",
                               "samsa-audit-db-credentials"], capture_output=True,
                              text=True).stdout.strip() == "active"

        # RDS rotates the password: the kept credentials take it (the unit
        # reads the secret every minute, and at its start: restarted here so
        # as not to wait), and the audit's next connections use it
        psql = rotate(database, port, store, arn, "audit", "rds-pw-2")
        subprocess.run(["docker", "exec", name, "systemctl", "restart",
                        "samsa-audit-db-credentials"], check=True, capture_output=True)
        wait_until(lambda: "rds-pw-2" in credentials.read_text(), 30,
                   what="the rotated password to be kept")
        subprocess.run([*psql, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                               "WHERE usename = 'audit'"], check=True, capture_output=True)
        wait_until(lambda: verdicts() == 200, 30,
                   what=lambda: f"the audit to reconnect with the new password ({verdicts()})")
        # the audit itself was not restarted
        assert subprocess.run(["docker", "exec", name, "systemctl", "show", "-p",
                               "NRestarts", "samsa-audit"], capture_output=True,
                              text=True).stdout.strip() == "NRestarts=0"


def test_a_secured_boot_without_the_authority_keeps_asking_then_fails(instances, tmp_path):
    # an environment's first apply: the instances boot before the operator
    # puts the authority; each asks again (every 20 s, 90 times in the cloud;
    # once here), then fails saying so, its service not started

    from infra.local.cloud_stand_ins import SecretStoreStandIn

    store = SecretStoreStandIn(REGION)             # nothing put yet
    store.grant(*access_key("broker"), readable_by(SECRETS, "broker"))
    metadata = InstanceMetadataStandIn({
        "local-ipv4": BROKER_ADDRESS, "local-hostname": LOOPBACK_NAME,
        "placement/availability-zone": "us-east-1b", "placement/region": REGION,
        **role_metadata("broker")})
    state = tmp_path / "state"
    state.mkdir()
    with store.serving() as endpoint, metadata.serving() as url:
        script = render(os.path.join(BROKER_MODULE, "user_data.sh.tftpl"), {
            "metadata_url": url, "broker_id": 0, "zookeeper": "127.0.0.21:2181/dc-us-east",
            "broker_config": one_broker_settings(), "acls": "", "image": latest("samsa"),
            "secrets": SECRETS, "secrets_endpoint": endpoint,
            "certificate_names": Hcl("[]"), "data_device": "", "state_dir": str(state),
            "config_dir": str(state / "etc")},
            _own_dir(tmp_path, "render-broker"))
        instance = instances("broker-instance-noca", str(state))
        done = boot(instance, "export FETCH_ATTEMPTS=1\n" + script)
    assert done.returncode != 0
    assert f"secret {SECRETS}/ca: ResourceNotFoundException" in done.stderr, done.stderr
    assert "broker's secrets not had after 1 attempts" in done.stderr, done.stderr
    name = instance.container.get_wrapped_container().name
    assert subprocess.run(["docker", "exec", name, "test", "-e",
                           "/etc/systemd/system/samsa-broker-0.service"]).returncode == 1


def rds(containers, tmp_path, user: str, password: str, store=None, role: str = "",
        role_reads: tuple[str, ...] = ()):
    """RDS as the modules make it: the samsa/postgres image, TLS alone (its
    rds.force_ssl), the database and its master user named ``user``; and
    the secret RDS keeps for that user in a stand-in of Secrets Manager
    (``store``, else a new one), readable by the role of ``role``'s service
    (role_metadata(role); ``user``'s by default) with ``role_reads`` besides:
    (port, the database's container, the stand-in, the secret's ARN)."""
    from broker.security.ca import CertificateAuthority
    from container_helpers import free_ports
    from infra.local.cloud_stand_ins import SecretStoreStandIn

    ca = CertificateAuthority.create(str(tmp_path / "rds-ca"))
    certs = tmp_path / "rds-certs"
    cert, key = ca.issue("rds", ["127.0.0.1"], str(certs))
    for path in (cert, key):
        os.chmod(path, 0o644)               # read by the image's user
    os.chmod(certs, 0o755)
    (port,) = free_ports(1)
    database = containers.run(f"rds-{user}", latest("postgres"), env={
        "PGPORT": str(port), "POSTGRES_DB": user, "POSTGRES_USER": user,
        "POSTGRES_PASSWORD": password, "PG_TLS_CERT_FILE": f"/tls/{os.path.basename(cert)}",
        "PG_TLS_KEY_FILE": f"/tls/{os.path.basename(key)}"}, files={"/tls": str(certs)},
        ready=lambda s: s.exec(["pg_isready", "-h", "127.0.0.1", "-p", str(port), "-q"])[0] == 0)
    arn = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:rds!db-{user}-AbCdEf"
    store = store or SecretStoreStandIn(REGION)
    store.put(arn, json.dumps({"username": user, "password": password}))
    store.grant(*access_key(role or user), [arn, *role_reads])
    return port, database, store, arn


def rotate(database, port: int, store, arn: str, user: str, password: str) -> list[str]:
    """RDS rotating ``user``'s password: changed in the database and in its
    secret. Returns the psql command (as the superuser) for more SQL."""
    psql = ["docker", "exec", database.container.get_wrapped_container().name, "psql",
            "-h", "/tmp", "-p", str(port), "-U", "postgres", "-q", "-c"]
    subprocess.run([*psql, f"ALTER ROLE {user} PASSWORD '{password}'"], check=True,
                   capture_output=True)
    store.put(arn, json.dumps({"username": user, "password": password}))
    return psql


def test_a_rendered_analysis_stack_script_runs_airflow_with_both_dags_on_rds(
        instances, containers, tmp_path, zookeeper):
    # issue 31: Airflow from the samsa/analysis image (its DAGs folder the
    # image's: the named defect was a DAGS_FOLDER the wheel did not hold), its
    # database RDS's with the master user RDS made, restarted on a rotation;
    # issue 30: booted secured, as the environments boot it (its secrets from
    # the store with the role's credentials), its API server on HTTPS alone
    # with the host's certificate, the image's health check asking over it
    import urllib.error
    import urllib.request

    from infra.local.airflow_stack import PROJECT_DAGS

    standin, _passwords, ca_cert = fill_secret_store(REGION, SECRETS,
                                                     str(tmp_path / "operator"))
    port, database, store, arn = rds(containers, tmp_path, "airflow", "rds-pw-1", store=standin,
                                     role="analysis",
                                     role_reads=tuple(readable_by(SECRETS, "analysis")))
    context = ssl.create_default_context(cafile=ca_cert)
    metadata = InstanceMetadataStandIn({
        "local-ipv4": "127.0.0.1", "local-hostname": LOOPBACK_NAME, "placement/region": REGION,
        **role_metadata("analysis")})
    state = tmp_path / "state"
    state.mkdir()
    config_dir = state / "etc-analysis"
    warehouse = (f'[loader]\nzookeeper = "{zookeeper.connect_string("/boot-analysis")}"\n'
                 f'output = "s3a://samsa-warehouse/warehouse"\nmaster = "local[*]"\n'
                 f'cluster_name = "analysis"\n\n[warehouse]\n'
                 f'audit_url = "http://127.0.0.1:8090"\n')
    with store.serving() as endpoint, metadata.serving() as url:
        script = render(os.path.join(ANALYSIS_MODULE, "user_data.sh.tftpl"), {
            "metadata_url": url, "image": latest("analysis"), "secrets": SECRETS,
            "secrets_endpoint": endpoint, "warehouse_config": warehouse,
            "db_host": "127.0.0.1", "db_port": port, "db_name": "airflow",
            "db_secret_arn": arn, "state_dir": str(state), "config_dir": str(config_dir)},
            _own_dir(tmp_path, "render-analysis"))
        instance = instances("analysis-instance", str(state))
        instances.services += [f"airflow-{c}" for c in (
            "api-server", "scheduler", "dag-processor", "triggerer", "db-credentials")]
        done = boot(instance, script)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        def health() -> dict:
            try:
                with urllib.request.urlopen("https://127.0.0.1:8080/api/v2/monitor/health",
                                            timeout=5, context=context) as answer:
                    return json.load(answer)
            except (OSError, ValueError):
                return {}

        def database_healthy() -> bool:
            return health().get("metadatabase", {}).get("status") == "healthy"

        def dags() -> set[str]:
            """The DAGs the API server lists (as the admin the image made)."""
            try:
                passwords = state / "airflow" / "simple_auth_manager_passwords.json.generated"
                request = urllib.request.Request(
                    "https://127.0.0.1:8080/auth/token", method="POST",
                    data=json.dumps({"username": "admin", "password": json.loads(
                        passwords.read_text())["admin"]}).encode(),
                    headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                    token = json.load(answer)["access_token"]
                request = urllib.request.Request("https://127.0.0.1:8080/api/v2/dags?limit=100",
                                                 headers={"Authorization": f"Bearer {token}"})
                with urllib.request.urlopen(request, timeout=5, context=context) as answer:
                    return {d["dag_id"] for d in json.load(answer)["dags"]}
            except (OSError, ValueError, KeyError):
                return set()

        wait_until(database_healthy, 300, interval=2,
                   what=lambda: f"Airflow to answer with its database healthy: {health()}")
        wait_until(lambda: set(PROJECT_DAGS) <= dags(), 180, interval=2,
                   what=lambda: f"both DAGs loaded from the image's folder: {dags()}")
        assert (state / "airflow" / "simple_auth_manager_passwords.json.generated").exists()
        # HTTPS alone: plain HTTP finds the port open and gets no answer
        with pytest.raises((urllib.error.URLError, OSError)) as plain:
            urllib.request.urlopen("http://127.0.0.1:8080/api/v2/monitor/health", timeout=5)
        assert not isinstance(getattr(plain.value, "reason", plain.value),
                              ConnectionRefusedError), plain.value
        # the health check asks over TLS
        wait_healthy("airflow-api-server", 120)
        # the task runners' way in: the execution API at the URL they are
        # given, over HTTPS, trusting the authority they are given (asked
        # from the scheduler's container, which runs them)
        execution = subprocess.run(
            ["docker", "exec", "airflow-scheduler", "python3", "-c",
             "import os, ssl, urllib.request; e = os.environ; "
             "url = e['AIRFLOW__CORE__EXECUTION_API_SERVER_URL'] + 'health'; "
             "c = ssl.create_default_context(cafile=e['AIRFLOW__API__SSL_CA_FILE']); "
             "print(url, urllib.request.urlopen(url, context=c, timeout=10).read().decode())"],
            capture_output=True, text=True, timeout=60)
        assert execution.returncode == 0, execution.stderr[-2000:]
        assert execution.stdout.startswith("https://127.0.0.1:8080/execution/health ") \
            and '"healthy"' in execution.stdout, execution.stdout
        # the DAGs' settings: the loader reads the analysis cluster as its
        # user, the audit is asked over HTTPS as airflow (the secured lines added)
        settings = (config_dir / "security" / "warehouse.toml").read_text()
        assert 'audit_username = "airflow"' in settings, settings
        assert "\n[loader.credentials]\n" in settings and '"loader"' in settings, settings

        # RDS rotates the password: the kept credentials take it (restarted
        # here so as not to wait the minute), the path unit restarts Airflow's
        # components, which come back with the new one
        before = subprocess.run(["docker", "inspect", "-f", "{{.Id}}", "airflow-api-server"],
                                capture_output=True, text=True).stdout
        rotate(database, port, store, arn, "airflow", "rds-pw-2")
        name = instance.container.get_wrapped_container().name
        subprocess.run(["docker", "exec", name, "systemctl", "restart",
                        "samsa-airflow-db-credentials"], check=True, capture_output=True)
        wait_until(lambda: subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", "airflow-api-server"], capture_output=True,
            text=True).stdout not in ("", before), 60, what="the API server restarted")
        wait_until(database_healthy, 300, interval=2,
                   what=lambda: f"Airflow back with the new password: {health()}")
        assert "rds-pw-2" in (config_dir / "security" / "database.json").read_text()


def one_broker_settings() -> str:
    """Production's rendered settings of dc-us-east, for a cluster of one
    broker: replication factor 1 (its 3 needs three brokers)."""
    text = open(os.path.join(RENDERED, "broker-dc-us-east.toml")).read()
    text, replaced = re.subn(r"(?m)^replication_factor = \d+$", "replication_factor = 1", text)
    text, insync = re.subn(r"(?m)^min_insync_replicas = \d+$", "min_insync_replicas = 1", text)
    assert replaced == insync == 1
    return text


def _own_dir(tmp_path, name: str):
    path = tmp_path / name
    path.mkdir()
    return path
