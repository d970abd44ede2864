"""Reading a process's Prometheus ``/metrics`` (the brokers', the mirrors'):
the lab's readiness check of a mirror and its status. In a secured lab
those ports serve HTTPS to the lab's HTTP users only: ``HttpAccess`` says
how to ask (the lab's authority, a user and its password file)."""
from __future__ import annotations

import base64
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset], float]


@dataclass(frozen=True)
class HttpAccess:
    """How to ask a secured lab's HTTP ports: HTTPS checked against
    ``ca_file``, as ``username`` (HTTP Basic) with the password in
    ``password_file``."""
    ca_file: str
    username: str
    password_file: str

    scheme = "https"

    def headers(self) -> dict[str, str]:
        with open(self.password_file, encoding="utf-8") as f:
            password = f.readline().strip()
        token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)


def open_url(url: str, access: HttpAccess | None = None, timeout: float = 2.0):
    """urlopen of ``url``, as ``access`` says where it is given."""
    if access is None:
        return urllib.request.urlopen(url, timeout=timeout)
    request = urllib.request.Request(url, headers=access.headers())
    return urllib.request.urlopen(request, timeout=timeout, context=access.context())


def scheme(access: HttpAccess | None) -> str:
    """"https" when the ports are secured (``access`` given), else "http"."""
    return "http" if access is None else access.scheme


def scrape(host: str, port: int, timeout: float = 2.0,
           access: HttpAccess | None = None) -> Samples | None:
    """/metrics as {(sample, labels): value}; None when it does not answer,
    {} when what it answers is no metrics text."""
    try:
        with open_url(f"{scheme(access)}://{host}:{port}/metrics", access, timeout) as resp:
            text = resp.read().decode(errors="replace")
    except (OSError, urllib.error.URLError, ValueError):
        return None
    try:
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}
    except ValueError:
        return {}
