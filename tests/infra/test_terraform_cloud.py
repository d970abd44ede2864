"""infra/terraform's cloud modules and environments, read with python-hcl2
(their providers cannot be downloaded here, so `terraform validate` and
`plan` cannot run on them): the conventions a module reviewer checks, the
security posture, and the one source of truth — the brokers' settings
rendered from the topology model equal what the code renders now, and the
environments' variables say what their topology says."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import hcl2
import pytest

from infra import render
from infra.topology import load_topology

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TF = os.path.join(ROOT, "infra", "terraform")
MODULES = sorted(os.listdir(os.path.join(TF, "modules")))
CLOUD_MODULES = [m for m in MODULES if not m.startswith("local-")]
CLOUD_ENVIRONMENTS = ["production", "staging"]
#: applied once per account before the others: their state backend
BOOTSTRAP = "bootstrap"
OPTIONS = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False)


def read(path: str) -> dict:
    with open(path) as f:
        return hcl2.load(f, serialization_options=OPTIONS)


def blocks(directory: str, kind: str) -> dict[str, dict]:
    """Every ``kind`` block (variable, output, module...) of a directory's .tf files."""
    found: dict[str, dict] = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".tf"):
            for block in read(os.path.join(directory, name)).get(kind, []):
                found.update(block)
    return found


def resources(directory: str) -> list[tuple[str, str, dict]]:
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".tf"):
            for block in read(os.path.join(directory, name)).get("resource", []):
                for rtype, named in block.items():
                    out += [(rtype, rname, body) for rname, body in named.items()]
    return out


@pytest.mark.parametrize("module", MODULES)
def test_a_module_has_its_files_typed_described_variables_and_outputs(module):
    directory = os.path.join(TF, "modules", module)
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert os.path.exists(os.path.join(directory, name)), f"{module}: no {name}"
    variables = blocks(directory, "variable")
    assert variables, module
    for name, body in variables.items():
        assert body.get("type"), f"{module}: variable {name} has no type"
        assert body.get("description"), f"{module}: variable {name} has no description"
    outputs = blocks(directory, "output")
    assert outputs, module
    for name, body in outputs.items():
        assert body.get("description"), f"{module}: output {name} has no description"
    readme = open(os.path.join(directory, "README.md")).read()
    for name in variables:
        assert f"`{name}`" in readme, f"{module}: README does not document {name}"


@pytest.mark.parametrize("directory", [os.path.join("modules", m) for m in MODULES]
                         + [os.path.join("environments", e)
                            for e in CLOUD_ENVIRONMENTS + ["local", BOOTSTRAP]])
def test_terraform_and_providers_are_pinned(directory):
    (terraform,) = read(os.path.join(TF, directory, "versions.tf"))["terraform"]
    assert terraform["required_version"].startswith(">=")
    for block in terraform.get("required_providers", []):
        for name, spec in block.items():
            assert spec["source"] == f"hashicorp/{name}"
            assert spec["version"].startswith("~>"), f"{directory}: {name} not pinned"


def test_every_module_is_used_by_an_environment():
    used: set[str] = set()
    pending = [os.path.join(TF, "environments", e)
               for e in CLOUD_ENVIRONMENTS + ["local", BOOTSTRAP]]
    while pending:
        directory = pending.pop()
        for body in blocks(directory, "module").values():
            target = os.path.normpath(os.path.join(directory, body["source"]))
            name = os.path.basename(target)
            if name not in used:
                used.add(name)
                pending.append(target)
    assert set(MODULES) <= used, set(MODULES) - used


@pytest.mark.parametrize("environment", CLOUD_ENVIRONMENTS)
def test_an_environment_gives_the_outputs_users_need(environment):
    outputs = blocks(os.path.join(TF, "environments", environment), "output")
    assert {"load_balancers", "zookeeper_connect", "audit_url", "airflow_url"} <= set(outputs)


def test_security_posture():
    for module in CLOUD_MODULES:
        for rtype, rname, body in resources(os.path.join(TF, "modules", module)):
            where = f"{module}: {rtype}.{rname}"
            if rtype == "aws_vpc_security_group_ingress_rule":
                assert body.get("cidr_ipv4") != "0.0.0.0/0", f"{where} admits the internet"
            if rtype == "aws_ebs_volume":
                assert body.get("encrypted") is True, where
            if rtype == "aws_instance":
                # every service's instances are made in one place, the way below
                assert module == "service-instances", f"{where}: use module service-instances"
                assert body.get("associate_public_ip_address") is False, where
                for dynamic in body.get("dynamic", []):
                    for name, block in dynamic.items():
                        assert block["content"][0]["encrypted"] is True, f"{where} {name}"
                assert body["metadata_options"][0]["http_tokens"] == "required", where
                for device in ("root_block_device", "ebs_block_device"):
                    for volume in body.get(device, []):
                        assert volume.get("encrypted") is True, f"{where} {device}"
                assert "module.role" in body["iam_instance_profile"], f"{where}: own role"
            if rtype == "aws_lb":
                assert body.get("internal") is True, where
    # every variable of address ranges a security group admits is validated by
    # parsing each range (IPv4, /8 or narrower), not by matching one
    # spelling of the internet; modules/zookeeper/tests plans the refusals
    parsed = 'tonumber(split("/", c)[1]) >= 8'
    for module, names in (("zookeeper", ["client_cidrs"]), ("load-balancer", ["producer_cidrs"]),
                          ("broker-cluster", ["client_cidrs", "metrics_cidrs"]),
                          ("audit", ["reader_cidrs"]), ("analysis-stack", ["ui_cidrs"]),
                          ("mirror", ["metrics_cidrs"])):
        variables = blocks(os.path.join(TF, "modules", module), "variable")
        for name in names:
            condition = variables[name]["validation"][0]["condition"]
            assert parsed in condition and "0.0.0.0/0" not in condition, (module, name)


@pytest.mark.parametrize("environment", CLOUD_ENVIRONMENTS)
def test_rendered_settings_are_what_the_code_renders_now(environment):
    directory = os.path.join(TF, "environments", environment)
    out = subprocess.run([sys.executable, "-m", "infra.render", "--check", directory],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # every cluster's settings file is read by the environment's Terraform
    main = open(os.path.join(directory, "main.tf")).read()
    for relative in render.render(directory):
        assert relative in main, f"{environment}: {relative} is not deployed"


def test_a_default_changed_in_the_code_is_caught(tmp_path):
    copy = tmp_path / "production"
    shutil.copytree(os.path.join(TF, "environments", "production"), copy)
    path = copy / "rendered" / "broker-analysis.toml"
    # as if the committed file predated a change of a default in the code
    path.write_text(path.read_text().replace("max_fetch_wait_ms = 30000",
                                             "max_fetch_wait_ms = 25000"))
    out = subprocess.run([sys.executable, "-m", "infra.render", "--check", str(copy)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "broker-analysis.toml" in out.stderr


def test_rendered_settings_are_read_by_the_broker(tmp_path):
    path = os.path.join(TF, "environments", "production", "rendered", "broker-dc-us-east.toml")
    out = subprocess.run([sys.executable, "-m", "broker", "--config", path, "--broker-id", "2",
                          "--host", "10.10.0.5", "--set", "zookeeper=10.10.0.10:2181/dc-us-east",
                          "--print-config"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "broker_id = 2" in out.stdout and 'data_dir = "/var/lib/samsa/log"' in out.stdout


def test_each_broker_takes_its_zone_as_its_rack_at_boot():
    """The rendered settings leave the rack out; the boot script reads the
    instance's availability zone and gives it to the broker, which runs with
    it over the rendered file. (The script run, and refusing to start without
    a zone: tests/containers/test_boot_scripts.py.)"""
    rendered = os.path.join(TF, "environments", "production", "rendered", "broker-dc-us-east.toml")
    assert not any(line.startswith("rack") for line in open(rendered).read().splitlines())
    boot = open(os.path.join(TF, "modules", "broker-cluster", "user_data.sh.tftpl")).read()
    assert "RACK=$(metadata placement/availability-zone)" in boot
    assert '--set "rack=$RACK"' in boot
    out = subprocess.run([sys.executable, "-m", "broker", "--config", rendered, "--broker-id", "0",
                          "--host", "10.10.0.5", "--set", "zookeeper=10.10.0.10:2181/dc-us-east",
                          "--set", "rack=us-east-1a", "--print-config"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert 'rack = "us-east-1a"' in out.stdout and "replication_factor = 3" in out.stdout
    assert "min_insync_replicas = 2" in out.stdout


@pytest.mark.parametrize("environment", CLOUD_ENVIRONMENTS)
def test_variables_say_what_the_topology_says(environment):
    directory = os.path.join(TF, "environments", environment)
    topology = load_topology(os.path.join(directory, "topology.toml"))
    variables = {k: v.get("default") for k, v in blocks(directory, "variable").items()}
    dcs = topology.datacenters
    assert set(variables["datacenters"]) == {d.name for d in dcs}
    assert {d.brokers for d in dcs} == {variables["brokers_per_dc"]}
    assert topology.analysis.brokers == variables["analysis_brokers"]
    assert {c.default_partitions for c in topology.clusters()} == {variables["partitions"]}
    assert {c.replication_factor for c in topology.clusters()} == \
        {variables["replication_factor"]}
    retention = {c.broker_config(0).log.retention_ms for c in topology.clusters()}
    assert retention == {variables["retention_hours"] * 3_600_000}
    assert {m.whitelist for m in topology.mirrors} == {variables["mirror_whitelist"]}
    assert {m.processes for m in topology.mirrors} == {variables["mirror_processes"]}


def test_the_local_environment_uses_the_same_variable_names():
    shared = {"datacenters", "brokers_per_dc", "analysis_brokers", "partitions",
              "replication_factor", "retention_hours", "mirror_whitelist"}
    for environment in CLOUD_ENVIRONMENTS + ["local"]:
        names = set(blocks(os.path.join(TF, "environments", environment), "variable"))
        assert shared <= names, (environment, shared - names)


@pytest.mark.parametrize("environment", CLOUD_ENVIRONMENTS)
def test_the_load_balancers_check_brokers_as_the_topology_says(environment):
    """The lab's HAProxy checks (LoadBalancerSpec) and the cloud's NLB checks
    are the same settings: the environment's topology and the module's default."""
    topology = load_topology(os.path.join(TF, "environments", environment, "topology.toml"))
    default = blocks(os.path.join(TF, "modules", "load-balancer"), "variable")["health_check"]
    check = default["default"]
    for dc in topology.datacenters:
        lb = dc.load_balancer
        assert (lb.health_check_ms / 1000, lb.fall, lb.rise) == \
            (check["interval_seconds"], check["fall"], check["rise"]), dc.name


@pytest.mark.parametrize("environment", CLOUD_ENVIRONMENTS)
def test_a_cloud_environment_keeps_its_state_in_the_bootstrapped_backend(environment):
    """Its state in S3 under a key of its own, locked in the table the
    bootstrap makes (the rest from backend.hcl at init), and its providers
    tag every resource they make."""
    (terraform,) = read(os.path.join(TF, "environments", environment, "versions.tf"))["terraform"]
    (backend,) = terraform["backend"]
    assert backend["s3"]["key"] == f"samsa/{environment}/terraform.tfstate"
    lock = blocks(os.path.join(TF, "modules", "state-backend"), "resource")
    assert lock["aws_dynamodb_table"]["locks"]["hash_key"] == "LockID"
    providers = [p for f in glob.glob(os.path.join(TF, "environments", environment, "*.tf"))
                 for p in read(f).get("provider", [])]
    assert providers
    for provider in providers:
        (aws,) = provider.values()
        (default_tags,) = aws["default_tags"]
        assert default_tags["tags"] == "${var.tags}"
