"""``python -m schemas serve``: the registry behind Confluent's REST API.

One HTTP port serves Confluent's Schema Registry API (schemas/confluent_api.py)
over a Samsa registry (a cluster's ZooKeeper, or a file) and Prometheus
metrics at /metrics. Several such servers may front one registry: the
registry's writes are compare-and-set in its store (registry.py), so no
server is a leader.

The one module of schemas/ that is a service: it uses the service kit
(settings, logging, the HTTP server) as every Samsa service does; the rest
of schemas/ stands alone.

Settings (``[schema_registry]`` of a TOML file, config/schema_registry.toml):

    registry    the store's URL: zookeeper://HOST:PORT[/CHROOT] or file:PATH
    host, port  where to listen (default 127.0.0.1:8081, Confluent's port;
                port 0: any free one, printed at start)

``GET /healthz`` answers "ok" while the process serves (open to probes
where the port asks for users).

Metrics:

    samsa_schema_registry_requests_total{endpoint,status}   answers given
    samsa_schema_registry_subjects                          subjects with a version
    samsa_schema_registry_schemas                           schemas by id
    samsa_schema_registry_store_up                          1 if the store answered the scrape
"""
from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from broker.service_kit import cli
from broker.service_kit.http_security import HttpSecurity
from broker.service_kit.json_http import JSONHTTPServer, Request, Response
from broker.service_kit.metrics_http import serve_metrics
from schemas.confluent_api import CONTENT_TYPE, ConfluentAPI
from schemas.registry import SchemaRegistry
from schemas.stores import StoreError, open_store, zookeeper_tls_options

log = logging.getLogger("schemas.service")

TABLE = "schema_registry"
DEFAULT_PORT = 8081
MAX_BODY = 4 << 20          # a schema's JSON (Confluent's own limit is near this)


@dataclass(frozen=True)
class RegistryServiceConfig:
    registry: str = "zookeeper://127.0.0.1:2181"
    """The registry's store: zookeeper://HOST:PORT[,...][/CHROOT] or file:PATH."""
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    """Confluent's REST API and /metrics; 0 = any free port."""
    store_timeout_s: float = 10.0
    """Seconds to wait for the store (ZooKeeper) at start."""
    zookeeper_auth_file: str = ""
    """The registry's ZooKeeper identity (a file holding user:password): the
    nodes of /schemas are then changeable by it alone (docs/security.md).
    Empty: $SAMSA_SCHEMA_REGISTRY_ZOOKEEPER_AUTH_FILE, else none (open nodes)."""
    zookeeper_tls_ca_file: str = ""
    """The store is reached over TLS (ZooKeeper's TLS port, which the
    registry URL then names) when this or the certificate is set, its
    certificate checked against these authorities (and the system's). All
    three empty: the $SAMSA_ZOOKEEPER_TLS_* variables, else plaintext."""
    zookeeper_tls_cert_file: str = ""
    """A client certificate for ZooKeeper's TLS port, and its key."""
    zookeeper_tls_key_file: str = ""
    log_level: str = "INFO"
    log_format: str = "text"
    http: HttpSecurity = field(default_factory=HttpSecurity)
    """TLS and users of the HTTP port ([http] tls_cert_file, tls_key_file,
    tls_ca_file, tls_client_auth, users_file; docs/security.md)."""

    def zookeeper_tls_options(self) -> dict | None:
        """kazoo's TLS options the settings give (None: the environment's)."""
        return zookeeper_tls_options({
            "SAMSA_ZOOKEEPER_TLS_CA_FILE": self.zookeeper_tls_ca_file,
            "SAMSA_ZOOKEEPER_TLS_CERT_FILE": self.zookeeper_tls_cert_file,
            "SAMSA_ZOOKEEPER_TLS_KEY_FILE": self.zookeeper_tls_key_file}) or None

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be 0 to 65535, not {self.port}")
        if self.store_timeout_s <= 0:
            raise ValueError("store_timeout_s must be > 0")
        if not self.registry:
            raise ValueError("registry must name a store (zookeeper://... or file:PATH)")
        self.zookeeper_tls_options()              # a certificate without its key


class RegistryService:
    """The HTTP server over an open registry; ``start()`` binds and serves."""

    def __init__(self, config: RegistryServiceConfig, registry: SchemaRegistry) -> None:
        self.config = config
        self.registry = registry
        self.api = ConfluentAPI(registry)
        self._http: JSONHTTPServer | None = None

    @property
    def port(self) -> int:
        return self._http.port

    @property
    def scheme(self) -> str:
        return self._http.scheme

    def start(self) -> "RegistryService":
        self._http = serve_metrics(self.config.host, self.config.port, _Collector(self),
                                   answer=self.answer, name="schema-registry",
                                   methods=("GET", "POST", "PUT", "DELETE"), max_body=MAX_BODY,
                                   security=self.config.http)
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()

    def answer(self, request: Request) -> Response:
        if request.path == "/healthz":          # a probe's: served while the process is
            return Response(200, b"ok\n", "text/plain")
        reply = self.api.handle(request.method, request.segments, request.query, request.body)
        return Response(reply.status, json.dumps(reply.body).encode(), CONTENT_TYPE)


class _Collector:
    def __init__(self, service: RegistryService) -> None:
        self.service = service

    def collect(self):
        requests = CounterMetricFamily("samsa_schema_registry_requests",
                                       "Answers of the REST API, by endpoint and HTTP status",
                                       labels=["endpoint", "status"])
        for (endpoint, status), n in sorted(self.service.api.request_counts().items()):
            requests.add_metric([endpoint, str(status)], n)
        yield requests
        up = GaugeMetricFamily("samsa_schema_registry_store_up",
                               "1 if the registry's store answered this scrape, else 0")
        registry = self.service.registry
        try:
            subjects = [s for s in registry.subjects() if registry.versions(s)]
            schemas = len(registry.schema_ids())
        except StoreError as exc:
            log.warning("metrics: the store did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield GaugeMetricFamily("samsa_schema_registry_subjects",
                                "Subjects with at least one version", value=len(subjects))
        yield GaugeMetricFamily("samsa_schema_registry_schemas", "Schemas by id", value=schemas)


def add_serve_parser(sub) -> None:
    """The ``serve`` sub-command of ``python -m schemas``."""
    p = sub.add_parser(
        "serve", help="serve Confluent's Schema Registry REST API over this registry",
        description="Serve Confluent's Schema Registry REST API (subjects <topic>-value) and "
                    "Prometheus metrics (/metrics) over the registry (--registry, else the "
                    "settings' registry). Stops on SIGTERM/SIGINT. docs/schemas.md says "
                    "which endpoints and how subjects map.",
        epilog="Exit status: 0 stopped by a signal; 2 bad settings; 3 the store is "
               "unreachable; 4 the port is taken.")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help=f"port (default {DEFAULT_PORT}; 0 = any free)")
    cli.add_settings_options(p, config_help="TOML settings file (its [schema_registry] table; "
                                            "config/schema_registry.toml)",
                             set_example="--set port=8081")


def serve(args, registry_url: str | None, env_var: str) -> int:
    """``python -m schemas [--registry URL] serve ...``: the store is
    --registry, else the settings' ``registry`` (file, --set), else
    ``$SAMSA_SCHEMA_REGISTRY``, else a local ZooKeeper's root."""
    def registry_named(args) -> dict:
        if registry_url:
            return {"registry": registry_url}
        given = cli.settings_values(args, TABLE)
        if "registry" not in given and os.environ.get(env_var):
            return {"registry": os.environ[env_var]}
        return {}
    return cli.run_service(RegistryServiceConfig, args, run, table=TABLE,
                           flags=("host", "port"), overrides=registry_named)


def run(config: RegistryServiceConfig) -> int:
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    try:
        registry = SchemaRegistry(open_store(config.registry, config.store_timeout_s,
                                             long_lived=True,
                                             zookeeper_auth_file=config.zookeeper_auth_file
                                             or None,
                                             zookeeper_tls=config.zookeeper_tls_options()))
    except (StoreError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 3 if isinstance(exc, StoreError) else 2
    stop = cli.stop_on_signals()
    try:
        try:
            service = RegistryService(config, registry).start()
        except ValueError as exc:           # [http]'s files
            print(f"error: {exc}", file=sys.stderr, flush=True)
            registry.close()
            return 2
        except OSError as exc:
            print(f"error: cannot listen on {config.host}:{config.port}: {exc}",
                  file=sys.stderr, flush=True)
            return 4
        log.info("schema registry (Confluent's REST API) on %s://%s:%d/ over %s",
                 service.scheme, config.host, service.port, config.registry)
        print(f"schema registry on {service.scheme}://{config.host}:{service.port}/", flush=True)
        stop.wait()
        service.stop()
        return 0
    finally:
        registry.close()
