"""Consumer lag, judged from outside the group, as Burrow does (docs/lag.md).

* evaluator.py: Burrow's rules, a pure function of a partition's window of
  commits and its current lag (OK, WARN, STALL, STOP, REWIND).
* monitor.py: the collection: every group's commits from ZooKeeper and the
  partitions' ends from the brokers, one cycle at a time; the evaluator
  judges what it keeps. Used by the lag service, the mirror's metrics and
  ``python -m broker.tools groups --status``.
* group_lag.py: bytes behind per partition, for the groups tool and the
  lab's status.
* burrow.py: Burrow's v3 JSON made from an evaluation (the lag service's
  answers, ``groups --status --json``).
* service.py, config.py, __main__.py: the lag service
  (``python -m broker.lag``): Burrow's JSON and Prometheus gauges.
"""
