"""Real processes for the demo, the tests, the benchmarks and the lab.

* ``SupervisedProcess`` (the service kit's process module, re-exported here):
  the one way child processes are started (a session each, output to a log, readiness by a line or a
  callable) and stopped (polite, then TERM and KILL to the group), used by
  everything below, the lab, the benchmarks and the test fixtures.
* ``BrokerProcess`` (broker_process.py): one ``python -m broker``.
* ``ZooKeeperEnsemble`` (zookeeper.py): one ZooKeeper server or a quorum of
  them, as Java processes, with kill/restart of one member.
* kazoo_faults.py (imported on its own, it needs kazoo): drop a kazoo
  client's connection or expire its session, for coordination tests.
* lying_proxy.py: a proxy before a broker that drops and duplicates produced
  messages while the producers see success (what the audit must catch).
* postgres.py: a real PostgreSQL server for the audit's tests and the lab.

Nothing here is imported by the broker itself.
"""
from broker.harness.broker_process import BrokerProcess, BrokerStartError
from broker.service_kit.process import ProcessStartError, SupervisedProcess
from broker.harness.zookeeper import (
    ZooKeeperEnsemble,
    ZooKeeperError,
    ZooKeeperNotFoundError,
    ZooKeeperServer,
    ZooKeeperStartError,
    find_classpath,
    four_letter_word,
)

__all__ = [
    "BrokerProcess", "BrokerStartError", "SupervisedProcess", "ProcessStartError",
    "ZooKeeperEnsemble", "ZooKeeperServer", "ZooKeeperError", "ZooKeeperNotFoundError",
    "ZooKeeperStartError", "find_classpath", "four_letter_word",
]
