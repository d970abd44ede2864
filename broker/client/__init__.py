"""The clients: they import the codec (broker.protocol), never the server or
the storage.

* connection.py: a blocking, pipelined connection to one broker;
* authentication.py: the client's side of SASL/SCRAM-SHA-512 on a connection;
* producer.py: batching, asynchronous producer of one broker;
* record_accumulator.py: the producer's batches per partition and the rule
  for when one is ready to send;
* partitioner.py: which partition a message goes to (a key's hash, else
  sticky per batch, round-robin);
* partition_counts.py: the topics' partition counts, learnt from the broker;
* cluster_producer.py: a producer of a whole cluster found through ZooKeeper;
* consumer.py: a pull consumer of named partitions;
* group_consumer.py: a consumer in a group (ZooKeeper rebalance, committed offsets);
* admin.py: topic administration and offset look-ups;
* backoff.py: exponential back-off with jitter;
* errors.py: errors about the data read (corrupt data, an invalid offset).

Consumer lag, judged from outside a group, is broker/lag/.
"""
