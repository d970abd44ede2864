"""Coordination through ZooKeeper (kazoo), as in the Kafka paper: no master;
brokers register themselves, consumers of a group agree among themselves.

* paths.py: the node layout;
* zk.py: connecting (connect strings with a chroot, a client that keeps retrying);
* zk_acls.py: ZooKeeper identities (digest) and the ACL each path gets;
* zk_tls.py: TLS to ZooKeeper's secure client port (the settings);
* zk_tls_handler.py: the kazoo handler whose TLS connections share one context
  per client (made again when a file changes), trusting the named authorities;
* bulk_read.py: many nodes read at once (multiRead);
* registry.py: a broker's registration;
* cluster.py: the live view of brokers and partitions;
* ownership.py: a group's membership, rebalance and partition ownership;
* offsets.py: a group's committed offsets;
* named_cluster.py: a cluster named (NAME=ZOOKEEPER), the one type every
  service names a cluster with;
* replica_state.py: replicated topics' records (assignment, partition state)
  and their pure rules (placement across racks, the choice of a leader);
* controller.py: the controller, one broker at a time, electing leaders;
* replica_admin.py: the replicated partitions read for operators;
* reassign.py: operators' requests to the controller (moving replicas,
  electing the preferred leaders) and their progress.
"""
