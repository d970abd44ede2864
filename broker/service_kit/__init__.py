"""The kit every Samsa service is built from; none of it is the broker.

The broker, the mirror, the audit, the loader, the lag service, the schema
tools and the local lab (infra/) share these, and they import nothing of
any of them:

* settings.py: frozen dataclasses read from a TOML table, overridden from the
  command line (``--set key=value``), checked when built.
* cli.py: the command line every service shares (--config, --set,
  --print-config, --log-level, --log-format; bad settings exit 2).
* logging_setup.py: text or JSON lines, one set-up for every process.
* process.py: the one way a child process is started, awaited and stopped;
* detached.py: a process that outlives the command that started it: its
  record in a JSON state file, known again by pid and start time, stopped
  (TERM to its group, then KILL) by a later command;
* version.py: Samsa's version for every ``--version`` (the installed
  package's, else the checkout's pyproject.toml);
* ports.py: the one port allocator (free ports outside the ephemeral range).
* json_http.py: the one small HTTP server of JSON (and page) answers.
* metrics_http.py: the one way metrics are served: collectors in a
  prometheus_client registry, at /metrics beside a service's answers.
* http_security.py: who may ask that server, over what: HTTPS, users with
  read and admin roles from a users file (``[http]`` of each service).
"""
