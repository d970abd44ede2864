"""The one way a Samsa service exposes Prometheus metrics: its collectors in a
prometheus_client registry, served over HTTP by the kit's JSON server
(json_http.py), with the service's own JSON routes beside /metrics when it
has them.

Collectors are objects with ``collect()`` yielding metric families
(prometheus_client.core.*MetricFamily), read when Prometheus scrapes: the
services keep plain numbers on their hot paths and turn them into families
only then. The exposition is prometheus_client's: the format chosen from the
Accept header (text 0.0.4 or OpenMetrics), gzip when accepted, ``name[]=``
to restrict it to some series.

Without ``answer`` every path but /healthz serves the metrics (as
prometheus_client's own server does); with it, only /metrics does and the
rest goes to ``answer``. ``GET /healthz`` without ``answer`` says "ok" and
nothing else (it is open to probes where users are asked for).
"""
from __future__ import annotations

import gzip
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from .http_security import HttpSecurity
from .json_http import Answer, JSONHTTPServer, Request, Response


def metrics_registry(*collectors) -> CollectorRegistry:
    """A registry of ``collectors`` (read at scrape time, never described
    ahead: describing would collect once at registration)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry, request: Request) -> Response:
    """The registry's samples as the request asks for them."""
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    names = parse_qs(request.query_string).get("name[]")
    body = encoder(_Only(registry, set(names)) if names else registry)
    if "gzip" in [e.split(";")[0].strip()
                  for e in (request.headers.get("Accept-Encoding") or "").split(",")]:
        return Response(200, gzip.compress(body), content_type, (("Content-Encoding", "gzip"),))
    return Response(200, body, content_type)


class _Only:
    """The samples of ``registry`` named in ``names`` (``name[]=``)."""

    def __init__(self, registry: CollectorRegistry, names: set[str]) -> None:
        self.registry = registry
        self.names = names

    def collect(self):
        for family in self.registry.collect():
            samples = [s for s in family.samples if s.name in self.names]
            if samples:
                only = Metric(family.name, family.documentation, family.type, family.unit)
                only.samples = samples
                yield only


def serve_metrics(host: str, port: int, *collectors, answer: Answer | None = None,
                  name: str = "metrics", methods: tuple[str, ...] = ("GET",),
                  max_body: int = 1 << 20,
                  security: HttpSecurity | None = None) -> JSONHTTPServer:
    """Serve ``collectors`` at /metrics on ``host:port`` (port 0: any free
    one; the server's ``port`` says which), and ``answer`` on every other
    path (and for ``methods`` beyond GET), from a daemon thread; ``stop()``
    ends it. With ``security`` (TLS, users: http_security.py) the metrics
    include samsa_http_authentications_total."""
    registry = metrics_registry(*collectors)

    def route(request: Request) -> Response:
        if answer is None and request.path == "/healthz":
            return Response(200, b"ok\n", "text/plain")
        if answer is None or (request.segments == ["metrics"] and request.method == "GET"):
            return exposition(registry, request)
        return answer(request)

    server = JSONHTTPServer(host, port, route, name, methods, max_body, security)
    if security is not None and security != HttpSecurity():
        registry.register(server.gate)
    return server.start()
