"""The audit service's HTTP API, as its clients (the warehouse DAGs) use it:
the verdicts of a period, and the report of a period (its page and JSON)."""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from audit.compare import LOSING


class AuditUnavailable(RuntimeError):
    """The audit service could not be asked (down, refused, a bad answer)."""


def _get(audit_url: str, path: str, query: dict, timeout_s: float) -> bytes:
    url = f"{audit_url.rstrip('/')}{path}?{urllib.parse.urlencode(query)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise AuditUnavailable(f"audit service {audit_url}{path}: HTTP {exc.code} "
                               f"{exc.read()[:300].decode(errors='replace')}") from None
    except OSError as exc:
        raise AuditUnavailable(f"audit service {audit_url} cannot be asked: {exc}") from None


def fetch_verdicts(audit_url: str, begin_ms: int, end_ms: int,
                   timeout_s: float = 30.0) -> dict:
    """``GET /api/verdicts`` for the windows beginning in [begin_ms, end_ms):
    ``{"verdicts": [...], "summary": {...}, "now_ms": ..., "grace_ms": ...}``."""
    body = _get(audit_url, "/api/verdicts", {"from": begin_ms, "to": end_ms}, timeout_s)
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


def fetch_report(audit_url: str, begin_ms: int, end_ms: int, timeout_s: float = 60.0) -> Report:
    """The period's report from the audit service."""
    answer = fetch_verdicts(audit_url, begin_ms, end_ms, timeout_s)
    page = _get(audit_url, "/", {"from": begin_ms, "to": end_ms}, timeout_s)
    return Report(page, answer)
