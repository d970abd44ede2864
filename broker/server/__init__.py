"""The broker process.

* server.py: the Samsa protocol on one asyncio event loop: the listener, the
  connections, the dispatch of requests, the life cycle;
* produce.py: the produce path (append, flush policy, acks);
* fetch.py: the fetch long-poll (the parked fetches and their waking);
* connection.py: one client connection (framing in, ordered replies, sendfile);
* authentication.py: the SASL/SCRAM exchange before a connection's other requests;
* authorization.py: the permissions each request needs, checked against the ACLs;
* flusher.py: the thread that fsyncs logs (group commit);
* memory_pool.py: the broker-wide budget of request bytes being read;
* memory_trim.py: giving freed memory back to the system after a burst;
* metrics.py: the broker's counters and their Prometheus collector;
* replica_manager.py: the broker's replicas of replicated partitions (leader
  or follower, in-sync set, high watermark, the answers to followers);
* replica_fetcher.py: a follower's fetching from one leader broker, and
  truncation by leader epoch.
"""
