"""Coordination through ZooKeeper (kazoo), as in the Kafka paper: no master;
brokers register themselves, consumers of a group agree among themselves.

One module per concept: ``paths`` (the node layout), ``zk`` (connecting),
``registry`` (a broker's registration), ``cluster`` (the live view of
brokers and partitions), ``ownership`` (a group's membership, rebalance and
partition ownership), ``offsets`` (a group's committed offsets).
"""
