"""An environment's secrets as module secrets makes them, in the secret
store's stand-in (infra/local/cloud_stand_ins.py), for the tests of what a
cloud host does with them at boot (tests/infra/test_host_secrets.py,
tests/containers/test_boot_scripts.py)."""
from __future__ import annotations

import json
import time

from infra import host_secrets
from infra.cloud_secrets import make_authority
from infra.local.cloud_stand_ins import SecretStoreStandIn
from infra.local.lab_security import HTTP_USERS, USERS, ZK_IDENTITIES


def readable_by(environment: str, service: str) -> list[str]:
    """The secrets ``service``'s role may read (module secrets' readers)."""
    reads = host_secrets.READS[service]
    return [f"{environment}/{name}" for name in (
        ["ca"] + [f"users/{u}" for u in reads.users]
        + [f"zookeeper/{z}" for z in reads.zookeeper]
        + ([f"http/{h}" for h, _ in HTTP_USERS] if reads.http else []))]


def access_key(service: str) -> tuple[str, str]:
    """The access key id and secret of ``service``'s role in the stand-in."""
    return f"AKID{service.upper()}", f"secret-{service}"


def fill_secret_store(region: str, environment: str, operator_dir: str
                      ) -> tuple[SecretStoreStandIn, dict[str, str], str]:
    """A stand-in holding ``environment``'s secrets (an authority the
    operator made in ``operator_dir``, a password per user, an identity per
    ZooKeeper writer, a password per HTTP user), each service's role granted
    its readers': the stand-in, the users' passwords and the authority's
    certificate (what a client trusts)."""
    standin = SecretStoreStandIn(region)
    ca_json, ca_cert = make_authority(environment, operator_dir)
    with open(ca_json) as f:
        standin.put(f"{environment}/ca", f.read())
    passwords = {}
    for user in USERS:
        passwords[user] = f"pw-{user}-1"
        standin.put(f"{environment}/users/{user}", passwords[user])
    for identity in ZK_IDENTITIES:
        standin.put(f"{environment}/zookeeper/{identity}", f"samsa-{identity}:zk-{identity}")
    for user, _role in HTTP_USERS:
        standin.put(f"{environment}/http/{user}", f"http-{user}")
    for service in host_secrets.READS:
        standin.grant(*access_key(service), readable_by(environment, service))
    return standin, passwords, ca_cert


def role_metadata(service: str) -> dict[str, str]:
    """The instance metadata of an instance whose role is ``service``'s:
    its role's credentials, as the metadata service hands them to boto3."""
    key, secret = access_key(service)
    role = f"samsa-{service}"
    expires = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 6 * 3600))
    return {"iam/security-credentials/": role,
            f"iam/security-credentials/{role}": json.dumps({
                "Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": key,
                "SecretAccessKey": secret, "Token": f"session-of-{role}",
                "Expiration": expires})}
