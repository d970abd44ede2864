"""The audit service's HTTP API, as its clients (the warehouse DAGs) use it:
the verdicts of a period, and the report of a period kept as files."""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

LOSS_STATES = ("lost", "lost_and_duplicated")


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
class SavedReport:
    html_path: str
    json_path: str
    summary: dict[str, int]
    losses: list[dict]             # the verdicts in a loss state

    def lines(self) -> list[str]:
        from audit.web import iso
        out = [f"report: {self.html_path} and {self.json_path}",
               "summary: " + ", ".join(f"{n} {s}" for s, n in self.summary.items() if n)]
        for v in self.losses:
            out.append(f"  LOSS {v['topic']} window {iso(v['window_begin_ms'])} tier "
                       f"{v['tier']} {v['datacenter']}/{v['cluster']}: {v['state']}, produced "
                       f"{v['produced']:,}, counted {v['count']:,}, missing {v['missing']:,}")
        return out


def save_report(audit_url: str, begin_ms: int, end_ms: int, directory: str,
                timeout_s: float = 60.0) -> SavedReport:
    """The period's report from the audit service, kept as ``report.html``
    (the heatmap page) and ``report.json`` (every verdict) in ``directory``
    (written under temporary names and renamed: a reader never sees half)."""
    answer = fetch_verdicts(audit_url, begin_ms, end_ms, timeout_s)
    page = _get(audit_url, "/", {"from": begin_ms, "to": end_ms}, timeout_s)
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, data in (("report.html", page),
                       ("report.json", json.dumps(answer, indent=1).encode())):
        path = os.path.join(directory, name)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        paths.append(path)
    losses = [v for v in answer["verdicts"] if v["state"] in LOSS_STATES]
    return SavedReport(paths[0], paths[1], answer["summary"], losses)
