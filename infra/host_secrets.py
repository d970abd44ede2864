"""A cloud host's secrets, read at boot from its environment's secret store
(AWS Secrets Manager; module ``secrets`` of infra/terraform) into the same
layout as the secured lab's (infra/local/lab_security.LabSecurity), so that
the same settings follow from them (docs/security.md, "In the cloud").

    python -m infra.host_secrets fetch --service broker --environment samsa-prod \\
            --region us-east-2 --name broker-0 --host 10.10.1.17 \\
            --out /etc/samsa/security [--options-out /etc/samsa/secured.env]
        reads what the service may read (READS; the module's ``readers``),
        issues the host's own certificate with the environment's authority,
        and writes, each file its owner's alone:

            ca/ca.crt                        the authority's certificate
            certs/<name>.crt, .key           the host's certificate, valid
                                             for every --host
            users/<user>.password            the service's SCRAM users'
            zookeeper/<identity>.zk          its ZooKeeper identities
            http/users, http/<user>.password the HTTP users of its ports

        ``--options-out`` writes ``SAMSA_SECURED_OPTIONS=...``, the service's
        secured ``--set`` options (broker, mirror, audit), for its systemd
        unit (``EnvironmentFile``); ``--warehouse-out`` the analysis stack's
        lines of the DAGs' settings file (after its ``[warehouse]`` table's
        own: the audit asked over HTTPS as ``airflow``, and
        ``[loader.credentials]``); ``--zookeeper-env-out`` a ZooKeeper
        member's settings of the samsa/zookeeper image (``docker run
        --env-file``): TLS alone on its client port and TLS between the
        members, its key store written beside (zookeeper.pem)

    python -m infra.host_secrets provision --security /etc/samsa/security \\
            --acls /etc/samsa/acls.toml --zookeeper 10.10.1.5:2181/dc-a
        (a broker's host) writes each user's SCRAM credential in the cluster's
        ZooKeeper, replacing one that no longer matches its password (a
        rotation), and adds the cluster's ACLs (rendered by python -m
        infra.render), as the ``cluster`` ZooKeeper identity over TLS

    python -m infra.host_secrets database --secret-id ARN --region us-east-2 \\
            --out /etc/samsa/security/audit-db.json [--every 60]
        (the audit's host) writes the username and password of the secret RDS
        keeps for a database's master user (JSON, the owner's alone), which
        the audit reads for every new connection (--db-credentials-file);
        with ``--every``, reads it again that often and rewrites the file when
        RDS has rotated it (a long-running unit beside the audit's)

    python -m infra.host_secrets database-url --credentials FILE \\
            --url 'postgresql+psycopg://HOST:5432/airflow?sslmode=require'
        prints the URL with the user and password of FILE (what ``database``
        wrote) put in, quoted: Airflow's metadata database, at each start of
        its components (the samsa/analysis image's SAMSA_DB_CREDENTIALS_FILE)

Every boot reads the secrets again: a rotated password is taken when its
service restarts. The AWS endpoints are boto3's: the instance's role, or
``AWS_ENDPOINT_URL_SECRETS_MANAGER`` (the tests' stand-in,
infra/local/cloud_stand_ins.py).

Errors (a secret the role may not read, one not put yet, the store out of
reach, a malformed authority) exit 2 with one line saying which secret and
what is wrong; nothing is half-written (each file is replaced whole).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from typing import Protocol

from kazoo.exceptions import KazooException

from broker.service_kit import cli
from infra.cloud_secrets import AuthorityError, issue
from infra.local.lab_security import (AUDIT, HTTP_USERS, LOADER, MIRROR, USERS, ZK_AUDIT,
                                      ZK_CLUSTER, ZK_LOADER, ZK_MIRROR, ZK_REGISTRY, LabSecurity, private_dir,
                                      write_private)


class SecretError(RuntimeError):
    """A secret that could not be had: its name and why, in one line."""


class SecretStore(Protocol):
    def get(self, name: str) -> str:
        """The current value of the secret ``name`` (the environment's
        prefix included); SecretError when it cannot be had."""


@dataclass(frozen=True)
class Reads:
    """What a service's role may read (module ``secrets``' readers): its
    SCRAM users, ZooKeeper identities and whether the HTTP users of its ports.
    Every service reads the authority (``ca``) and issues its certificate."""
    users: tuple[str, ...] = ()
    zookeeper: tuple[str, ...] = ()
    http: bool = True


#: module ``secrets``' ``readers``, by service (a test holds them equal)
READS = {
    "zookeeper": Reads(http=False),
    "broker": Reads(USERS, (ZK_CLUSTER,)),
    "mirror": Reads((MIRROR,), (ZK_MIRROR,)),
    "audit": Reads((AUDIT,), (ZK_AUDIT,)),
    "analysis": Reads((LOADER,), (ZK_LOADER, ZK_REGISTRY)),
}


class SecretsManager:
    """The environment's secrets in AWS Secrets Manager (boto3: the
    instance role's credentials, its region's endpoint or the one the
    environment names)."""

    def __init__(self, region: str) -> None:
        import boto3
        from botocore.config import Config
        self._client = boto3.client("secretsmanager", region_name=region, config=Config(
            retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=5, read_timeout=10))

    def get(self, name: str) -> str:
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            answer = self._client.get_secret_value(SecretId=name)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            code = error.get("Code", "an error")
            hint = {"AccessDeniedException": " (is it among the readers of this "
                                             "service's role?)",
                    "ResourceNotFoundException": " (for ca and ca-certificate: has the "
                                                 "operator put them? python -m "
                                                 "infra.cloud_secrets authority)"}.get(code, "")
            raise SecretError(f"secret {name}: {code}: {error.get('Message', '')}{hint}"
                              ) from None
        except BotoCoreError as exc:
            raise SecretError(f"secret {name}: {exc}") from None
        if "SecretString" not in answer:
            raise SecretError(f"secret {name} holds no text")
        return answer["SecretString"]


def fetch(store: SecretStore, environment: str, service: str, name: str, hosts: list[str],
          directory: str, days: int = 365) -> LabSecurity:
    """Read ``service``'s secrets of ``environment`` from ``store`` into
    ``directory`` and issue certificate ``name`` for ``hosts``; the layout's
    paths. SecretError, AuthorityError or OSError when one cannot be had
    (the files already written are whole)."""
    if service not in READS:
        raise SecretError(f"unknown service {service!r}: one of {', '.join(READS)}")
    reads = READS[service]
    security = LabSecurity(directory)
    private_dir(directory)

    def secret(key: str) -> str:
        value = store.get(f"{environment}/{key}")
        if not value.strip():
            raise SecretError(f"secret {environment}/{key} is empty")
        return value

    authority = secret("ca")
    # the authority's key stays in the private directory while signing
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        held = os.path.join(scratch, "ca.json")
        write_private(held, authority)
        cert, key, ca_copy = issue(held, name, hosts, os.path.join(directory, "certs"),
                                   days=days)
    private_dir(os.path.dirname(security.ca_file))
    with open(ca_copy, encoding="ascii") as f:
        write_private(security.ca_file, f.read())
    os.remove(ca_copy)
    for user in reads.users:
        write_private(security.password_file(user), _first_line(secret(f"users/{user}")) + "\n")
    for identity in reads.zookeeper:
        value = _first_line(secret(f"zookeeper/{identity}"))
        if ":" not in value:
            raise SecretError(f"secret {environment}/zookeeper/{identity} is not user:password")
        write_private(security.zookeeper_identity_file(identity), value + "\n")
    if reads.http:
        from broker.service_kit.http_security import HttpUser, hash_password, write_users_file
        users = []
        for user, role in HTTP_USERS:
            password = _first_line(secret(f"http/{user}"))
            write_private(security.http_password_file(user), password + "\n")
            users.append(HttpUser(user, role, hash_password(password)))
        write_users_file(security.http_users_file, users)
    return security


def _first_line(value: str) -> str:
    """The first line of ``value`` that is not blank, stripped ("" if none)."""
    return next((line.strip() for line in value.splitlines() if line.strip()), "")


#: the cloud brokers' listeners when secured: TLS at the rendered broker port
#: (what the load balancer and every client reach), the plaintext listener a
#: broker always has (asking for SCRAM too) beside it, reached by no one
#: (no security group opens it)
CLOUD_TLS_PORT, CLOUD_PLAINTEXT_PORT = 9092, 9094


def secured_options(service: str, security: LabSecurity, name: str) -> list[str]:
    """The secured ``--set`` options of ``service`` on the host whose
    certificate is ``name``:

    * broker: TLS at CLOUD_TLS_PORT, SCRAM, ACLs, replication over TLS as
      ``broker``, ZooKeeper over TLS as the ``cluster`` identity, /metrics
      over HTTPS with the HTTP users;
    * mirror: its user and ZooKeeper identity at the brokers' TLS listeners
      and ZooKeeper's TLS port (``credentials.*``), /metrics over HTTPS
      (``metrics_http.*``);
    * audit (``python -m audit serve`` and its counters): its user and
      identity (``credentials.*``), its HTTP port over HTTPS with the HTTP
      users (``http.*``).

    ZooKeeper takes the image's settings instead (zookeeper_environment),
    the analysis stack lines of the DAGs' settings file (``--warehouse-out``)."""
    if service == "broker":
        return ["--set", f"tls_port={CLOUD_TLS_PORT}", "--set", f"port={CLOUD_PLAINTEXT_PORT}",
                *_set(security.broker_settings(name), "")]
    if service == "mirror":
        return [*security.credential_options(MIRROR, ZK_MIRROR),
                *security.http_options(name, "metrics_http")]
    if service == "audit":
        return [*security.credential_options(AUDIT, ZK_AUDIT), *security.http_options(name)]
    raise SecretError(f"no secured options for {service!r} yet: the broker's, the mirror's "
                      f"and the audit's (ZooKeeper: --zookeeper-env-out; analysis: --warehouse-out)")


def _set(values: dict[str, str], table: str) -> list[str]:
    options = []
    for key, value in values.items():
        options += ["--set", f"{table}{key}={value}"]
    return options


#: the cloud's ZooKeeper client port (module zookeeper), TLS alone when secured
CLOUD_ZOOKEEPER_PORT = 2181


def zookeeper_environment(security: LabSecurity, name: str, key_store: str) -> dict[str, str]:
    """The samsa/zookeeper image's settings (infra/docker/zookeeper) of a
    secured member whose certificate is ``name``: TLS alone on its client
    port (CLOUD_ZOOKEEPER_PORT; Netty), no client certificate asked there
    (clients prove who they are with their digest identities), and TLS
    between the members (quorum and election: each proves itself to the
    other with its certificate, the authority's). The PEM key store is
    written to ``key_store`` (the owner's alone)."""
    tls = security.zookeeper_server_tls(name)
    tls.write_key_store(key_store)
    return {"ZOO_PORT": str(CLOUD_ZOOKEEPER_PORT), "ZOO_TLS_KEY_STORE": key_store,
            "ZOO_TLS_TRUST_STORE": security.ca_file, "ZOO_TLS_CLIENT_AUTH": tls.client_auth,
            "ZOO_TLS_QUORUM": "true"}


def write_environment(path: str, values: dict[str, str]) -> None:
    """``values`` as a ``docker run --env-file`` file (``KEY=value`` lines,
    taken literally: no quotes, no expansion) at ``path``."""
    for key, value in values.items():
        if any(c.isspace() for c in value):
            raise SecretError(f"a value an env file cannot hold: {key}={value!r}")
    write_private(path, "".join(f"{key}={value}\n" for key, value in values.items()))


def write_options(path: str, options: list[str]) -> None:
    """``SAMSA_SECURED_OPTIONS=...`` into ``path`` (a systemd
    EnvironmentFile: the unit's ``$SAMSA_SECURED_OPTIONS`` splits into words)."""
    for option in options:
        if any(c.isspace() or c in "\"'\\$" for c in option):
            raise SecretError(f"an option systemd would split or expand: {option!r}")
    write_private(path, f"SAMSA_SECURED_OPTIONS={' '.join(options)}\n")


def provision(client, security: LabSecurity, acls_path: str) -> tuple[int, int]:
    """Each user's credential (written where missing or no longer matching
    its password) and the ACLs of ``acls_path``, through ``client`` (started,
    in the cluster's chroot, as the ``cluster`` identity): (credentials
    written, ACL entries added)."""
    from broker.protocol.scram import ScramCredential
    from broker.security import store
    from broker.security.password_file import read_password_file
    written = 0
    for user in USERS:
        password = read_password_file(security.password_file(user), f"user {user}'s password")
        stored = store.read_credential(client, user)
        if stored is None or ScramCredential.from_password(
                password, stored.salt, stored.iterations) != stored:
            store.set_user(client, user, ScramCredential.from_password(password))
            written += 1
    return written, store.add_acls(client, read_acls(acls_path))


#: an [[acl]] table's keys: AclEntry's fields, in its order
ACL_FIELDS = ("principal", "permission", "operation", "resource_type", "name", "pattern_type")


def read_acls(path: str):
    """The entries of a rendered ACL file (``[[acl]]`` tables of ACL_FIELDS)."""
    from broker.security.acl import AclEntry
    try:
        with open(path, "rb") as f:
            held = tomllib.load(f)
    except OSError as exc:
        raise SecretError(f"cannot read the ACLs {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SecretError(f"{path} is not TOML: {exc}") from None
    try:
        return [AclEntry(*(e[field] for field in ACL_FIELDS)) for e in held.get("acl", [])]
    except (KeyError, TypeError, ValueError) as exc:
        raise SecretError(f"{path}: a bad [[acl]] entry: {exc}") from None


def acls_toml(entries) -> str:
    """``entries`` as a rendered ACL file (read_acls reads it)."""
    lines = []
    for e in entries:
        lines.append("[[acl]]")
        for field in ACL_FIELDS:
            value = getattr(e, field)
            lines.append(f"{field} = {json.dumps(getattr(value, 'value', value))}")
        lines.append("")
    return "\n".join(lines)


def database_credentials(store: SecretStore, secret_id: str) -> str:
    """The ``username`` and ``password`` of RDS's master user secret
    ``secret_id`` (JSON, what the audit's --db-credentials-file takes)."""
    text = store.get(secret_id)
    try:
        held = json.loads(text)
    except ValueError:
        raise SecretError(f"secret {secret_id} is not JSON (RDS's master user secret is)"
                          ) from None
    if not (isinstance(held, dict) and all(isinstance(held.get(k), str) and held[k]
                                           for k in ("username", "password"))):
        raise SecretError(f"secret {secret_id} has no username and password")
    return json.dumps({"username": held["username"], "password": held["password"]}) + "\n"


def database_url(credentials_file: str, url: str) -> str:
    """``url`` (no user or password of its own) with the user and password
    of ``credentials_file`` (audit.credentials: JSON, username and password)
    put in."""
    from urllib.parse import quote, urlsplit, urlunsplit

    from audit.credentials import CredentialsError, read_credentials
    try:
        username, password = read_credentials(credentials_file)
    except CredentialsError as exc:
        raise SecretError(str(exc)) from None
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname or "@" in parts.netloc:
        raise SecretError(f"not a database URL without a user: {url!r}")
    netloc = f"{quote(username, safe='')}:{quote(password, safe='')}@{parts.netloc}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def keep_database_credentials(store: SecretStore, secret_id: str, path: str,
                              every: float, stop) -> None:
    """Read ``secret_id`` every ``every`` seconds until ``stop`` (an Event)
    is set, rewriting ``path`` when it changed (a rotation). A read that
    fails is logged and the file kept: the next read may succeed."""
    log = logging.getLogger("host_secrets")
    while not stop.wait(every):
        try:
            value = database_credentials(store, secret_id)
        except SecretError as exc:
            log.warning("the database credentials not read again (kept as they are): %s", exc)
            continue
        if not _holds(path, value):
            write_private(path, value)
            log.info("the database credentials changed (rotated): %s written again", path)


def _holds(path: str, value: str) -> bool:
    """Whether the file ``path`` holds ``value`` already."""
    try:
        with open(path) as f:
            return f.read() == value
    except OSError:
        return False


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m infra.host_secrets", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=cli.exit_status((0, "done"), (2, "bad usage, or a secret, the authority, "
                                                "ZooKeeper or a file that cannot be had "
                                                "(one line on stderr)")))
    cli.add_version_option(p)
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="read the service's secrets and issue its certificate")
    f.add_argument("--service", required=True, choices=sorted(READS))
    f.add_argument("--environment", required=True, help="the secrets' prefix (samsa-prod)")
    f.add_argument("--region", required=True, help="the region whose secrets (or replicas) "
                                                   "to read: the host's own")
    f.add_argument("--name", required=True, help="the certificate's name (its files')")
    f.add_argument("--host", action="append", required=True,
                   help="an address or DNS name the certificate is valid for (repeat)")
    f.add_argument("--out", required=True, help="the security directory (made 0700)")
    f.add_argument("--days", type=int, default=365)
    f.add_argument("--options-out", help="write the service's secured --set options here, "
                                         "as SAMSA_SECURED_OPTIONS= (a systemd EnvironmentFile; "
                                         "broker, mirror, audit)")
    f.add_argument("--warehouse-out", help="(analysis) write what the DAGs' settings file adds "
                                           "after its [warehouse] table's own lines: the audit "
                                           "over HTTPS as airflow, [loader.credentials]")
    f.add_argument("--zookeeper-env-out", help="(zookeeper) write the samsa/zookeeper image's "
                                               "TLS settings here (docker run --env-file), its "
                                               "key store beside it (zookeeper.pem)")
    d = sub.add_parser("database", help="(the audit) write a database's master user "
                                        "credentials from RDS's secret, and keep them")
    d.add_argument("--secret-id", required=True, help="the secret RDS keeps (its ARN)")
    d.add_argument("--region", required=True, help="the secret's region: the host's own")
    d.add_argument("--out", required=True, help="the credentials file (JSON, made 0600)")
    d.add_argument("--every", type=float, default=0.0,
                   help="read it again every so many seconds and rewrite the file when it "
                        "changed, until stopped (0: once)")
    u = sub.add_parser("database-url", help="print a database URL with the user and password "
                                            "of a credentials file put in")
    u.add_argument("--credentials", required=True, help="the file database wrote")
    u.add_argument("--url", required=True, help="the URL, without a user or password")
    v = sub.add_parser("provision", help="(a broker) write the users and ACLs in ZooKeeper")
    v.add_argument("--security", required=True, help="the directory fetch wrote")
    v.add_argument("--acls", required=True, help="the cluster's ACL file (python -m infra.render)")
    v.add_argument("--zookeeper", required=True, help="host:port[,...]/chroot of the cluster")
    v.add_argument("--timeout", type=float, default=120.0,
                   help="seconds to wait for ZooKeeper (an ensemble still forming)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "fetch":
            for given, option, services in (
                    (args.options_out, "--options-out", ("broker", "mirror", "audit")),
                    (args.warehouse_out, "--warehouse-out", ("analysis",)),
                    (args.zookeeper_env_out, "--zookeeper-env-out", ("zookeeper",))):
                if given and args.service not in services:
                    raise SecretError(f"{option} is for {' and '.join(services)}, "
                                      f"not {args.service}")
            security = fetch(SecretsManager(args.region), args.environment, args.service,
                             args.name, args.host, args.out, args.days)
            print(f"{args.service}: secrets of {args.environment} in {args.out}, "
                  f"certificate {args.name} for {', '.join(args.host)}")
            if args.options_out:
                write_options(args.options_out, secured_options(args.service, security,
                                                                args.name))
                print(f"secured options in {args.options_out}")
            if args.warehouse_out:
                write_private(args.warehouse_out, security.warehouse_toml())
                print(f"the warehouse's secured settings in {args.warehouse_out}")
            if args.zookeeper_env_out:
                key_store = os.path.join(
                    os.path.dirname(os.path.abspath(args.zookeeper_env_out)), "zookeeper.pem")
                write_environment(args.zookeeper_env_out,
                                  zookeeper_environment(security, args.name, key_store))
                print(f"the ZooKeeper image's TLS settings in {args.zookeeper_env_out}")
            return 0
        if args.command == "database":
            return _database(args)
        if args.command == "database-url":
            print(database_url(args.credentials, args.url))
            return 0
        return _provision(args)
    except (SecretError, AuthorityError, ValueError) as exc:
        print(f"python -m infra.host_secrets: {exc}", file=sys.stderr)
        return 2
    except KazooException as exc:      # provision: refused or lost by ZooKeeper
        print(f"python -m infra.host_secrets: ZooKeeper at {args.zookeeper}: "
              f"{type(exc).__name__} {exc}".rstrip(), file=sys.stderr)
        return 2
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"python -m infra.host_secrets: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def _database(args) -> int:
    import signal
    import threading
    store = SecretsManager(args.region)
    value = database_credentials(store, args.secret_id)
    if _holds(args.out, value):           # a rewrite would restart what watches it
        print(f"the database credentials of {args.secret_id} in {args.out}: unchanged",
              flush=True)
    else:
        write_private(args.out, value)
        print(f"the database credentials of {args.secret_id} in {args.out}", flush=True)
    if args.every > 0:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(message)s")
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        keep_database_credentials(store, args.secret_id, args.out, args.every, stop)
    return 0


def _provision(args) -> int:
    from kazoo.security import make_acl

    from broker.coordination.zk import make_client, start_client
    from broker.coordination.zk_acls import Identity
    # kazoo's warnings of each refused connection would bury the one line
    # that says what failed
    logging.getLogger("kazoo").setLevel(logging.ERROR)
    security = LabSecurity(args.security)
    identity = Identity.from_file(security.zookeeper_identity_file(ZK_CLUSTER))
    client = make_client(args.zookeeper, identity=identity, tls=security.zookeeper_tls())
    start_client(client, args.zookeeper, timeout=args.timeout, what="provision")
    try:
        # the chroot: the cluster's; everyone may read it and add a subtree
        # of their own (each writer owns what it makes), as in the lab
        client.set_acls("/", [identity.owner(), make_acl("world", "anyone", read=True,
                                                         create=True)])
        written, added = provision(client, security, args.acls)
    finally:
        client.stop()
        client.close()
    print(f"{written} credentials written, {added} ACL entries added in {args.zookeeper}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
