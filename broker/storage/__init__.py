"""Partition logs on disk; imports nothing of the server or the clients.

* segment.py: one segment file;
* log.py: a partition log, its segments addressed by byte offset;
* leader_epochs.py: a partition's leader epochs (KIP-101), for replica truncation;
* log_manager.py: every topic and partition log of a data directory;
* log_config.py: per-log settings with Kafka's names;
* page_cache.py: drop-behind, the page cache the broker's writes fill, bounded;
* files.py: atomic JSON writes and directory fsyncs;
* errors.py: the storage's errors.
"""
