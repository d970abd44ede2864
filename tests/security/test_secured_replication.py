"""Replication between brokers whose listeners ask for SCRAM and whose ACLs
are enforced (issue 30, points 2 and 3): the followers authenticate to their
leader as the brokers' user (the settings sasl_username and
sasl_password_file), join the in-sync set and copy the leader byte for byte;
a client without ACLs for the topic gets nothing of it."""
from __future__ import annotations

import hashlib
import os

import pytest

from broker.client.admin import AdminClient
from broker.client.authentication import SaslLogin
from broker.client.connection import BrokerConnection, parse_address
from broker.protocol import api
from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode, SamsaError
from broker.protocol.scram import ScramCredential
from broker.security import store
from broker.security.acl import AclEntry
from broker.coordination.replica_state import PartitionState
from cluster_helpers import REPLICATED, partition_state
from broker_helpers import scram_connection, message_set, produce, wait_until


PASSWORDS = {"broker": "broker-secret", "admin": "admin-secret", "nobody": "nobody-secret"}


def login(broker, user) -> BrokerConnection:
    return scram_connection(broker.address, user, PASSWORDS[user], request_timeout=20)


def test_followers_authenticate_and_replicate(clusters, zookeeper, zk_chroot, tmp_path):
    password_file = tmp_path / "broker.pw"
    password_file.write_text(PASSWORDS["broker"] + "\n")
    # the users first: the cluster's brokers read them when they start
    from cluster_helpers import chroot_client
    zk = chroot_client(zookeeper.connect_string(f"{zk_chroot}-secured"))
    try:
        for user, password in PASSWORDS.items():
            store.set_user(zk, user, ScramCredential.from_password(password))
        # the brokers' user is no super user: the ACL docs/security.md names
        store.add_acls(zk, [AclEntry("User:broker", "allow", "cluster_action", "cluster",
                                     "cluster")])
    finally:
        zk.stop()
        zk.close()
    cluster = clusters("secured", brokers=2, settings={
        **REPLICATED, "authentication": "scram", "authorization": True,
        "super_users": "User:admin", "sasl_username": "broker",
        "sasl_password_file": str(password_file)})

    host, port = parse_address(cluster.brokers[0].address)
    with AdminClient(f"{host}:{port}", sasl=SaslLogin("admin", PASSWORDS["admin"])) as admin:
        admin.create_topic("payments", 1, {"replication.factor": "2"})
    # (a new partition starts with every replica in sync: what proves the
    # follower fetched is its bytes, below)
    wait_until(lambda: (s := state(cluster)) is not None and set(s.isr) == {0, 1}, 30,
               what=lambda: f"both replicas in sync: {state(cluster)}")
    leader = wait_serving_as_admin(cluster)
    with login(cluster.brokers[leader], "admin") as conn:
        for i in range(20):
            result = produce(conn, "payments", 0, message_set([b"payment-%d" % i]), Acks.ALL)
            assert result.error == 0, result.message
        end = result.end_offset
    # both replicas hold the same bytes (read from their files)
    wait_until(lambda: all(len(replica(b)) >= end for b in cluster.brokers.values()), 30,
               what="the follower to hold every acknowledged message")
    digests = {hashlib.sha256(replica(b)[:end]).hexdigest() for b in cluster.brokers.values()}
    assert len(digests) == 1
    # a user with no ACL gets nothing, on either broker
    for broker in cluster.brokers.values():
        with login(broker, "nobody") as conn:
            with pytest.raises(SamsaError) as info:
                conn.request(api.FetchRequest(0, 1, (api.FetchEntry("payments", 0, 0, 1 << 20),)))
            assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def state(cluster) -> PartitionState | None:
    return partition_state(cluster, "payments", 0)


def replica(broker) -> bytes:
    """The bytes of a broker's replica of payments/0, read from its one segment."""
    directory = os.path.join(broker.data_dir, "topics", "payments", "0")
    [segment] = [n for n in os.listdir(directory) if n.endswith(".log")]
    with open(os.path.join(directory, segment), "rb") as f:
        return f.read()


def wait_serving_as_admin(cluster) -> int:
    """The partition's leader, once it answers the admin user."""
    last = []

    def serving():
        s = state(cluster)
        leader = s.leader if s is not None else None
        if leader not in cluster.brokers:
            last[:] = [f"no live leader: {s}"]
            return None
        try:
            with login(cluster.brokers[leader], "admin") as conn:
                resp = conn.request(api.OffsetsRequest("payments", 0, api.LATEST))
        except SamsaError as exc:
            last[:] = [f"broker {leader}: {exc}"]
            return None
        last[:] = [f"broker {leader}: {resp}"]
        return [leader] if resp.error == 0 else None      # (broker 0 is falsy)
    return wait_until(serving, 30, interval=0.1,
                      what=lambda: f"the leader of payments/0 to serve ({last})")[0]
