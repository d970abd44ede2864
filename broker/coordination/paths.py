"""The ZooKeeper node layout (the paper's, as in Kafka 0.7). Pure functions.

Every cluster lives under its own chroot (``host:port/cluster-a``), so one
ensemble can serve several clusters::

    /brokers/ids/<broker id>                         ephemeral  "host:port"
    /brokers/topics/<topic>/<broker id>              ephemeral  "<partition count>"
    /consumers/<group>/ids/<consumer id>             ephemeral  JSON subscription
    /consumers/<group>/owners/<topic>/<broker-partition>   ephemeral  "<consumer id>"
    /consumers/<group>/offsets/<topic>/<broker-partition>  persistent "<offset>"

A *broker-partition* names partition p of broker b as "b-p" (partitions
are numbered per broker); sorted numerically by (b, p).

Replicated topics (docs/replication.md; replica_state.py) live beside them::

    /brokers/racks/<broker id>                       ephemeral  "<rack>"
    /replication/topics/<topic>                      persistent assignment (JSON)
    /replication/topics/<topic>/<partition>          persistent leader, epoch, in-sync set (JSON)
    /replication/controller                          ephemeral  the controller (JSON)
    /replication/controller_epoch                    persistent "<epoch>"
    /replication/reassign/<topic>:<partition>        persistent a reassignment asked (JSON)
    /replication/elect_preferred/<topic>:<partition> persistent a preferred election asked

Their partitions are numbered cluster-wide, and a replicated partition is
named by its number alone ("0", "1", ...): it has no fixed broker. Its
consumer offsets live at /consumers/<group>/offsets/<topic>/<partition>, as
in Kafka 0.8.

Security records (docs/security.md; broker/security/store.py reads and
writes them, the ``users`` and ``acls`` tools are its users)::

    /security/users/<user>                         persistent {"SCRAM-SHA-512": "<credential>"}
    /security/scram_secret                         persistent 32 random bytes (unknown users' salts)
    /security/acls/<resource type>/<pattern type>:<name>
                                                   persistent that pattern's entries (JSON list)

A credential is ``ScramCredential.to_text()`` (never the password). An ACL
node holds every entry whose resource pattern is the node's: resource type
``topic``, ``group`` or ``cluster``, pattern type ``literal`` or
``prefixed``, and the name (``*`` is every resource of the type). A pattern
type has no ':', so the node name splits back at its first ':'.
"""
from __future__ import annotations

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
BROKER_RACKS = "/brokers/racks"
BROKER_TLS = "/brokers/tls"               # <id>: "host:port" of the broker's TLS listener
REPLICATION = "/replication"
REPLICATED_TOPICS = "/replication/topics"
CONTROLLER = "/replication/controller"
CONTROLLER_EPOCH = "/replication/controller_epoch"
REASSIGNMENTS = "/replication/reassign"
PREFERRED_ELECTIONS = "/replication/elect_preferred"
SECURITY = "/security"
SECURITY_USERS = "/security/users"
SCRAM_SECRET = "/security/scram_secret"   # bytes that make unknown users' salts
SECURITY_ACLS = "/security/acls"


def user_path(user: str) -> str:
    return f"{SECURITY_USERS}/{user}"


def acl_type_path(resource_type: str) -> str:
    """The parent of every ACL node of one resource type ("topic", ...)."""
    return f"{SECURITY_ACLS}/{resource_type}"


def acl_node_name(pattern_type: str, name: str) -> str:
    """"<pattern type>:<name>" ("literal:events", "prefixed:pv-")."""
    return f"{pattern_type}:{name}"


def parse_acl_node_name(node: str) -> tuple[str, str]:
    """'prefixed:pv-' -> ('prefixed', 'pv-'), split at the first ':' (a
    name may hold ':'); ValueError when there is no ':' or either part is empty."""
    pattern_type, sep, name = node.partition(":")
    if not sep or not pattern_type or not name:
        raise ValueError(f"not an ACL node name (<pattern type>:<name>): {node!r}")
    return pattern_type, name


def acl_path(resource_type: str, pattern_type: str, name: str) -> str:
    return f"{SECURITY_ACLS}/{resource_type}/{acl_node_name(pattern_type, name)}"


def broker_rack_path(broker_id: int) -> str:
    return f"{BROKER_RACKS}/{broker_id}"


def broker_tls_path(broker_id: int) -> str:
    return f"{BROKER_TLS}/{broker_id}"


def replicated_topic_path(topic: str) -> str:
    return f"{REPLICATED_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{REPLICATED_TOPICS}/{topic}/{partition}"


def partition_request_name(topic: str, partition: int) -> str:
    """The node name of a request about one partition: "<topic>:<partition>"
    (':' is not allowed in topic names, so the name splits back unambiguously)."""
    return f"{topic}:{partition}"


def parse_partition_request_name(name: str) -> tuple[str, int]:
    """'t:3' -> ('t', 3); ValueError for anything else."""
    topic, sep, partition = name.rpartition(":")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"not a partition request: {name!r}")
    return topic, int(partition)


def reassignment_path(topic: str, partition: int) -> str:
    return f"{REASSIGNMENTS}/{partition_request_name(topic, partition)}"


def preferred_election_path(topic: str, partition: int) -> str:
    return f"{PREFERRED_ELECTIONS}/{partition_request_name(topic, partition)}"


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def broker_topic_path(topic: str, broker_id: int | None = None) -> str:
    base = f"{BROKER_TOPICS}/{topic}"
    return base if broker_id is None else f"{base}/{broker_id}"


def group_path(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_id_path(group: str, consumer_id: str) -> str:
    return f"{CONSUMERS}/{group}/ids/{consumer_id}"


def owners_path(group: str, topic: str, broker_partition: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/owners/{topic}"
    return base if broker_partition is None else f"{base}/{broker_partition}"


def offsets_path(group: str, topic: str, broker_partition: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/offsets/{topic}"
    return base if broker_partition is None else f"{base}/{broker_partition}"


def broker_partition(broker_id: int, partition: int) -> str:
    return f"{broker_id}-{partition}"


def parse_broker_partition(name: str) -> tuple[int, int]:
    """'3-1' -> (3, 1); ValueError for anything else."""
    broker, sep, partition = name.partition("-")
    if not sep or not broker.isdigit() or not partition.isdigit():
        raise ValueError(f"not a broker-partition: {name!r}")
    return int(broker), int(partition)


def partition_sort_key(name: str) -> tuple[int, ...]:
    """Numeric order of partition names: a replicated partition's ("3") by
    number, a broker-partition's ("3-1") by (broker, partition)."""
    return (int(name),) if name.isdigit() else parse_broker_partition(name)


def sort_broker_partitions(names) -> list[str]:
    """Partition names (of either kind) in numeric order."""
    return sorted(names, key=partition_sort_key)
