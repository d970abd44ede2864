"""The ZooKeeper harness: real servers come up and serve, an ensemble
survives a follower's crash, stopping leaves no process behind, failures
say why; and the kazoo fault helpers do what the coordination tests need."""
from __future__ import annotations

import os

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

from broker.harness import (ZooKeeperEnsemble, ZooKeeperNotFoundError, ZooKeeperStartError,
                            find_classpath)
from broker.harness.kazoo_faults import drop_connection, expire_session
from broker.service_kit.process import command_lines


def _client(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=15)
    return client


def _our_processes(marker: str) -> list[int]:
    """Pids of live processes whose command line mentions ``marker``."""
    return [pid for pid, argv in command_lines() if marker.encode() in b"\0".join(argv)]


def test_single_server_is_up_and_answers(zookeeper):
    server = zookeeper.servers[0]
    assert server.four_letter_word("ruok") == "imok"
    assert zookeeper.modes() == ["standalone"]
    assert zookeeper.connect_string() == f"127.0.0.1:{server.client_port}"
    assert zookeeper.connect_string("/a/b") == f"127.0.0.1:{server.client_port}/a/b"
    assert zookeeper.connect_string("a/") == f"127.0.0.1:{server.client_port}/a"


def test_kazoo_create_and_get_through_a_chroot(zookeeper, zk_client, zk_chroot):
    zk_client.create("/greeting", b"hello", makepath=True)
    assert zk_client.get("/greeting")[0] == b"hello"
    root = _client(zookeeper.connect_string())
    try:     # the same node, seen from outside the chroot
        assert root.get(f"{zk_chroot}/greeting")[0] == b"hello"
    finally:
        root.stop()
        root.close()


def test_ensemble_has_one_leader_and_followers(zk_ensemble):
    assert sorted(zk_ensemble.modes()) == ["follower", "follower", "leader"]
    assert zk_ensemble.connect_string("/x") == ",".join(
        f"127.0.0.1:{server.client_port}" for server in zk_ensemble.servers) + "/x"


def test_killing_a_follower_keeps_the_ensemble_serving(zk_ensemble, zk_chroot):
    follower = zk_ensemble.followers()[0]
    path = f"{zk_chroot}/written-while-down"
    client = _client(zk_ensemble.connect_string())
    try:
        zk_ensemble.kill(follower)
        assert not zk_ensemble.servers[follower].is_running()
        zk_ensemble.wait_serving(timeout=10)     # the two left still form a quorum
        client.retry(client.create, path, b"quorum of two", makepath=True)
        assert client.retry(client.get, path)[0] == b"quorum of two"
    finally:
        client.stop()
        client.close()
        zk_ensemble.restart(follower)
    assert sorted(zk_ensemble.modes()) == ["follower", "follower", "leader"]
    # the restarted member synced what was written while it was down
    only_it = _client(zk_ensemble.servers[follower].address)
    try:
        assert only_it.get(path)[0] == b"quorum of two"
    finally:
        only_it.stop()
        only_it.close()


def test_drop_connection_suspends_and_keeps_the_session(zk_client):
    zk_client.create("/mine", ephemeral=True)
    session_id = zk_client.client_id[0]
    states = drop_connection(zk_client)
    assert states[:2] == [KazooState.SUSPENDED, KazooState.CONNECTED]
    assert zk_client.client_id[0] == session_id
    assert zk_client.exists("/mine") is not None     # same session, ephemeral kept


def test_expire_session_loses_the_session_and_gets_a_new_one(zk_client):
    zk_client.create("/mine", ephemeral=True)
    session_id = zk_client.client_id[0]
    states = expire_session(zk_client)
    assert KazooState.LOST in states and states[-1] == KazooState.CONNECTED
    assert zk_client.client_id[0] != session_id
    assert zk_client.exists("/mine") is None         # the server ended the session


def test_stop_leaves_no_java_process_behind(tmp_path):
    with ZooKeeperEnsemble(3, str(tmp_path)) as ensemble:
        pids = ensemble.pids()
        assert len(pids) == 3 and sorted(_our_processes(str(tmp_path))) == sorted(pids)
        ensemble.kill(ensemble.followers()[0])      # stop() copes with a dead member
    assert _our_processes(str(tmp_path)) == []
    assert all(not os.path.exists(f"/proc/{pid}") for pid in pids)


def test_temporary_directory_is_removed_at_stop():
    ensemble = ZooKeeperEnsemble(1).start()
    directory = ensemble.directory
    assert os.path.isfile(ensemble.servers[0].log_path)
    ensemble.stop()
    assert not os.path.exists(directory)
    assert _our_processes(directory) == []


def test_a_server_that_cannot_start_says_why(tmp_path):
    ensemble = ZooKeeperEnsemble(1, str(tmp_path), settings={"tickTime": "soon"})
    with pytest.raises(ZooKeeperStartError) as failure:
        ensemble.start(timeout=20)
    message = str(failure.value)
    assert "exited" in message and ensemble.servers[0].log_path in message
    assert "soon" in message          # the log's tail names the bad value
    assert _our_processes(str(tmp_path)) == []


def test_classpath_prefers_debian_then_pyspark(tmp_path):
    debian, pyspark_jars = tmp_path / "java", tmp_path / "jars"
    debian.mkdir()
    pyspark_jars.mkdir()
    (pyspark_jars / "zookeeper-3.9.5.jar").touch()
    assert find_classpath(str(debian), str(pyspark_jars), environ={}) == f"{pyspark_jars}/*"
    (debian / "zookeeper.jar").touch()
    (debian / "slf4j-simple.jar").touch()
    assert find_classpath(str(debian), str(pyspark_jars), environ={}) == \
        f"{debian}/zookeeper.jar:{debian}/slf4j-simple.jar"
    (debian / "netty-codec.jar").touch()     # a TLS port's Netty factory needs it
    assert find_classpath(str(debian), str(pyspark_jars), environ={}) == \
        f"{debian}/zookeeper.jar:{debian}/netty-codec.jar:{debian}/slf4j-simple.jar"
    assert find_classpath(str(debian), str(pyspark_jars),
                          environ={"SAMSA_ZOOKEEPER_CLASSPATH": "/x/*"}) == "/x/*"


def test_missing_jars_say_what_to_install(tmp_path):
    with pytest.raises(ZooKeeperNotFoundError) as failure:
        find_classpath(str(tmp_path), str(tmp_path), environ={})
    assert "apt-get install zookeeper" in str(failure.value)
    assert "pip install pyspark" in str(failure.value)


def test_fixed_ports_go_into_every_members_config(tmp_path):
    # planned only (not started): the lab's topology names the ports itself
    ensemble = ZooKeeperEnsemble(3, str(tmp_path), client_ports=[31001, 31002, 31003],
                                 peer_ports=[(31011, 31012), (31013, 31014), (31015, 31016)])
    assert ensemble.connect_string("/dc-a") == \
        "127.0.0.1:31001,127.0.0.1:31002,127.0.0.1:31003/dc-a"
    for server in ensemble.servers:
        with open(server.config_path) as f:
            config = f.read()
        assert f"clientPort={31000 + server.server_id}" in config
        assert "server.2=127.0.0.1:31013:31014" in config
    with pytest.raises(ValueError, match="3 members need 3 client ports"):
        ZooKeeperEnsemble(3, str(tmp_path / "other"), client_ports=[31001])
