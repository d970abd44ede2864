"""The mirror (``python -m mirror``): topics of source clusters copied into a
target cluster, nothing lost (see docs/mirror.md).

* mirror.py: the process: a pipe per source, the lag probe, the metrics endpoint;
* pipe.py: one source cluster copied into the target;
* target.py: the target cluster as the mirror writes to it;
* marks.py: marks of mirrored topics (no loops);
* metrics.py: the mirror's numbers and their Prometheus collector;
* config.py: its settings; __main__.py: ``python -m mirror``.

Uses the client and the service kit; never broker.server or broker.storage.
"""
