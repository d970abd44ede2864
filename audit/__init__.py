"""The audit: every tier counts what it saw per (topic, time window), and one
service compares the tiers with the producers (see docs/audit.md).

* tally.py: the counting kernel, pure Python (``_tally.c``: its C twin);
* counting.py: a tier's counter and the monitoring events that carry its counts;
* cluster_counter.py: the cluster tier (``python -m audit count``);
* compare.py: a window's verdict against the producers (complete, pending,
  lost, duplicated) and the one rule for an outcome;
* store.py: the audit database, every monitoring event once (migrations/: its
  schema's Alembic revisions);
* credentials.py: the database's credentials file (RDS's master-user secret);
* service.py: the audit service, the audit topic into the database;
* web.py: the service over HTTP (heatmap, window page, JSON API);
* metrics.py: the counter's and the service's Prometheus collectors;
* report.py: verdicts of a period from the database (``python -m audit report``);
* remote.py: the service's HTTP API as its clients use it;
* gate.py: is an hour ready to load? (the warehouse's wait);
* times.py: times as the audit reads and shows them (ms or ISO 8601; UTC);
* config.py: the processes' settings; cli.py, __main__.py: ``python -m audit``.

Uses the client, the schemas and the service kit; never broker.server or broker.storage.
"""
