"""The records other writers keep in a cluster's ZooKeeper, protected
(issue 30, point 4), with a real ZooKeeper, real brokers and the real
commands: the schema registry's /schemas, written with the registry's
identity, and the mirror's marks of copied topics (/mirrored), written with
the mirror's. A stranger reads them (clients need the schemas, mirrors the
marks) but changes nothing; the chroot the registry makes stays open to the
brokers; and the zookeeper-acls tool secures both subtrees of a cluster
that ran open."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from kazoo.exceptions import NoAuthError

from broker.security.credentials import ServiceCredentials
from broker.client.cluster_producer import ClusterProducer
from broker.coordination import paths
from broker.coordination.named_cluster import NamedCluster
from broker.coordination.zk_acls import describe, is_open
from broker.service_kit.process import SupervisedProcess
from broker_helpers import run_module, wait_until
from mirror.config import MirrorConfig
from mirror.marks import MIRRORED_TOPICS
from mirror.mirror import Mirror

from test_zookeeper_acls import broker_registered, identity_file, stranger


PAGE_VIEW = "samsa.events.PageViewEvent"      # a shipped schema


def schemas_command(registry: str, *args: str, auth_file: str | None = None):
    env = {k: v for k, v in os.environ.items()
           if k != "SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE"}
    if auth_file is not None:
        env["SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE"] = auth_file
    return subprocess.run([sys.executable, "-m", "schemas", "--registry", registry, *args],
                          env=env, capture_output=True, timeout=60, check=False)


def test_the_registry_writes_its_schemas_with_its_identity(broker_factory, zookeeper,
                                                           zk_chroot, tmp_path):
    connect = zookeeper.connect_string() + zk_chroot
    registry = "zookeeper://" + connect
    owner = identity_file(tmp_path, "registry", "registry-secret")

    # the registry first, on a cluster nobody made yet: it makes the chroot
    done = schemas_command(registry, "register", "page_views", PAGE_VIEW, auth_file=owner)
    assert done.returncode == 0, done.stderr
    zk = stranger(connect)
    root = stranger(zookeeper.connect_string())
    try:
        assert is_open(root.get_acls(zk_chroot)[0]), "the chroot must stay open to the brokers"
        [schema_id] = zk.get_children("/schemas/ids")
        for node in ("/schemas", "/schemas/ids", f"/schemas/ids/{schema_id}",
                     "/schemas/subjects/page_views"):
            assert describe(zk.get_acls(node)[0]) == "digest:registry=all, world:anyone=read"
        # a stranger reads the schemas (clients need them) and changes nothing
        subject, _ = zk.get("/schemas/subjects/page_views")
        with pytest.raises(NoAuthError):
            zk.set("/schemas/subjects/page_views", b'{"versions": []}')
        with pytest.raises(NoAuthError):
            zk.delete(f"/schemas/ids/{schema_id}")
        with pytest.raises(NoAuthError):
            zk.create("/schemas/subjects/evil", b"{}")
        assert zk.get("/schemas/subjects/page_views")[0] == subject
    finally:
        zk.stop()
        zk.close()
        root.stop()
        root.close()

    # the registry's commands: reading needs no identity; writing without
    # the registry's, or with a wrong one, is refused with the reason
    listed = schemas_command(registry, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [s["subject"] for s in json.loads(listed.stdout)] == ["page_views"]
    for auth_file, who in ((None, b"a client without an identity"),
                           (identity_file(tmp_path, "mallory", "x"), b"mallory.zk")):
        refused = schemas_command(registry, "register", "clicks", PAGE_VIEW,
                                  auth_file=auth_file)
        assert refused.returncode == 3, refused.stderr
        assert b"refused" in refused.stderr and b"not writable by" in refused.stderr
        assert who in refused.stderr
    # registering what is registered writes nothing, so needs no identity
    # (every service registers its schemas at start: the audit, the mirror)
    again = schemas_command(registry, "register", "page_views", PAGE_VIEW)
    assert again.returncode == 0, again.stderr
    wrong = identity_file(tmp_path, "registry", "a wrong password")
    refused = schemas_command(registry, "config", "page_views", "FULL", auth_file=wrong)
    assert refused.returncode == 3, refused.stderr
    bad = tmp_path / "bad.zk"
    bad.write_text("no colon here\n")
    unusable = schemas_command(registry, "register", "clicks", PAGE_VIEW, auth_file=str(bad))
    assert unusable.returncode == 2 and b"user:password" in unusable.stderr
    listed = schemas_command(registry, "list", "--json")
    assert json.loads(listed.stdout) == [{"subject": "page_views", "versions": 1,
                                          "compatibility": "BACKWARD"}], \
        "a refusal changed the registry"

    # the brokers create their records under the chroot the registry made
    broker_factory({"zookeeper": connect})
    zk = stranger(connect)
    try:
        wait_until(lambda: zk.exists(paths.broker_id_path(0)), 20,
                   what="the broker to register under the registry's chroot")
    finally:
        zk.stop()
        zk.close()


def test_the_registry_service_takes_its_identity_from_its_settings(zookeeper, zk_chroot,
                                                                   tmp_path):
    connect = zookeeper.connect_string() + zk_chroot
    owner = identity_file(tmp_path, "registry", "registry-secret")
    settings = tmp_path / "registry.toml"
    settings.write_text(f'[schema_registry]\nregistry = "zookeeper://{connect}"\n'
                        f'port = 0\nzookeeper_auth_file = "{owner}"\n')
    process = SupervisedProcess(
        "schema-registry", [sys.executable, "-m", "schemas", "serve", "--config", str(settings)],
        str(tmp_path / "registry.log"))
    urls: list[str] = []

    def serving(line: bytes) -> bool:
        found = re.search(rb"schema registry on (https?://\S+)/", line)
        if found:
            urls.append(found.group(1).decode())
        return found is not None

    process.start(ready_line=serving)
    try:
        process.wait_ready(30)
        done = schemas_command(urls[0], "register", "page_views", PAGE_VIEW)
        assert done.returncode == 0, done.stderr
    finally:
        assert process.stop(10) == 0, process.tail_log()
    zk = stranger(connect)
    try:
        assert describe(zk.get_acls("/schemas/subjects/page_views")[0]) == \
            "digest:registry=all, world:anyone=read"
    finally:
        zk.stop()
        zk.close()


def test_the_mirror_marks_what_it_copies_with_its_identity(broker_factory, zookeeper,
                                                           zk_chroot, tmp_path):
    src = zookeeper.connect_string(f"{zk_chroot}-src")
    dst = zookeeper.connect_string(f"{zk_chroot}-dst")
    for connect in (src, dst):
        broker_factory({"zookeeper": connect, "log.flush_ms": 10})
    with ClusterProducer(src, acks="flushed") as producer:
        for i in range(50):
            producer.send("events", b"event-%d" % i)
        producer.flush(timeout=30)
    mirror_file = identity_file(tmp_path, "mirror", "mirror-secret")
    mirror = Mirror(MirrorConfig(
        sources=(NamedCluster("src", src),), target=NamedCluster("dst", dst),
        group="mirror", metrics_port=-1, commit_interval_ms=200,
        credentials=ServiceCredentials(zookeeper_auth_file=mirror_file))).start()
    try:
        wait_until(lambda: mirror.copied >= 50, 60, what="the mirror to copy everything")
    finally:
        mirror.close()
    zk = stranger(dst)
    try:
        mark = f"{MIRRORED_TOPICS}/events"
        for node in ("/mirrored", MIRRORED_TOPICS, mark):
            assert describe(zk.get_acls(node)[0]) == "digest:mirror=all, world:anyone=read"
        data, _ = zk.get(mark)                       # readable: mirrors leave copies out
        assert json.loads(data) == {"sources": ["src"]}
        with pytest.raises(NoAuthError):
            zk.delete(mark)                          # the loop guard cannot be removed
        with pytest.raises(NoAuthError):
            zk.set(mark, b'{"sources": []}')
        with pytest.raises(NoAuthError):
            zk.create(f"{MIRRORED_TOPICS}/orders", b'{"sources": ["dst"]}')
        assert zk.get(mark)[0] == data
    finally:
        zk.stop()
        zk.close()


def test_the_tool_secures_the_registrys_and_the_mirrors_records(broker_factory, zookeeper,
                                                                 zk_chroot, tmp_path):
    connect = zookeeper.connect_string() + zk_chroot
    cluster_file = identity_file(tmp_path, "samsa-cluster", "cluster-secret")
    registry_file = identity_file(tmp_path, "registry", "registry-secret")
    mirror_file = identity_file(tmp_path, "mirror", "mirror-secret")
    # a cluster that ran open: its registry and its mirror wrote open records
    done = schemas_command("zookeeper://" + connect, "register", "page_views", PAGE_VIEW)
    assert done.returncode == 0, done.stderr
    zk = stranger(connect)
    try:
        zk.create(f"{MIRRORED_TOPICS}/events", b'{"sources": ["dc-a"]}', makepath=True)
        zk.ensure_path("/someone-elses/record")
        assert is_open(zk.get_acls("/schemas/subjects/page_views")[0])
    finally:
        zk.stop()
        zk.close()
    broker_factory({"zookeeper": connect, "zookeeper_auth_file": cluster_file})
    wait_until(lambda: broker_registered(connect), 20, what="the broker to register")

    args = ("broker.tools", "zookeeper-acls", "--zookeeper", connect,
            "--zookeeper-auth-file", cluster_file, "--schemas", registry_file,
            "--mirrored", mirror_file)
    dry = run_module(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert b"would set /schemas/subjects/page_views" in dry.stdout
    assert b"would set /mirrored/topics/events" in dry.stdout
    zk = stranger(connect)
    try:
        assert is_open(zk.get_acls("/schemas/subjects/page_views")[0])  # changed nothing
    finally:
        zk.stop()
        zk.close()
    done = run_module(*args)
    assert done.returncode == 0, done.stderr
    assert b"left as they were: /someone-elses" in done.stdout
    zk = stranger(connect)
    try:
        for node, owner in (("/schemas/subjects/page_views", "registry"),
                            ("/schemas/ids", "registry"),
                            (f"{MIRRORED_TOPICS}/events", "mirror")):
            assert describe(zk.get_acls(node)[0]) == f"digest:{owner}=all, world:anyone=read"
        assert is_open(zk.get_acls("/someone-elses/record")[0])
    finally:
        zk.stop()
        zk.close()
    # the registry goes on with its identity, and only with it
    assert schemas_command("zookeeper://" + connect, "register", "clicks", PAGE_VIEW,
                           auth_file=registry_file).returncode == 0
    assert schemas_command("zookeeper://" + connect, "register", "views", PAGE_VIEW
                           ).returncode == 3
    again = run_module(*args)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(b"0 nodes secured"), again.stdout



def test_a_client_with_an_identity_first_on_a_new_cluster_leaves_room_for_the_brokers(
        broker_factory, zookeeper, zk_chroot, tmp_path):
    """A mirror's target producer (an identity of its own) that starts before
    any broker makes the brokers' paths it watches open, not its own: the
    broker, with the cluster's identity, still registers."""
    connect = zookeeper.connect_string() + zk_chroot
    mirror_file = identity_file(tmp_path, "mirror", "mirror-secret")
    cluster_file = identity_file(tmp_path, "samsa-cluster", "cluster-secret")
    with ClusterProducer(connect, acks="flushed", zookeeper_auth_file=mirror_file):
        zk = stranger(connect)
        try:
            assert is_open(zk.get_acls(paths.BROKER_IDS)[0])
        finally:
            zk.stop()
            zk.close()
        broker_factory({"zookeeper": connect, "zookeeper_auth_file": cluster_file})
        wait_until(lambda: broker_registered(connect), 20,
                   what="the broker to register under the paths the mirror made")
