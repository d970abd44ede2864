"""The audit service's HTTP API, as its clients (the warehouse DAGs) use it:
the verdicts of a period, and the report of a period (its page and JSON).
A secured service (HTTPS, users: docs/security.md) is asked with
``HttpCredentials``: the authority its certificate is checked against, and a
user (HTTP Basic) whose password is read from a file."""
from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from audit.compare import LOSING
from broker.security.password_file import read_password_file
from schemas.stores import NoRedirects


class AuditUnavailable(RuntimeError):
    """The audit service could not be asked (down, refused, a bad answer)."""


@dataclass(frozen=True)
class HttpCredentials:
    """``ca_file``: the authority of an HTTPS service's certificate (empty:
    the system's); ``username`` and ``password_file``: the user it asks as
    (none: no Authorization header)."""
    ca_file: str = ""
    username: str = ""
    password_file: str = ""

    def __post_init__(self) -> None:
        if bool(self.username) != bool(self.password_file):
            raise ValueError("the audit's username and password file go together")

    def headers(self) -> dict[str, str]:
        if not self.username:
            return {}
        password = read_password_file(self.password_file, "the HTTP password file")
        token = base64.b64encode(f"{self.username}:{password}".encode()).decode()
        return {"Authorization": f"Basic {token}"}

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file or None)


def _get(audit_url: str, path: str, query: dict, timeout_s: float,
         credentials: HttpCredentials | None = None) -> bytes:
    url = f"{audit_url.rstrip('/')}{path}?{urllib.parse.urlencode(query)}"
    credentials = credentials or HttpCredentials()
    if credentials.username and not url.startswith("https:"):
        # a password is not sent in clear: a secured audit serves HTTPS alone
        raise AuditUnavailable(f"audit service {audit_url}: not asked as {credentials.username} "
                               f"over plain HTTP (its password would cross in clear): "
                               f"give its https:// URL")
    try:
        request = urllib.request.Request(url, headers=credentials.headers())
        handlers = [NoRedirects()]
        if url.startswith("https:"):
            handlers.append(urllib.request.HTTPSHandler(context=credentials.context()))
        with urllib.request.build_opener(*handlers).open(request, timeout=timeout_s) \
                as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise AuditUnavailable(f"audit service {audit_url}{path}: HTTP {exc.code} "
                               f"{exc.read()[:300].decode(errors='replace')}") from None
    except OSError as exc:
        raise AuditUnavailable(f"audit service {audit_url} cannot be asked: {exc}") from None


def fetch_verdicts(audit_url: str, begin_ms: int, end_ms: int, timeout_s: float = 30.0,
                   credentials: HttpCredentials | None = None) -> dict:
    """``GET /api/verdicts`` for the windows beginning in [begin_ms, end_ms):
    ``{"verdicts": [...], "summary": {...}, "now_ms": ..., "grace_ms": ...}``."""
    body = _get(audit_url, "/api/verdicts", {"from": begin_ms, "to": end_ms}, timeout_s,
                credentials)
    try:
        answer = json.loads(body)
        answer["verdicts"], answer["now_ms"], answer["grace_ms"]      # noqa: B018 - checked
    except (ValueError, KeyError, TypeError):
        raise AuditUnavailable(f"audit service {audit_url}: not an answer of /api/verdicts: "
                               f"{body[:200]!r}") from None
    return answer


@dataclass
class Report:
    """A period's report: the heatmap page (HTML) and every verdict (JSON)."""
    html: bytes
    answer: dict

    @property
    def summary(self) -> dict[str, int]:
        return self.answer["summary"]

    @property
    def losses(self) -> list[dict]:
        """The verdicts in a loss state (the one rule, audit/compare.py)."""
        return [v for v in self.answer["verdicts"] if v["state"] in LOSING]

    def json_bytes(self) -> bytes:
        return json.dumps(self.answer, indent=1).encode()

    def lines(self) -> list[str]:
        from audit.times import iso
        out = ["summary: " + (", ".join(f"{n} {s}" for s, n in self.summary.items() if n)
                              or "no windows")]
        for v in self.losses:
            out.append(f"  LOSS {v['topic']} window {iso(v['window_begin_ms'])} tier "
                       f"{v['tier']} {v['datacenter']}/{v['cluster']}: {v['state']}, produced "
                       f"{v['produced']:,}, counted {v['count']:,}, missing {v['missing']:,}")
        return out


def fetch_report(audit_url: str, begin_ms: int, end_ms: int, timeout_s: float = 60.0,
                 credentials: HttpCredentials | None = None) -> Report:
    """The period's report from the audit service."""
    answer = fetch_verdicts(audit_url, begin_ms, end_ms, timeout_s, credentials)
    page = _get(audit_url, "/", {"from": begin_ms, "to": end_ms}, timeout_s, credentials)
    return Report(page, answer)
