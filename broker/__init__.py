"""Samsa's broker and everything built on its protocol.

* protocol/: the wire codec (messages, framing, requests), sans-IO;
* storage/: partition logs on disk (segments, the log manager, drop-behind);
* server/: the broker process (asyncio server, flusher, metrics);
* client/: producer, consumers, admin (the codec, never the server);
* security/: access control entries and their decisions (pure; docs/security.md);
* coordination/: ZooKeeper (registration, cluster view, groups, offsets) and
  the one named-cluster type (named_cluster.py);
* lag/: consumer lag judged as Burrow does, and the lag service
  (``python -m broker.lag``);
* tools/: the console tools (``python -m broker.tools``);
* service_kit/: settings, command line, logging, processes, HTTP and metrics
  every service shares;
* harness/: real processes (brokers, ZooKeeper, PostgreSQL) for tests, demo and lab;
* config.py: the broker's settings; __main__.py: ``python -m broker``;
  demo.py: ``make demo-broker``;
* commands.py: ``samsa``, the installed command that runs each entry point
  (``samsa broker``, ``samsa produce``, ``samsa audit`` ...).
"""
