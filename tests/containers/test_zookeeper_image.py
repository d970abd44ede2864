"""The samsa/zookeeper image purges old snapshots and transaction logs as the
cloud instances do (every ZOO_AUTOPURGE_HOURS, default 24, keeping the newest
ZOO_SNAP_RETAIN_COUNT, default 5): before, it never did — ZooKeeper's own
default — and a long-running member filled its volume. Both are read from
ZooKeeper's own log, which ``docker logs`` had none of: with every jar of
/usr/share/java on the classpath SLF4J chose its no-op backend."""
from __future__ import annotations

from broker_helpers import wait_until
from container_helpers import free_ports
from infra.docker.images import latest
from infra.docker.pipeline import zookeeper_serving


def test_the_image_purges_old_snapshots_by_default(containers):
    port = free_ports(1)[0]
    zk = containers.run("zookeeper-purge", latest("zookeeper"), env={"ZOO_PORT": port},
                        ready=lambda s: zookeeper_serving(port))
    # ZooKeeper says what it read, and its purge task runs once at start
    wait_until(lambda: "Purge task completed" in zk.logs(400), 30, interval=0.2,
               what="ZooKeeper's first purge")
    log = zk.logs(400)
    assert "autopurge.snapRetainCount set to 5" in log, log
    assert "autopurge.purgeInterval set to 24" in log, log


def test_the_purge_settings_come_from_the_environment(containers):
    port = free_ports(1)[0]
    zk = containers.run("zookeeper-no-purge", latest("zookeeper"),
                        env={"ZOO_PORT": port, "ZOO_AUTOPURGE_HOURS": 0,
                             "ZOO_SNAP_RETAIN_COUNT": 7},
                        ready=lambda s: zookeeper_serving(port))
    log = zk.logs(400)
    assert "autopurge.snapRetainCount set to 7" in log, log
    assert "Purge task is not scheduled" in log, log
