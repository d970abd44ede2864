"""The audit service over HTTP: reports for people, answers for machines.

  GET /                      completeness heatmap: topic x window, one panel per
                             tier, a cell's colour its worst state; ?topic=
                             ?from=&to= (ISO times or ms), ?hours=
  GET /window?topic=&begin=  one window: every tier, datacenter and cluster,
                             counts, missing, duplicated, latency
  GET /api/verdicts          the same as JSON (?topic= ?from= ?to= ?tier=)
  GET /api/completeness?topic=T&window=W|hour=H[&tier=X]
                             {"complete": bool, ...}: is T complete for that
                             window (start in ms or ISO) or hour (every window
                             of it) at tier X (default: every tier)? What the
                             warehouse loader waits on.
  GET /metrics               Prometheus text: events read, stored, duplicates,
                             malformed; windows per state over the default period
  GET /healthz               "ok"

The pages are self-contained (inline CSS, no script, no external resource):
these machines have no internet, and neither may the people who read them.
"""
from __future__ import annotations

import html
import time
from http import HTTPStatus
from urllib.parse import quote

from broker.service_kit.json_http import BadRequest, JSONHTTPServer, Request, Response, \
    json_response
from broker.service_kit.http_security import HttpSecurity
from broker.service_kit.metrics_http import serve_metrics

from audit.compare import LOST, READY, STATES, Verdict, outcome, summary
from audit import times
from audit.counting import TIERS
from audit.times import iso
from audit.metrics import ServiceMetrics

COLOURS = {"complete": "#2e9e5b", "pending": "#c9a227", "lost": "#c8323c",
           "duplicated": "#7a4fc2", "lost_and_duplicated": "#8b1a1a", "no_reference": "#8a8f98"}
WORST_FIRST = ("lost_and_duplicated", "lost", "duplicated", "pending", "no_reference", "complete")
TIER_ORDER = TIERS


def parse_time(text: str) -> int:
    """audit/times.parse_time, a bad time answered 400."""
    try:
        return times.parse_time(text)
    except times.BadTime as exc:
        raise BadRequest(str(exc)) from None


def worst(states) -> str:
    states = set(states)
    return next(s for s in WORST_FIRST if s in states) if states else "complete"


def period(query: dict, default_hours: int, now_ms: int) -> tuple[int, int]:
    end = parse_time(query["to"]) if "to" in query else now_ms
    if "from" in query:
        begin = parse_time(query["from"])
    else:
        try:
            hours = float(query.get("hours", default_hours))
        except ValueError:
            raise BadRequest("hours must be a number") from None
        begin = end - int(hours * 3_600_000)
    if begin >= end:
        raise BadRequest("from must be before to")
    return begin, end


# ------------------------------------------------------------------ pages

_STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#fafbfc}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
.sub{color:#5b6270;margin-bottom:1em}table{border-collapse:collapse;font-size:.85em}
th,td{padding:.25em .5em;text-align:right;border-bottom:1px solid #e3e6eb}
th{background:#eef1f5;position:sticky;top:0}td.name,th.name{text-align:left}
.heat td{padding:0;border:1px solid #fff;min-width:3em}.heat a{display:block;height:1.5em}
.legend span{display:inline-block;padding:.15em .6em;margin-right:.4em;color:#fff;border-radius:3px}
.state{color:#fff;border-radius:3px;padding:.1em .4em}.tot{font-weight:600}
"""


def _page(title: str, body: str) -> bytes:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{html.escape(title)}"
            f"</title><style>{_STYLE}</style></head><body>{body}</body></html>").encode()


def _legend() -> str:
    return "<p class=legend>" + "".join(
        f"<span style='background:{COLOURS[s]}'>{s.replace('_', ' ')}</span>" for s in STATES) \
        + "</p>"


def heatmap_page(verdicts: list[Verdict], begin: int, end: int, topic: str | None) -> bytes:
    states = summary(verdicts)
    head = (f"<h1>Samsa audit: completeness</h1><div class=sub>{iso(begin)} to {iso(end)} UTC"
            f"{' &middot; topic ' + html.escape(topic) if topic else ''} &middot; "
            + ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in states.items() if n)
            + "</div>" + _legend())
    if not verdicts:
        return _page("Samsa audit", head + "<p>No monitoring events in this period.</p>")
    windows = sorted({v.window_begin_ms for v in verdicts})
    topics = sorted({v.topic for v in verdicts})
    tiers = sorted({v.tier for v in verdicts},
                   key=lambda t: TIER_ORDER.index(t) if t in TIER_ORDER else 99)
    cells: dict[tuple[str, str, int], list[Verdict]] = {}
    for v in verdicts:
        cells.setdefault((v.tier, v.topic, v.window_begin_ms), []).append(v)
    body = [head]
    for tier in tiers:
        body.append(f"<h2>tier: {html.escape(tier)}</h2><table class=heat><tr><th class=name>"
                    "topic</th>" + "".join(f"<th title='{iso(w)}'>{iso(w)[11:]}</th>"
                                            for w in windows) + "</tr>")
        for t in topics:
            row = [f"<tr><td class=name>{html.escape(t)}</td>"]
            for w in windows:
                vs = cells.get((tier, t, w))
                if not vs:
                    row.append("<td></td>")
                    continue
                state = worst(v.state for v in vs)
                tip = "; ".join(f"{v.cluster}@{v.datacenter}: {v.state} {v.count}/{v.produced}"
                                for v in vs)
                row.append(f"<td><a href='/window?topic={quote(t)}&begin={w}' "
                           f"style='background:{COLOURS[state]}' "
                           f"title='{html.escape(iso(w) + ' ' + tip)}' "
                           f"aria-label='{state}'></a></td>")
            body.append("".join(row) + "</tr>")
        body.append("</table>")
    return _page("Samsa audit", "".join(body))


def window_page(verdicts: list[Verdict], topic: str, begin: int) -> bytes:
    title = f"{topic}, window {iso(begin)} UTC"
    rows = [f"<h1>{html.escape(title)}</h1><div class=sub><a href='/?topic={quote(topic)}'>"
            "back to the heatmap</a></div>", _legend()]
    if not verdicts:
        return _page(title, "".join(rows) + "<p>No monitoring events for this window.</p>")
    cols = ("tier", "datacenter", "cluster", "state", "produced", "count", "unique", "missing",
            "duplicated", "completeness %", "no time", "malformed", "bytes",
            "latency p50 ms", "p95", "p99")
    rows.append("<table><tr>" + "".join(f"<th{' class=name' if i < 4 else ''}>{c}</th>"
                                         for i, c in enumerate(cols)) + "</tr>")
    for v in sorted(verdicts, key=lambda v: (TIER_ORDER.index(v.tier)
                                             if v.tier in TIER_ORDER else 99, v.cluster)):
        approx = "" if v.exact else "&ge;"
        rows.append(
            f"<tr><td class=name>{html.escape(v.tier)}</td><td class=name>"
            f"{html.escape(v.datacenter)}</td><td class=name>{html.escape(v.cluster)}</td>"
            f"<td class=name><span class=state style='background:{COLOURS[v.state]}'>"
            f"{v.state.replace('_', ' ')}</span></td><td>{v.produced:,}</td><td>{v.count:,}</td>"
            f"<td>{'' if v.unique is None else f'{v.unique:,}'}</td>"
            f"<td>{approx if v.missing else ''}{v.missing:,}</td>"
            f"<td>{approx if v.duplicated else ''}{v.duplicated:,}</td>"
            f"<td>{v.completeness:.2f}</td><td>{v.no_time:,}</td><td>{v.malformed:,}</td>"
            f"<td>{v.bytes:,}</td><td>{_ms(v.latency_p50_ms)}</td><td>{_ms(v.latency_p95_ms)}"
            f"</td><td>{_ms(v.latency_p99_ms)}</td></tr>")
    rows.append("</table><p class=sub>&ge;: a lower bound (the tier did not keep ids). "
                "Latency: from event time to the tier, upper bound of the histogram bucket.</p>")
    return _page(title, "".join(rows))


def _ms(value: int) -> str:
    return "" if value < 0 else f"{value:,}"


# ------------------------------------------------------------------ HTTP

HTML = "text/html; charset=utf-8"


def answer(service, request: Request) -> Response:
    """The answer to a GET of every path but /metrics."""
    query = request.query
    now = int(time.time() * 1000)
    if request.path == "/healthz":
        return Response(200, b"ok\n", "text/plain")
    if request.path == "/":
        begin, end = period(query, service.config.default_hours, now)
        topic = query.get("topic") or None
        return Response(200, heatmap_page(service.verdicts(topic, begin, end), begin, end,
                                          topic), HTML)
    if request.path == "/window":
        topic, begin = _required(query, "topic"), parse_time(_required(query, "begin"))
        return Response(200, window_page(service.verdicts(topic, begin, begin + 1), topic,
                                         begin), HTML)
    if request.path == "/api/verdicts":
        begin, end = period(query, service.config.default_hours, now)
        verdicts = service.verdicts(query.get("topic") or None, begin, end,
                                    query.get("tier") or None, now_ms=now)
        return json_response({"from_ms": begin, "to_ms": end, "now_ms": now,
                              "grace_ms": service.config.grace_ms, "summary": summary(verdicts),
                              "verdicts": [v.to_json() for v in verdicts]})
    if request.path == "/api/completeness":
        return json_response(completeness(service, query))
    return json_response({"error": f"no such page: {request.path}"}, HTTPStatus.NOT_FOUND)


def _required(query: dict, name: str) -> str:
    if not query.get(name):
        raise BadRequest(f"missing parameter {name!r}")
    return query[name]


def completeness(service, query: dict) -> dict:
    topic = _required(query, "topic")
    tier = query.get("tier") or None
    if "window" in query:
        begin = parse_time(query["window"])
        end = begin + 1
    elif "hour" in query:
        begin = parse_time(query["hour"])
        if begin % 3_600_000:
            raise BadRequest("hour must be the start of an hour")
        end = begin + 3_600_000
    else:
        raise BadRequest("give window=<window start> or hour=<hour start>")
    verdicts = service.verdicts(topic, begin, end, tier)
    result = outcome(v.state for v in verdicts)         # the one rule (audit/compare.py)
    return {"topic": topic, "tier": tier, "from_ms": begin, "to_ms": end,
            "complete": result == READY, "outcome": result,
            "windows": len({v.window_begin_ms for v in verdicts}),
            "summary": summary(verdicts), "lost": result == LOST,
            "verdicts": [v.to_json() for v in verdicts]}


def start_http(service, host: str, port: int,
               security: HttpSecurity | None = None) -> JSONHTTPServer:
    """The pages, the API and /metrics served on ``host:port`` from a daemon
    thread (with ``security``: TLS, users); ``stop()`` ends it."""
    return serve_metrics(host, port, ServiceMetrics(service),
                         answer=lambda request: answer(service, request), name="audit",
                         security=security)
