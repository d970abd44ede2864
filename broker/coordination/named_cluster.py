"""A cluster, named: the one type every service names a cluster with.

A Samsa cluster is known by its ZooKeeper connect string with the cluster's
chroot ("zk1:2181,zk2:2181/dc-a"); its name ("dc-a") is what logs, metrics'
labels, URLs, monitoring events and the mirror's marks call it. Names are
letters, digits, '.', '_' and '-' (they go into ZooKeeper paths, Prometheus
labels and URLs unescaped).

On a command line a cluster is ``NAME=ZOOKEEPER``; ``ZOOKEEPER`` alone names
the cluster after the last part of its chroot (``127.0.0.1:2181/analysis``
is "analysis"); without a chroot the name must be given (``--cluster``),
except through the older ``--zookeeper`` option, which names it "default".

Two references are the same cluster when their ensembles share a server and
their chroots are equal (``same_cluster``): the mirror refuses a target that
is one of its sources.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from broker.coordination.zk import split_connect_string
from broker.coordination.zk_acls import Identity
from broker.coordination.zk_tls import ZooKeeperTls
from broker.service_kit.settings import ConfigError

NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")
COMMAND_LINE_FORM = "NAME=ZOOKEEPER (\"dc-a=127.0.0.1:2181/dc-a\")"


def check_name(name: str, what: str = "cluster name") -> str:
    """``name`` when it is a valid cluster name; ValueError saying why not."""
    if not NAME_PATTERN.fullmatch(name or ""):
        raise ValueError(f"{what} {name!r}: use letters, digits, '.', '_', '-'")
    return name


@dataclass(frozen=True)
class NamedCluster:
    name: str
    """A short name for logs, metrics, URLs and the mirrored-topic marks ("dc-a")."""
    zookeeper: str
    """ZooKeeper connect string with the cluster's chroot ("h1:2181,h2:2181/dc-a")."""

    def __post_init__(self) -> None:
        check_name(self.name)
        split_connect_string(self.zookeeper)       # raises ValueError when malformed

    def identity(self) -> tuple[frozenset[str], str]:
        """(servers, chroot): what makes two references the same cluster."""
        hosts, chroot = split_connect_string(self.zookeeper)
        servers = set()
        for server in hosts.split(","):
            host, _, port = server.strip().lower().rpartition(":")
            servers.add(f"{'127.0.0.1' if host == 'localhost' else host}:{port}")
        return frozenset(servers), chroot or "/"

    def same_cluster(self, other: "NamedCluster") -> bool:
        mine, theirs = self.identity(), other.identity()
        return bool(mine[0] & theirs[0]) and mine[1] == theirs[1]

    def __str__(self) -> str:
        return f"{self.name}={self.zookeeper}"


def chroot_name(zookeeper: str) -> str:
    """The last part of the connect string's chroot ("" without one);
    ValueError when the connect string is malformed."""
    _, chroot = split_connect_string(zookeeper)
    return (chroot or "").rstrip("/").rpartition("/")[2]


def parse_cluster(text: str) -> NamedCluster:
    """A cluster as given on a command line: ``NAME=ZOOKEEPER``, or
    ``ZOOKEEPER`` with a chroot (named after its last part). ConfigError
    when it is neither."""
    name, sep, zookeeper = text.partition("=")
    if not sep:
        name, zookeeper = "", text
    name, zookeeper = name.strip(), zookeeper.strip()
    try:
        if not name:
            name = chroot_name(zookeeper)
            if not name:
                raise ValueError(f"{zookeeper!r} has no chroot to name the cluster after: "
                                 f"give it as {COMMAND_LINE_FORM}")
        return NamedCluster(name, zookeeper)
    except ValueError as exc:
        raise ConfigError(f"a cluster is {COMMAND_LINE_FORM}: {exc}") from None


def add_cluster_option(parser, help: str, *, zookeeper_alias: bool = True,
                       zookeeper_flags: tuple[str, ...] = ("--zookeeper",),
                       zookeeper_security: bool = True) -> None:
    """``--cluster NAME=ZOOKEEPER`` (or ZOOKEEPER with a chroot), the one way a
    command names the cluster it works on; ``--zookeeper ZOOKEEPER``, the older
    spelling, stays as an alias of it (a ZOOKEEPER without a chroot is then
    named "default"; see ``cluster_from``)."""
    parser.add_argument("--cluster", metavar="NAME=ZOOKEEPER", help=help)
    if zookeeper_security:
        _add_zookeeper_security(parser)
    if zookeeper_alias:
        parser.add_argument(*zookeeper_flags, dest="zookeeper", metavar="ZOOKEEPER",
                            help="the cluster's ZooKeeper connect string with its chroot "
                                 "(an alias of --cluster ZOOKEEPER)")


def _add_zookeeper_security(parser) -> None:
    """How a tool authenticates to ZooKeeper and reaches it over TLS (a
    service takes the same from its settings' [credentials])."""
    parser.add_argument("--zookeeper-auth-file", metavar="FILE",
                        default=os.environ.get("SAMSA_ZOOKEEPER_AUTH_FILE", ""),
                        help="authenticate to ZooKeeper as the user:password on FILE's first "
                             "line (the cluster's identity, docs/security.md); default "
                             "$SAMSA_ZOOKEEPER_AUTH_FILE, else none")
    parser.add_argument("--zookeeper-tls-ca-file", metavar="FILE",
                        default=os.environ.get("SAMSA_ZOOKEEPER_TLS_CA_FILE", ""),
                        help="connect to ZooKeeper's TLS port (which the connect string then "
                             "names), trusting the authorities in FILE besides the system's "
                             "(kazoo adds those); default $SAMSA_ZOOKEEPER_TLS_CA_FILE. Any "
                             "--zookeeper-tls-* option turns TLS on")
    parser.add_argument("--zookeeper-tls-cert-file", metavar="FILE",
                        default=os.environ.get("SAMSA_ZOOKEEPER_TLS_CERT_FILE", ""),
                        help="a client certificate for ZooKeeper's TLS port (default "
                             "$SAMSA_ZOOKEEPER_TLS_CERT_FILE)")
    parser.add_argument("--zookeeper-tls-key-file", metavar="FILE",
                        default=os.environ.get("SAMSA_ZOOKEEPER_TLS_KEY_FILE", ""),
                        help="its key (default $SAMSA_ZOOKEEPER_TLS_KEY_FILE)")


def zookeeper_identity(args) -> Identity:
    """The identity ``--zookeeper-auth-file`` names (none without);
    ConfigError when the file is unusable."""
    try:
        return Identity.from_file(getattr(args, "zookeeper_auth_file", "") or "")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def zookeeper_tls(args) -> ZooKeeperTls:
    """TLS to ZooKeeper as ``--zookeeper-tls-ca-file`` and its companions
    say (any of them turns TLS on; none: plaintext); ConfigError when the
    files will not do."""
    files = [getattr(args, f"zookeeper_tls_{name}_file", "") or ""
             for name in ("ca", "cert", "key")]
    try:
        tls = ZooKeeperTls(any(files), *files)
        tls.kazoo_options()                 # the files, read now: one clear error
        return tls
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def cluster_from(args) -> NamedCluster | None:
    """The cluster ``add_cluster_option``'s options name; None when neither
    is given; ConfigError when both are, or either is malformed. A
    ``--zookeeper`` is taken as it always was, whatever its chroot: the
    cluster is named after the chroot's last part where that is a valid name,
    else "default" (the commands that take the alias use no name)."""
    given, alias = getattr(args, "cluster", None), getattr(args, "zookeeper", None)
    if given and alias:
        raise ConfigError("--cluster and --zookeeper name the same thing: give one")
    if alias:
        hosts_chroot = alias.strip()
        try:
            name = chroot_name(hosts_chroot)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return parse_cluster(f"{name if NAME_PATTERN.fullmatch(name) else 'default'}="
                             f"{hosts_chroot}")
    return parse_cluster(given) if given else None
