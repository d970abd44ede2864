"""The lag service (``python -m broker.lag``): every consumer group of one or
more clusters evaluated by Burrow's rules, over HTTP (JSON shaped like
Burrow's) and as Prometheus gauges. See docs/lag.md.

* service.py: the evaluation loop and its HTTP answers;
* config.py: its settings; __main__.py: ``python -m broker.lag``.
"""
