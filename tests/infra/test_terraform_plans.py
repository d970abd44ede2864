"""The cloud modules planned by Terraform itself, offline: the AWS provider
comes from a local plugin directory (these machines carry one; where none is
found every test that needs it says so and skips), and nothing asks AWS (no
credentials; the real provider plans a new resource without calling it).
The suites of the local environment and its module need no provider: they
run wherever Terraform does.

* every ``terraform test`` suite under infra/terraform (``tests/*.tftest.hcl``
  of a module) passes;
* the environment's secrets never reach a plan: the passwords given to
  module ``secrets`` (an ephemeral input, written through write-only
  arguments) appear nowhere in the saved plan, and the values planned for
  the secrets' versions hold no secret string;
* each cloud environment validates (every module's inputs wired, types
  right)."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import zipfile

import pytest

from terraform_helpers import ROOT, terraform

TF = os.path.join(ROOT, "infra", "terraform")
PLUGIN_DIRS = [os.environ.get("SAMSA_TERRAFORM_PLUGIN_DIR", ""), "/opt/tf-plugins",
               os.path.expanduser("~/.terraform.d/plugins"), "/usr/share/terraform/plugins"]


def plugin_dir() -> str | None:
    """A local plugin directory holding the AWS provider, or None."""
    for directory in PLUGIN_DIRS:
        if directory and glob.glob(os.path.join(
                directory, "registry.terraform.io", "hashicorp", "aws", "*", "*",
                "terraform-provider-aws*")):
            return directory
    return None


PLUGINS = plugin_dir()
pytestmark = pytest.mark.skipif(shutil.which("terraform") is None, reason="no terraform here")
NO_AWS_PROVIDER = (
    "no local plugin directory with the AWS provider (looked in "
    + ", ".join(d for d in PLUGIN_DIRS if d) + "; or set SAMSA_TERRAFORM_PLUGIN_DIR): "
    "the cloud modules cannot be planned offline here")
needs_aws_provider = pytest.mark.skipif(PLUGINS is None, reason=NO_AWS_PROVIDER)

MODULES_AND_ENVIRONMENTS = sorted(
    os.path.relpath(directory, TF) for kind in ("modules", "environments")
    for directory in glob.glob(os.path.join(TF, kind, "*")) if os.path.isdir(directory))
SUITES = sorted({os.path.relpath(os.path.dirname(os.path.dirname(path)), TF)
                 for kind in ("modules", "environments")
                 for path in glob.glob(os.path.join(TF, kind, "*", "tests", "*.tftest.hcl"))})


def uses_aws(suite: str) -> bool:
    """Whether the suite's module needs the AWS provider (its files name it)."""
    for path in glob.glob(os.path.join(TF, suite, "*.tf")):
        with open(path) as f:
            text = f.read()
        if "hashicorp/aws" in text or 'provider "aws"' in text:
            return True
    return False


PROVIDER_OFFLINE = """
provider "aws" {
  region                      = "us-east-2"
  access_key                  = "offline"
  secret_key                  = "offline"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
}
"""


def copy_tree(tmp_path) -> str:
    """infra/terraform copied into ``tmp_path`` (no one's .terraform or state)."""
    tree = tmp_path / "terraform"
    shutil.copytree(TF, tree, ignore=shutil.ignore_patterns(".terraform*", "terraform.tfstate*"))
    return str(tree)


def init(directory: str) -> None:
    plugins = [f"-plugin-dir={PLUGINS}"] if PLUGINS else []
    out = terraform(directory, "init", "-input=false", "-backend=false", *plugins)
    assert out.returncode == 0, out.stdout + out.stderr


#: the suites whose module keeps its data volumes from any destroy
#: (prevent_destroy), and how many volumes their runs apply
KEPT_VOLUMES = {"modules/broker-cluster": 3, "modules/zookeeper": 3}


def test_every_module_and_environment_has_a_suite():
    assert "modules/secrets" in MODULES_AND_ENVIRONMENTS
    # each cloud environment planned whole, from zero (the real provider,
    # offline); the local environment planned; bootstrap's backend.hcl shown
    assert SUITES == MODULES_AND_ENVIRONMENTS


def test_the_local_suites_need_no_provider():
    assert not uses_aws("modules/local-service") and not uses_aws("environments/local")
    assert uses_aws("modules/secrets") and uses_aws("environments/bootstrap")


@pytest.mark.parametrize("suite", SUITES)
def test_terraform_test_passes(suite, tmp_path):
    if uses_aws(suite) and PLUGINS is None:
        pytest.skip(NO_AWS_PROVIDER)
    directory = os.path.join(copy_tree(tmp_path), suite)
    init(directory)
    out = terraform(directory, "test", timeout=600)
    text = out.stdout + out.stderr
    if suite in KEPT_VOLUMES:
        # terraform test (1.11) destroys what its runs applied at the end;
        # the data volumes' prevent_destroy refuses, which is the rule at
        # work: that refusal is expected, once per volume, and no other error
        assert re.search(r"\b\d+ passed, 0 failed", text), text[-6000:]
        errors = re.findall(r"Error: (.+)", text)
        assert errors and set(errors) == {"Instance cannot be destroyed"}, text[-6000:]
        assert len(errors) == KEPT_VOLUMES[suite], text[-6000:]
        return
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert " 0 failed" in out.stdout and "Success!" in out.stdout, out.stdout[-3000:]


@needs_aws_provider
def test_no_password_reaches_the_plan(tmp_path, monkeypatch):
    """A root module that uses module secrets with passwords given (as
    ``TF_VAR_given_passwords``): the saved plan, every file in it and its JSON, holds
    none of them, and no secret version plans a ``secret_string``."""
    tree = copy_tree(tmp_path)
    root = tmp_path / "root"
    root.mkdir()
    (root / "main.tf").write_text(PROVIDER_OFFLINE + f"""
terraform {{
  required_providers {{
    aws = {{ source = "hashicorp/aws", version = "~> 5.100" }}
  }}
}}

variable "given_passwords" {{
  type      = map(string)
  ephemeral = true
}}

module "secrets" {{
  source          = "{tree}/modules/secrets"
  name            = "samsa-plan"
  kms_key_arn     = "arn:aws:kms:us-east-2:111122223333:key/primary"
  replica_regions = {{ "us-east-1" = "arn:aws:kms:us-east-1:111122223333:key/use1" }}
  passwords_given = true
  given_passwords = var.given_passwords
}}
""")
    names = [f"users/{u}" for u in ("broker", "admin", "producer", "mirror", "lag", "audit",
                                    "loader")]
    names += [f"zookeeper/{z}" for z in ("cluster", "mirror", "registry", "audit", "loader")]
    names += [f"http/{h}" for h in ("prometheus", "airflow", "admin")]
    passwords = {name: f"SECRET{i:02d}-{os.urandom(8).hex()}" for i, name in enumerate(names)}
    init(str(root))
    monkeypatch.setenv("TF_VAR_given_passwords", json.dumps(passwords))
    out = terraform(str(root), "plan", "-input=false", "-out=secrets.plan")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    assert "Plan: 32 to add" in out.stdout, out.stdout[-2000:]   # 17 secrets, 15 versions
    with zipfile.ZipFile(root / "secrets.plan") as plan_file:    # a plan is a zip
        raw = b"".join(plan_file.read(member) for member in plan_file.namelist())
    shown = terraform(str(root), "show", "-json", "secrets.plan")
    assert shown.returncode == 0, shown.stderr
    for password in passwords.values():
        assert password.encode() not in raw
        assert password not in shown.stdout
    plan = json.loads(shown.stdout)
    versions = [c for c in plan["resource_changes"]
                if c["type"] == "aws_secretsmanager_secret_version"]
    assert len(versions) == 15
    for change in versions:
        after = change["change"]["after"]
        assert after.get("secret_string") is None and after.get("secret_binary") is None
        assert after["secret_string_wo_version"] == 1


@needs_aws_provider
@pytest.mark.parametrize("environment", ["production", "staging", "bootstrap"])
def test_a_cloud_environment_validates(environment, tmp_path):
    directory = os.path.join(copy_tree(tmp_path), "environments", environment)
    init(directory)
    out = terraform(directory, "validate")
    assert out.returncode == 0, out.stdout + out.stderr
