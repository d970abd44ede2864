"""Asking the lab's HTTP ports: a process's Prometheus ``/metrics`` (the
brokers', the mirrors': the lab's readiness check of a mirror and its
status), and any GET of a secured lab's services. In a secured lab those
ports serve HTTPS to the lab's HTTP users only: ``HttpAccess`` says how to
ask (the lab's authority, a user and its password file)."""
from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from audit.remote import HttpCredentials
from schemas.stores import NoRedirects

Samples = dict[tuple[str, frozenset], float]


class HttpAccess(HttpCredentials):
    """How to ask a secured lab's HTTP ports: HTTPS checked against
    ``ca_file``, as ``username`` (HTTP Basic) with the password in
    ``password_file`` (an audit.remote.HttpCredentials: the audit's client
    takes it as it is)."""

    scheme = "https"


def open_url(url: str, access: HttpAccess | None = None, timeout: float = 2.0):
    """urlopen of ``url``, as ``access`` says where it is given (a redirect
    is then an error: the Authorization header would follow it). ValueError
    naming the file when the password file cannot be read."""
    return _opener(url, access)(timeout)


def _opener(url: str, access: HttpAccess | None):
    """A function of the timeout that opens ``url`` as ``access`` says; the
    password file read here (ValueError naming it), before any request."""
    if access is None:
        return lambda timeout: urllib.request.urlopen(url, timeout=timeout)
    request = urllib.request.Request(url, headers=access.headers())
    opener = urllib.request.build_opener(NoRedirects(),
                                         urllib.request.HTTPSHandler(context=access.context()))
    return lambda timeout: opener.open(request, timeout=timeout)


def scheme(access: HttpAccess | None) -> str:
    """"https" when the ports are secured (``access`` given), else "http"."""
    return "http" if access is None else access.scheme


def scrape(host: str, port: int, timeout: float = 2.0,
           access: HttpAccess | None = None) -> Samples | None:
    """/metrics as {(sample, labels): value}; None when it does not answer,
    {} when what it answers is no metrics text; ValueError naming the file
    when ``access``'s password file cannot be read."""
    open_metrics = _opener(f"{scheme(access)}://{host}:{port}/metrics", access)
    try:
        with open_metrics(timeout) as resp:
            text = resp.read().decode(errors="replace")
    except (OSError, urllib.error.URLError, ValueError):
        return None
    try:
        return {(s.name, frozenset(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}
    except ValueError:
        return {}
