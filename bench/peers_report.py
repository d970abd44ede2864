"""Summaries, ratios, the RESULTS.md section and the plots of the peer
benchmark (``bench/peers.py``). Pure functions of the result dictionary,
except ``write_section`` and ``plot`` which write files; never runs a broker.
"""
from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))

from bench import common  # noqa: E402
from bench.common import MESSAGE_BYTES, summarize  # noqa: E402

SYSTEMS = ("samsa", "rabbitmq", "activemq")
PEERS = ("rabbitmq", "activemq")
TESTS = ("produce_batch1", "produce_batch50", "consume")
LABELS = {"samsa": "Samsa", "rabbitmq": "RabbitMQ", "activemq": "ActiveMQ"}
COLORS = {"samsa": "#1f77b4", "rabbitmq": "#ff7f0e", "activemq": "#2ca02c"}
TEST_LABELS = {"produce_batch1": "Produce, batch 1", "produce_batch50": "Produce, batch 50",
               "consume": "Consume"}
# Samsa's median / the best peer's median must reach these (issue 3)
TARGETS = {"produce_batch50": 60.0, "produce_batch1": 9.0, "consume": 60.0}
MARK_START = "<!-- peers-bench:start -->"
MARK_END = "<!-- peers-bench:end -->"
FIELDS = ("msgs_per_s", "mb_per_s", "elapsed_s", "broker_cpu_s", "broker_cpu_us_per_msg",
          "disk_bytes_per_msg", "n")


# ====================================================================== numbers

def ok_runs(runs: list[dict]) -> list[dict]:
    return [r for r in runs if "error" not in r and r.get("msgs_per_s")]


def summary_of(raw: dict) -> dict:
    """raw[system][test] = [run, ...] -> summary[system][test][field] =
    {median, min, max, runs} over the runs without an error."""
    out: dict = {}
    for system, tests in raw.items():
        out[system] = {}
        for test, runs in tests.items():
            good = ok_runs(runs)
            s = {f: summarize([r[f] for r in good if r.get(f) is not None]) for f in FIELDS}
            s["failed_runs"] = len(runs) - len(good)
            out[system][test] = s
    return out


def median_of(summary: dict, system: str, test: str, field: str = "msgs_per_s"):
    return summary.get(system, {}).get(test, {}).get(field, {}).get("median")


def best_peer(summary: dict, test: str) -> tuple[str | None, str | None, float | None]:
    """(peer, its test, median msg/s) of the fastest peer for ``test``. For
    batch 50 a peer's best produce figure counts (the peers cannot batch: their
    "batch 50" is a transaction per 50, which may be slower than batch 1)."""
    candidates = ("produce_batch50", "produce_batch1") if test == "produce_batch50" else (test,)
    best = (None, None, None)
    for peer in PEERS:
        for t in candidates:
            v = median_of(summary, peer, t)
            if v is not None and (best[2] is None or v > best[2]):
                best = (peer, t, v)
    return best


def ratios_of(summary: dict) -> dict:
    out = {}
    for test in TESTS:
        samsa = median_of(summary, "samsa", test)
        peer, peer_test, value = best_peer(summary, test)
        ratio = samsa / value if samsa and value else None
        out[test] = {"samsa": samsa, "best_peer": peer, "best_peer_test": peer_test,
                     "best_peer_msgs_per_s": value, "ratio": ratio, "target": TARGETS[test],
                     "met": ratio is not None and ratio >= TARGETS[test]}
    return out


def limits_line_of(limits: dict, summary: dict) -> dict:
    """Samsa's log bytes per second (222 bytes per message) as a fraction of
    the loopback TCP and sequential disk write speeds."""
    tcp = (limits.get("loopback_tcp", {}).get("mb_per_s") or {}).get("median")
    disk = (limits.get("disk_write", {}).get("mb_per_s") or {}).get("median")
    out = {"loopback_tcp_mb_per_s": tcp, "disk_write_mb_per_s": disk}
    for test in TESTS:
        rate = median_of(summary, "samsa", test)
        if rate is None:
            continue
        mb = rate * MESSAGE_BYTES / 1e6
        out[test] = {"log_mb_per_s": mb,
                     "of_loopback_tcp": mb / tcp if tcp else None,
                     "of_disk_write": mb / disk if disk else None}
    return out


def rate_series(points: list, window: float = 0.5) -> list[tuple[float, float]]:
    """[(t, messages so far), ...] -> [(window middle, messages/s), ...] over
    consecutive windows of at least ``window`` seconds (the last one may be
    shorter)."""
    out = []
    if not points:
        return out
    t0, c0 = points[0]
    for t, c in points[1:]:
        if t - t0 >= window:
            out.append(((t0 + t) / 2, (c - c0) / (t - t0)))
            t0, c0 = t, c
    t, c = points[-1]
    if t > t0 and c != c0:
        out.append(((t0 + t) / 2, (c - c0) / (t - t0)))
    return out


# ====================================================================== RESULTS.md

def replace_section(text: str, section: str, start: str = MARK_START, end: str = MARK_END) -> str:
    return common.replace_section(text, section, start, end)


def write_section(path_md: str, section: str) -> None:
    common.write_section(path_md, section, MARK_START, MARK_END)


def _rng(st: dict, spec: str = ",.0f") -> str:
    if not st:
        return "failed"
    if st["runs"] == 1:
        return format(st["median"], spec)
    return f"{format(st['median'], spec)} [{format(st['min'], spec)}-{format(st['max'], spec)}]"


def _med(st: dict, spec: str) -> str:
    return format(st["median"], spec) if st else "n/a"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def render_section(result: dict, json_rel: str, png_rels: dict) -> str:
    """The markdown between the peers-bench markers of bench/RESULTS.md."""
    m, c, s = result["machine"], result["config"], result["summary"]
    ratios, lim = result["ratios"], result["limits_line"]
    vers = m.get("packages", {})
    runs = c["runs"]
    lines = [f"## Samsa vs RabbitMQ vs ActiveMQ ({result['started'][:10]})", "",
             f"**Machine:** {m.get('nproc')} cores ({m.get('cpu_model', '?')}), "
             f"{m.get('mem_total_gib', '?')} GiB RAM, Linux {m.get('kernel')}, Python "
             f"{m.get('python')}, Samsa C accelerator {'on' if m.get('c_accelerator') else 'OFF'}"
             f", git {m.get('git', {}).get('head', '?')}"
             f"{' + uncommitted broker/ changes' if m.get('git', {}).get('broker_dirty') else ''}"
             f"; RabbitMQ {vers.get('rabbitmq-server', '?')} (Erlang "
             f"{vers.get('erlang-base', '?')}), ActiveMQ {vers.get('activemq', '?')} "
             f"(Java {vers.get('java', '?')}); pika {vers.get('pika', '?')}, stomp.py "
             f"{vers.get('stomp.py', '?')}. Data directories on {c.get('workdir_fs', '?')}. "
             f"Whole run: {result.get('duration_s', 0) / 60:.1f} min.", "",
             "**Method** (`make bench-peers` = `bench/peers.py`, see `bench/README.md`): the "
             "three brokers run at the same time as plain processes on loopback with "
             "temporary data directories (RabbitMQ and ActiveMQ from Debian's packages, "
             "default settings; Samsa `python -m broker` with default settings), clients are "
             "Python processes of their own on the same 2 cores. Every figure is the median of "
             f"{runs} run{'s' if runs != 1 else ''} [min-max]; the runs interleave the systems "
             "(the order rotates each run) so that the ratios hold on a noisy machine, and each "
             "test waits for the machine to be idle first. 200-byte random messages, one "
             "queue/topic (one partition); MB/s counts the 200 payload bytes.",
             "* *Produce*: one producer publishes N messages; the time runs from the first "
             "send until all N are in the broker (Samsa: its latest offset covers them, i.e. "
             "flushed and visible; RabbitMQ: the queue holds them; ActiveMQ: the receipt of "
             "the last frame). Samsa: `acks=none`; batch 1 = `send()` per message "
             "(batch_size=1, linger_ms=0), batch 50 = `send_many()` of 50 values "
             "(batch_size=50: one produce request per 50). RabbitMQ (pika "
             "`BlockingConnection`): persistent messages to a durable queue, no publisher "
             "confirms. ActiveMQ (stomp.py, TCP_NODELAY): `persistent:true`, no receipts. "
             "**The peers cannot batch** (neither AMQP 0-9-1 nor STOMP has a message set): "
             "their batch-50 row is their closest equivalent, one transaction per 50 messages "
             "(RabbitMQ tx.select/tx.commit, ActiveMQ BEGIN/COMMIT), and Samsa's batch-50 ratio "
             "is taken against the best peer's best produce figure, batch 1 or transaction.",
             "* *Consume*: one consumer drains the N(batch 1) + N(batch 50) messages the two "
             f"produce tests left: Samsa with {c.get('fetch_bytes', 204800) // 1024} KB fetches "
             "(about 900 messages per pull, CRC checks on), the peers with prefetch "
             f"{c.get('prefetch', 1000)} and automatic acknowledgement as in the paper "
             "(RabbitMQ applies no prefetch limit to an auto-ack consumer).",
             f"* *N*: each producer publishes for at least {c['seconds']:.0f} s (it looks at "
             "the clock every 50 messages and stops there; N = what it sent, shown as the "
             "median in the table) after an untimed warm-up of every workload (which also "
             "warms ActiveMQ's JVM).",
             "* *Broker CPU*: utime+stime of the broker's processes (from /proc, all threads) "
             "over the test, and per message. *On disk*: what the broker's data directory "
             "gained during the produce test (new files plus growth of existing ones, as du "
             "counts them: allocated blocks; KahaDB's 32 MiB journal files are sparse, so only "
             "what was written counts; files the broker deleted meanwhile, garbage of earlier "
             "runs, do not offset it), per message of 200 payload bytes.", "",
             "| Test | System | msg/s | MB/s | N | s | broker CPU s (us/msg) | on disk, "
             "bytes per message |", "|---|---|---|---|---|---|---|---|"]
    for test in TESTS:
        for system in SYSTEMS:
            st = s.get(system, {}).get(test)
            if st is None:
                continue
            name = LABELS[system]
            if system != "samsa" and test == "produce_batch50":
                name += " (tx per 50)"
            disk = _med(st['disk_bytes_per_msg'], ',.0f') if test != "consume" else ""
            lines.append(f"| {TEST_LABELS[test]} | {name} | {_rng(st['msgs_per_s'])} | "
                         f"{_med(st['mb_per_s'], ',.1f')} | {_med(st['n'], ',.0f')} | "
                         f"{_med(st['elapsed_s'], '.1f')} | "
                         f"{_med(st['broker_cpu_s'], '.1f')} "
                         f"({_med(st['broker_cpu_us_per_msg'], ',.1f')}) | {disk} |")
    lines += ["", "| Ratio (medians) | Samsa msg/s | best peer | ratio | target | met |",
              "|---|---|---|---|---|---|"]
    for test in TESTS:
        r = ratios[test]
        peer = (f"{LABELS[r['best_peer']]} {TEST_LABELS[r['best_peer_test']].lower()}"
                f"{' (tx per 50)' if r['best_peer_test'] == 'produce_batch50' else ''}: "
                f"{r['best_peer_msgs_per_s']:,.0f}" if r["best_peer"] else "n/a")
        ratio = f"{r['ratio']:.1f}x" if r["ratio"] else "n/a"
        met = "yes" if r["met"] else "**no**"
        samsa = f"{r['samsa']:,.0f}" if r["samsa"] else "failed"
        lines.append(f"| {TEST_LABELS[test]} | {samsa} | {peer} | {ratio} | "
                     f">= {r['target']:.0f}x | {met} |")
    tcp, disk = lim.get("loopback_tcp_mb_per_s"), lim.get("disk_write_mb_per_s")
    parts = []
    for test in TESTS:
        if test in lim:
            x = lim[test]
            parts.append(f"{TEST_LABELS[test].lower()} {x['log_mb_per_s']:,.0f} MB/s = "
                         f"{_pct(x['of_loopback_tcp'])} of loopback, "
                         f"{_pct(x['of_disk_write'])} of the disk")
    lines += ["", f"**Physical limits** (same run): loopback TCP "
              f"{'n/a' if tcp is None else f'{tcp:,.0f} MB/s'} (one Python sender and receiver, "
              f"{c.get('tcp_chunk_mb', 4)} MB sendall/recv_into buffers), sequential disk write "
              f"{'n/a' if disk is None else f'{disk:,.0f} MB/s'} (dd 1 GiB, conv=fdatasync, "
              "into the data directories' file system). Samsa's log bytes "
              f"({MESSAGE_BYTES} per message): " + "; ".join(parts) + "."]
    lines += ["", "Plots (messages/s over time in 0.5 s windows, log scale, every run drawn; a "
              "producer's curve counts messages handed to its client library, and its tail is "
              "the wait until the broker has them all):", ""]
    for key in ("produce", "consume"):
        if png_rels.get(key):
            lines.append(f"![{key}]({png_rels[key]})")
            lines.append("")
    lines += ["Per run (for judging noise): msg/s, seconds, and the machine's busy fraction "
              "just before the test / an estimate of other processes' CPU seconds during it "
              "(the idle brokers' CPU is counted apart):", ""]
    for system in SYSTEMS:
        for test in TESTS:
            runs_ = result["raw"].get(system, {}).get(test, [])
            if not runs_:
                continue
            cells = []
            for r in runs_:
                if "error" in r:
                    cells.append(f"run {r.get('run')}: FAILED ({r['error'][:80]})")
                    continue
                cells.append(f"{r['msgs_per_s']:,.0f}/s {r['elapsed_s']:.1f} s busy "
                             f"{r.get('busy_fraction_before', 0):.0%}/"
                             f"{r.get('other_processes_cpu_s_est', 0):.1f} s, idle brokers "
                             f"{r.get('idle_brokers_cpu_s', 0):.1f} s")
            lines.append(f"* {LABELS[system]} {TEST_LABELS[test].lower()}: " + "; ".join(cells))
    notes = result.get("stop_notes") or []
    left = result.get("leftover_processes") or []
    lines += ["", f"Processes after the run: {'none left' if not left else left}"
              f"{'; stop notes: ' + '; '.join(notes) if notes else ''}.",
              "", f"Raw runs, series and machine details: `bench/{json_rel}`.", ""]
    return "\n".join(lines)


# ====================================================================== plots

def plot(result: dict, path_produce: str, path_consume: str, window: float = 0.5) -> None:
    """Messages/s over time of every run: produce (batch 1 | batch 50) and consume."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    raw = result["raw"]
    date = result["started"][:10]

    def draw(ax, test: str, title: str) -> None:
        for system in SYSTEMS:
            first = True
            for r in raw.get(system, {}).get(test, []):
                pts = rate_series(r.get("series") or [], window)
                if not pts:
                    continue
                label = None
                if first:
                    label = LABELS[system] + (" (tx per 50)" if system != "samsa"
                                              and test == "produce_batch50" else "")
                ax.plot([p[0] for p in pts], [max(p[1], 1.0) for p in pts],
                        color=COLORS[system], lw=1.3, alpha=0.8, label=label,
                        marker="o" if len(pts) < 4 else None, ms=3)
                first = False
        ax.set_yscale("log")
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("seconds since the test started")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8, loc="best")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    draw(axes[0], "produce_batch1", "Produce, batch 1")
    draw(axes[1], "produce_batch50", "Produce, batch 50 (peers: a transaction per 50)")
    axes[0].set_ylabel("messages/s produced (log)")
    fig.suptitle(f"Producer test, 200-byte messages, one producer ({date})", fontsize=12)
    fig.tight_layout()
    fig.savefig(path_produce, dpi=90)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    draw(ax, "consume", "Consumer test: drain a pre-filled queue/topic")
    ax.set_ylabel("messages/s consumed (log)")
    fig.tight_layout()
    fig.savefig(path_consume, dpi=90)
    plt.close(fig)
