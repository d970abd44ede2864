"""The secured lab's secrets, made on the spot (issue 30, point 6;
docs/security.md, "The secured lab").

``LabSecurity(directory).prepare(topology)`` makes, once, in the lab's
``security/`` directory (each directory the owner's alone, 0700; keys,
passwords and identities 0600):

    ca/ca.crt, ca/ca.key            a certificate authority of the lab's own
    certs/<host>.crt, .key          a certificate per host that serves: each
                                    broker's (valid for its address, its load
                                    balancer's and localhost), each mirror
                                    process's, schema registry's, the lag
                                    service's, the audit's, Prometheus's and
                                    Airflow's (their HTTP ports), each load
                                    balancer's (its stats page), each
                                    ZooKeeper member's (its TLS client port)
    certs/<host>.pem                a load balancer's certificate and key in
                                    one file, as HAProxy reads them (written
                                    at every start, from the two)
    users/<user>.password           a random SCRAM-SHA-512 password per user
    zookeeper/<identity>.zk         a random ZooKeeper digest identity
                                    (user:password) per writer
    client/<user>.toml              the client settings of a user (the tools'
                                    --client-config, $SAMSA_CLIENT_CONFIG)
    http/users                      the users of every HTTP port (broker and
                                    mirror /metrics, registries, lag, audit;
                                    the load balancers' stats pages too):
                                    ``prometheus`` and ``airflow`` may read,
                                    ``admin`` all
    http/<user>.password            their passwords (first line)

and, once ZooKeeper runs, ``provision`` writes each cluster's users and
ACLs there as the cluster's ZooKeeper identity (only the brokers and that
identity may read them). A lab brought up again in the same directory keeps
its secrets (a client configured once keeps working).

Who is who (``USERS``): ``broker`` (the brokers to each other, a super
user), ``admin`` (the operators and the lab's own checks, a super user),
``producer`` (writes and creates topics in the datacenters), ``mirror``
(reads its sources, writes and creates topics in its target), ``lag`` (the
lag service: describes every topic), ``audit`` (the audit's counters and
service: read every topic in their own groups, write the audit topic),
``loader`` (the warehouse load: reads the analysis cluster, writes its
audit topic). ZooKeeper identities: ``cluster`` (the
brokers and operators' tools), ``mirror`` (the mirrors' groups and marks),
``registry`` (the schema registries' /schemas), ``audit`` (the audit's
counters' and service's groups), ``loader`` (the warehouse load
authenticates with it; it only reads ZooKeeper, its offsets are kept with
its output). HTTP users (``HTTP_USERS``): ``prometheus`` (read: Prometheus's
scrapes), ``airflow`` (read: the DAGs' audit sensor) and ``admin`` (the
operators, the lab's own checks, the registry's clients that register).

Invariant: nothing here is ever overwritten once made, except a certificate
whose host names no longer match the topology (a lab moved to other
addresses) or that ends within RENEW_DAYS when the lab is brought up, which
is issued again by the same authority. (A lab left running is not renewed
while it runs.)
The directory and each of its subdirectories are the owner's alone (0700),
so the certificates (0644 like any certificate) are not exposed either.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.coordination.zk_tls import ZooKeeperTls
from broker.harness.zookeeper import ZooKeeperServerTls
from broker.security.acl import AclEntry
from broker.security.ca import CertificateAuthority
from broker.security.credentials import ServiceCredentials
from broker.service_kit import settings
from broker.service_kit.http_security import HttpSecurity
from infra.local.haproxy import StatsSecurity
from infra.local.metrics import HttpAccess

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from infra.topology import Topology

#: the lab's SCRAM users
BROKER, ADMIN, PRODUCER, MIRROR, LAG = "broker", "admin", "producer", "mirror", "lag"
AUDIT, LOADER = "audit", "loader"
USERS = (BROKER, ADMIN, PRODUCER, MIRROR, LAG, AUDIT, LOADER)
SUPER_USERS = (f"User:{BROKER}", f"User:{ADMIN}")
#: the lab's ZooKeeper identities
ZK_CLUSTER, ZK_MIRROR, ZK_REGISTRY = "cluster", "mirror", "registry"
ZK_AUDIT, ZK_LOADER = "audit", "loader"
ZK_IDENTITIES = (ZK_CLUSTER, ZK_MIRROR, ZK_REGISTRY, ZK_AUDIT, ZK_LOADER)
#: the users of the lab's HTTP ports, and their roles: Prometheus's scrapes,
#: the DAGs' audit sensor (reads), the operators and the services that
#: register schemas
HTTP_READER, HTTP_DAGS, HTTP_ADMIN = "prometheus", "airflow", "admin"
HTTP_USERS = ((HTTP_READER, "read"), (HTTP_DAGS, "read"), (HTTP_ADMIN, "admin"))
#: a certificate that ends within this many days is issued again
RENEW_DAYS = 30
#: the consumer groups of the audit's counters (``audit-<cluster>``) and service
AUDIT_GROUP_PREFIXES = ("audit-", "samsa-audit-")


def private_dir(path: str) -> None:
    """``path`` and its missing parents made; ``path`` the owner's alone."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


def write_private(path: str, text: str) -> None:
    """``text`` into a new file readable by its owner alone, written whole;
    its directory made (the owner's alone) when missing, an existing one
    left as it is."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        private_dir(parent)
    partial = f"{path}.partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)             # a partial file an earlier run left, with its mode
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(partial, path)


def _allow(user: str, operation: str, resource_type: str = "topic",
           name: str = "*", pattern: str = "literal") -> AclEntry:
    """An entry allowing ``user`` ``operation`` on a resource."""
    return AclEntry(f"User:{user}", "allow", operation, resource_type, name, pattern)


#: the audit's topic (audit/counting.py's AUDIT_TOPIC; a test holds them equal)
AUDIT_TOPIC = "_audit"


def cluster_acls(topology: Topology, cluster: str) -> list[AclEntry]:
    """Exactly what each service needs in ``cluster``: the producers write
    (and create) in a datacenter; a mirror reads its sources and writes and
    creates in its target; the lag service describes every topic and group;
    the audit reads every topic (with any group of its own) and writes the
    audit topic; the loader, in the analysis cluster, reads every topic and
    writes the audit topic. The brokers and admin are super users and need
    no entry."""
    entries = [_allow(LAG, "describe"), _allow(LAG, "describe", "group"),
               _allow(AUDIT, "read"),
               *(_allow(AUDIT, "read", "group", prefix, "prefixed")
                 for prefix in AUDIT_GROUP_PREFIXES),
               _allow(AUDIT, "write", name=AUDIT_TOPIC), _allow(AUDIT, "create", name=AUDIT_TOPIC)]
    if topology.analysis is not None and cluster == topology.analysis.name:
        entries += [_allow(LOADER, "read"), _allow(LOADER, "write", name=AUDIT_TOPIC),
                    _allow(LOADER, "create", name=AUDIT_TOPIC)]
    if cluster in [dc.name for dc in topology.datacenters]:
        entries += [_allow(PRODUCER, "write"), _allow(PRODUCER, "create")]
    for mirror in topology.mirrors:
        if cluster in mirror.sources:
            entries += [_allow(MIRROR, "read"), _allow(MIRROR, "read", "group",
                                                       mirror.mirror_group)]
        if cluster == mirror.target:
            entries += [_allow(MIRROR, "write"), _allow(MIRROR, "create")]
    return entries


@dataclass(frozen=True)
class LabSecurity:
    """The paths of a secured lab's secrets, under ``directory``."""
    directory: str

    # ------------------------------------------------------------ paths

    @property
    def ca_file(self) -> str:
        """The lab's certificate authority's certificate (every client trusts it)."""
        return os.path.join(self.directory, "ca", "ca.crt")

    def cert_files(self, host: str) -> tuple[str, str]:
        """(certificate, key) of a host that serves (certificate_hosts)."""
        base = os.path.join(self.directory, "certs", host)
        return f"{base}.crt", f"{base}.key"

    def password_file(self, user: str) -> str:
        """The file holding ``user``'s SCRAM password (first line)."""
        return os.path.join(self.directory, "users", f"{user}.password")

    def zookeeper_identity_file(self, identity: str) -> str:
        """The file holding the ZooKeeper identity ``identity`` (user:password)."""
        return os.path.join(self.directory, "zookeeper", f"{identity}.zk")

    def client_config(self, user: str) -> str:
        """``user``'s client settings (the tools' --client-config)."""
        return os.path.join(self.directory, "client", f"{user}.toml")

    @property
    def http_users_file(self) -> str:
        """The users of every HTTP port of the lab (http_security)."""
        return os.path.join(self.directory, "http", "users")

    def http_password_file(self, user: str) -> str:
        """The file holding HTTP user ``user``'s password (first line)."""
        return os.path.join(self.directory, "http", f"{user}.password")

    def exists(self) -> bool:
        """Whether the secrets were made (the authority's certificate is there)."""
        return os.path.exists(self.ca_file)

    # ------------------------------------------------------------ making them

    def prepare(self, topology: Topology) -> LabSecurity:
        """Every secret of the lab, made where missing (see the module);
        OSError or ValueError when an existing one cannot be used."""
        private_dir(self.directory)
        ca_dir = os.path.dirname(self.ca_file)
        private_dir(ca_dir)
        ca = CertificateAuthority.open(ca_dir) if os.path.exists(self.ca_file) else \
            CertificateAuthority.create(ca_dir, name=f"{topology.name} lab CA")
        renew_before = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=RENEW_DAYS)
        for host, names in certificate_hosts(topology).items():
            cert, _key = self.cert_files(host)
            private_dir(os.path.dirname(cert))
            wanted = sorted(set(names))
            hosts, ends = _certificate_of(cert)
            if hosts != wanted or ends is None or ends < renew_before:
                ca.issue(host, wanted, os.path.dirname(cert))
        for user in USERS:
            path = self.password_file(user)
            if not os.path.exists(path):
                write_private(path, secrets.token_urlsafe(24) + "\n")
            config = self.client_config(user)
            if not os.path.exists(config):
                write_private(config, self.client_toml(user))
        for identity in ZK_IDENTITIES:
            path = self.zookeeper_identity_file(identity)
            if not os.path.exists(path):
                write_private(path, f"samsa-{identity}:{secrets.token_urlsafe(24)}\n")
        http_files = [self.http_users_file] + [self.http_password_file(u) for u, _ in HTTP_USERS]
        if not all(os.path.exists(path) for path in http_files):
            # made whole again (a lab made before a user was added, a file lost)
            from broker.service_kit.http_security import HttpUser, hash_password, \
                write_users_file
            users = []
            for user, role in HTTP_USERS:
                password = secrets.token_urlsafe(24)
                write_private(self.http_password_file(user), password + "\n")
                users.append(HttpUser(user, role, hash_password(password)))
            private_dir(os.path.dirname(self.http_users_file))
            write_users_file(self.http_users_file, users)
            os.chmod(self.http_users_file, 0o600)
        return self

    def client_toml(self, user: str) -> str:
        """``user``'s client settings as TOML (a ClientSecurity's)."""
        from broker.client.authentication import ClientSecurity
        return (f"# {user}: the TLS listeners of the lab's brokers, SCRAM-SHA-512\n"
                + settings.to_toml(ClientSecurity(**self.client_settings(user))))

    def provision(self, client: KazooClient, topology: Topology, cluster: str) -> None:
        """``cluster``'s users and ACLs, written through ``client`` (a started
        kazoo client in the cluster's chroot with the ``cluster`` identity)."""
        from broker.security import store
        from broker.security.password_file import read_password_file
        from broker.protocol.scram import ScramCredential

        known = set(store.list_users(client))
        for user in USERS:
            if user not in known:
                password = read_password_file(self.password_file(user))
                store.set_user(client, user, ScramCredential.from_password(password))
        store.add_acls(client, cluster_acls(topology, cluster))

    # ------------------------------------------------------------ settings

    def broker_settings(self, host: str) -> dict[str, str]:
        """The secured settings of the broker on ``host`` (as ``--set``)."""
        cert, key = self.cert_files(host)
        return {"tls_cert_file": cert, "tls_key_file": key, "tls_ca_file": self.ca_file,
                "tls_client_auth": "none", "tls_authentication": "scram",
                "authentication": "scram", "authorization": "true",
                "super_users": ",".join(SUPER_USERS), "inter_broker_tls": "true",
                "sasl_username": BROKER, "sasl_password_file": self.password_file(BROKER),
                "zookeeper_auth_file": self.zookeeper_identity_file(ZK_CLUSTER),
                "zookeeper_tls": "true", "zookeeper_tls_ca_file": self.ca_file,
                **{f"metrics_http.{k}": v for k, v in self.http_settings(host).items()}}

    def zookeeper_server_tls(self, host: str) -> ZooKeeperServerTls:
        """The TLS client port of the ZooKeeper member on ``host`` (its
        only client port: no plaintext beside it), with that host's
        certificate. No client certificate is asked for: clients prove who
        they are by their digest identities, and the certificate proves the
        server to them. The members of an ensemble speak TLS to each other
        too (``quorum``)."""
        cert, key = self.cert_files(host)
        return ZooKeeperServerTls(cert, key, self.ca_file, client_auth="none", plaintext=False,
                                  quorum=True)

    def zookeeper_tls(self) -> ZooKeeperTls:
        """How every client of the lab reaches ZooKeeper: over TLS,
        trusting the lab's authority, the member's address checked."""
        return ZooKeeperTls(True, self.ca_file)

    def zookeeper_probe_context(self):
        """The client context of a four-letter-word probe (``ruok``, ``srvr``)
        of the lab's ZooKeeper, which answers them on its TLS port."""
        import ssl
        return ssl.create_default_context(cafile=self.ca_file)

    def http_security(self, host: str) -> HttpSecurity:
        """The ``[http]`` (or ``[metrics_http]``) table of the service on
        ``host``: HTTPS with the host's certificate, the lab's HTTP users."""
        cert, key = self.cert_files(host)
        return HttpSecurity(tls_cert_file=cert, tls_key_file=key,
                            users_file=self.http_users_file)

    def http_settings(self, host: str) -> dict[str, str]:
        """http_security as ``--set`` values (keys without the table)."""
        return _changed(self.http_security(host))

    def http_options(self, host: str, table: str = "http") -> list[str]:
        """http_settings as a command's ``--set TABLE.KEY=VALUE`` options."""
        return _set_options(self.http_security(host), table)

    def stats_security(self, host: str) -> StatsSecurity:
        """The stats page of the load balancer ``host`` (``<cluster>.haproxy``):
        HTTPS with its certificate (written here as the one PEM file HAProxy
        reads), every HTTP user of the lab may read it."""
        from broker.security.password_file import read_password_file
        cert, key = self.cert_files(host)
        pem = os.path.join(self.directory, "certs", f"{host}.pem")
        with open(cert) as c, open(key) as k:
            write_private(pem, c.read() + k.read())
        return StatsSecurity(pem, tuple((user, read_password_file(self.http_password_file(user)))
                                        for user, _role in HTTP_USERS))

    def write_prometheus_web_config(self, path: str) -> str:
        """Prometheus's web configuration (``--web.config.file``) written to
        ``path`` (0600): HTTPS with the certificate of host ``prometheus``,
        every HTTP user of the lab by a bcrypt hash of its password. Made
        anew at every start (a password changed is taken); returns ``path``."""
        from broker.security.password_file import read_password_file
        from infra.local import prometheus
        cert, key = self.cert_files("prometheus")
        users = [(user, prometheus.hash_password(read_password_file(
            self.http_password_file(user)))) for user, _role in HTTP_USERS]
        write_private(path, prometheus.web_config(cert, key, users))
        return path

    def http_access(self, user: str = HTTP_ADMIN) -> HttpAccess:
        """How a client of the lab's HTTP ports asks as ``user``."""
        return HttpAccess(self.ca_file, user, self.http_password_file(user))

    def credentials(self, user: str, zookeeper_identity: str | None = None
                    ) -> ServiceCredentials:
        """A service's ``[credentials]``: ``user`` at the brokers' TLS
        listeners, the ZooKeeper identity named (if any), ZooKeeper over TLS."""
        return ServiceCredentials(
            sasl_username=user, sasl_password_file=self.password_file(user), tls=True,
            tls_ca_file=self.ca_file,
            zookeeper_auth_file=self.zookeeper_identity_file(zookeeper_identity)
            if zookeeper_identity else "",
            zookeeper_tls=True, zookeeper_tls_ca_file=self.ca_file)

    def credential_options(self, user: str, zookeeper_identity: str | None = None
                           ) -> list[str]:
        """A service command's ``--set credentials.KEY=VALUE`` options for
        ``user``: those of ``credentials`` that differ from the defaults."""
        return _set_options(self.credentials(user, zookeeper_identity), "credentials")

    def credentials_toml(self, user: str, table: str,
                         zookeeper_identity: str | None = None) -> str:
        """``user``'s credentials (with the ZooKeeper identity named, if
        any) as the TOML table ``table``."""
        return settings.to_toml(self.credentials(user, zookeeper_identity), table)

    def warehouse_toml(self) -> str:
        """What a secured lab adds to the DAGs' settings file, after its
        ``[warehouse]`` table's own lines: the audit asked over HTTPS as the
        ``airflow`` reader, and ``[loader.credentials]`` (the ``loader`` user
        and ZooKeeper identity)."""
        access = self.http_access(HTTP_DAGS)
        lines = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (
            ("audit_ca_file", access.ca_file), ("audit_username", access.username),
            ("audit_password_file", access.password_file)))
        return lines + "\n" + self.credentials_toml(LOADER, "loader.credentials", ZK_LOADER)

    def client_settings(self, user: str) -> dict:
        """``user``'s settings for a ProducerConfig or ConsumerConfig."""
        return self.credentials(user).client_settings()

    def admin_options(self, user: str) -> dict:
        """``user``'s keyword arguments of an AdminClient or BrokerConnection."""
        return self.credentials(user).admin_options()


def _changed(given) -> dict[str, object]:
    """The fields of the dataclass ``given`` that differ from its defaults."""
    default = type(given)()
    return {f.name: getattr(given, f.name) for f in dataclasses.fields(given)
            if getattr(given, f.name) != getattr(default, f.name)}


def _set_options(given, table: str) -> list[str]:
    """``given``'s changed fields as ``--set TABLE.KEY=VALUE`` options."""
    options = []
    for key, value in _changed(given).items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        options += ["--set", f"{table}.{key}={text}"]
    return options


def certificate_hosts(topology: Topology) -> dict[str, list[str]]:
    """Each serving host's names for its certificate: a broker's address,
    its cluster's load balancer's (clients reach it through it) and
    localhost; a mirror process's, a schema registry's, the lag service's,
    the audit's, Prometheus's and Airflow's address and localhost (their
    HTTP ports); a load balancer's with a stats page, its address and
    localhost; ZooKeeper's (``zookeeper``, every member's; in the network
    lab each member's, ``<cluster>.zookeeper-<i>``), its address and
    localhost (its TLS client port)."""
    from infra.topology import ConfigError
    out = {}
    local = ["localhost", "127.0.0.1"]
    for cluster in topology.clusters():
        lb = [topology.address_of(f"{cluster.name}.haproxy")] if cluster.load_balancer else []
        for i in range(cluster.brokers):
            host = f"{cluster.name}.broker-{i}"
            out[host] = [topology.address_of(host), *lb, *local]
    others = [f"{m.name}.mirror-{i}" for m in topology.mirrors for i in range(m.processes)]
    others += [f"{c.name}.registry" for c in topology.clusters()] + ["lag", "audit",
                                                                      "prometheus", "airflow"]
    others += [f"{c.name}.haproxy" for c in topology.clusters()
               if c.load_balancer and topology.lb_stats_port(c.name) is not None]
    for host in others:
        try:
            out[host] = [topology.address_of(host), *local]
        except ConfigError:          # a network lab without that host
            continue
    if topology.network.namespaces:
        for cluster in topology.clusters():
            for host, address, _port in topology.zookeeper_members(cluster.name):
                out[host] = [address, *local]
    else:
        out["zookeeper"] = [topology.host, *local]   # every member on the one address
    return out


def _certificate_of(cert_path: str) -> tuple[list[str] | None, dt.datetime | None]:
    """The DNS names and addresses a certificate is valid for (sorted), and
    when it ends; (None, None) when there is none."""
    if not os.path.exists(cert_path):
        return None, None
    from cryptography import x509
    with open(cert_path, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    ends = cert.not_valid_after_utc
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], ends
    return sorted(set([str(n) for n in names.get_values_for_type(x509.DNSName)]
                      + [str(a) for a in names.get_values_for_type(x509.IPAddress)])), ends
