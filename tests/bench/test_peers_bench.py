"""The pure parts of the peer benchmark (bench/peers*.py): summaries, ratios,
the RESULTS.md section, N from a warm-up, the process-group cleanup, disk
usage, the derived ActiveMQ configuration, the physical-limit probes. Starts
no RabbitMQ or ActiveMQ (``make test`` does not install them)."""
from __future__ import annotations

import os
import time

import pytest

from bench import peers
from bench import peers_report as report
from bench import peers_servers as servers
from bench.peers_workers import Progress, steps


def _run(rate: float, n: int = 1000, **extra) -> dict:
    elapsed = n / rate
    return {"n": n, "msgs_per_s": rate, "mb_per_s": rate * 200 / 1e6, "elapsed_s": elapsed,
            "broker_cpu_s": 1.0, "broker_cpu_us_per_msg": 1e6 / n,
            "disk_bytes_per_msg": 222.0, "series": [[0.0, 0], [elapsed, n]], **extra}


def _raw(samsa=(1_600_000, 180_000, 1_900_000), rabbit=(15_000, 8_000, 30_000),
         active=(22_000, 11_000, 18_000)) -> dict:
    raw = {}
    for system, (b50, b1, cons) in (("samsa", samsa), ("rabbitmq", rabbit),
                                    ("activemq", active)):
        raw[system] = {
            "produce_batch1": [_run(b1 * f, run=i) for i, f in enumerate((0.9, 1.0, 1.1), 1)],
            "produce_batch50": [_run(b50, run=1), _run(b50 * 2, run=2),
                                {"error": "boom", "run": 3}],
            "consume": [_run(cons, run=1)],
        }
    return raw


def _result() -> dict:
    raw = _raw()
    summary = report.summary_of(raw)
    limits = {"loopback_tcp": {"mb_per_s": {"median": 2000.0}},
              "disk_write": {"mb_per_s": {"median": 600.0}}}
    return {"started": "2026-11-22T10:00:00+00:00", "duration_s": 600.0,
            "machine": {"nproc": 2, "cpu_model": "CPU", "git": {"head": "abc"},
                        "packages": {"activemq": "5.17"}},
            "config": {"runs": 3, "seconds": 12.0},
            "raw": raw, "summary": summary, "ratios": report.ratios_of(summary),
            "limits_line": report.limits_line_of(limits, summary)}


# ---------------------------------------------------------------- numbers

def test_summary_takes_medians_of_good_runs_and_counts_failures():
    s = report.summary_of(_raw())
    b1 = s["samsa"]["produce_batch1"]
    assert b1["msgs_per_s"]["median"] == pytest.approx(180_000)
    assert b1["msgs_per_s"]["min"] == pytest.approx(162_000)
    assert b1["msgs_per_s"]["runs"] == 3 and b1["failed_runs"] == 0
    b50 = s["samsa"]["produce_batch50"]
    assert b50["msgs_per_s"]["runs"] == 2 and b50["failed_runs"] == 1
    assert b50["msgs_per_s"]["median"] == pytest.approx(2_400_000)


def test_ratios_against_the_best_peer():
    r = report.ratios_of(report.summary_of(_raw()))
    assert r["produce_batch1"]["best_peer"] == "activemq"
    assert r["produce_batch1"]["ratio"] == pytest.approx(180_000 / 11_000)
    assert r["produce_batch1"]["met"] is True
    assert r["consume"]["best_peer"] == "rabbitmq"
    assert r["consume"]["ratio"] == pytest.approx(1_900_000 / 30_000)
    assert r["consume"]["met"] is True


def test_batch50_ratio_uses_a_peers_best_produce_mode():
    # a peer's transaction per 50 (10,000) is slower than its batch 1 (20,000):
    # Samsa's batch 50 is compared with the faster one
    raw = _raw(rabbit=(10_000, 20_000, 30_000), active=(5_000, 6_000, 18_000))
    r = report.ratios_of(report.summary_of(raw))["produce_batch50"]
    assert (r["best_peer"], r["best_peer_test"]) == ("rabbitmq", "produce_batch1")
    assert r["best_peer_msgs_per_s"] == pytest.approx(20_000)
    assert r["ratio"] == pytest.approx(2_400_000 / 20_000)


def test_missed_target_and_missing_figures():
    raw = _raw(samsa=(1_000_000, 100_000, 1_000_000))
    r = report.ratios_of(report.summary_of(raw))
    assert r["produce_batch50"]["met"] is False    # 1,000,000 / 22,000 = 45x < 60x
    raw["samsa"]["consume"] = [{"error": "x"}]
    r = report.ratios_of(report.summary_of(raw))
    assert r["consume"]["ratio"] is None and r["consume"]["met"] is False


def test_limits_line_fractions():
    lim = _result()["limits_line"]
    b50 = lim["produce_batch50"]
    assert b50["log_mb_per_s"] == pytest.approx(2_400_000 * 222 / 1e6)
    assert b50["of_disk_write"] == pytest.approx(b50["log_mb_per_s"] / 600)
    assert b50["of_loopback_tcp"] == pytest.approx(b50["log_mb_per_s"] / 2000)
    assert report.limits_line_of({}, {})["loopback_tcp_mb_per_s"] is None


def test_rate_series_windows():
    pts = [[i * 0.1, i * 1000] for i in range(31)]         # 10,000 msg/s for 3 s
    rates = report.rate_series(pts, window=0.5)
    assert len(rates) == 6
    assert all(r == pytest.approx(10_000) for _t, r in rates)
    assert rates[0][0] == pytest.approx(0.25)
    assert report.rate_series([]) == []
    # a short last window is kept
    assert report.rate_series([[0, 0], [0.5, 50], [0.7, 90]], 0.5)[-1][1] == pytest.approx(200)


def test_steps_stop_at_n_max_with_the_last_step_final():
    prog = Progress(interval=0.0)
    prog.start()
    got = list(steps(prog, n_max=175, seconds=None))
    assert [k for k, _f in got] == [0, 1, 2, 3]     # 4 steps of 50 cover 175
    assert [f for _k, f in got] == [False, False, False, True]
    assert prog.points[-1][1] == 150                 # ticked before each step


def test_steps_stop_on_time():
    prog = Progress()
    prog.start()
    t0 = time.perf_counter()
    count = 0
    for _k, final in steps(prog, n_max=10**9, seconds=0.2):
        count += 1
        time.sleep(0.01)
    # the loop stops once 0.2 s passed: at least that long, and never more
    # steps than 10 ms sleeps fit in it (no upper bound on time: a loaded
    # machine may be slow)
    assert final and time.perf_counter() - t0 >= 0.2
    assert 1 <= count <= 21


def test_progress_points():
    p = Progress(interval=0.0)
    p.start()
    for i in range(1, 4):
        p.tick(i)
    elapsed = p.finish(3)
    assert p.points[0] == [0.0, 0] and p.points[-1][1] == 3
    assert [c for _t, c in p.points] == sorted(c for _t, c in p.points)
    assert elapsed >= p.points[-2][0]


# ---------------------------------------------------------------- RESULTS.md

def test_replace_section_keeps_the_rest():
    text = ("# Results\n\n<!-- broker-bench:start -->\nbroker\n<!-- broker-bench:end -->\n\n"
            f"{report.MARK_START}\nold\n{report.MARK_END}\n\ntail\n")
    out = report.replace_section(text, "new\n")
    assert "old" not in out and f"{report.MARK_START}\nnew\n{report.MARK_END}" in out
    assert out.startswith("# Results\n\n<!-- broker-bench:start -->\nbroker\n")
    assert out.endswith("\n\ntail\n")
    appended = report.replace_section("# Results\n", "first")
    assert appended == f"# Results\n\n{report.MARK_START}\nfirst\n{report.MARK_END}\n"
    assert report.replace_section(appended, "second").count(report.MARK_START) == 1


def test_render_section():
    res = _result()
    md = report.render_section(res, "results/peers-2026-11-22.json",
                               {"produce": "results/p.png", "consume": "results/c.png"})
    assert md.startswith("## Samsa vs RabbitMQ vs ActiveMQ (2026-11-22)")
    assert "| Produce, batch 1 | Samsa | 180,000 [162,000-198,000] |" in md
    assert "| Produce, batch 50 | RabbitMQ (tx per 50) |" in md
    assert "![produce](results/p.png)" in md and "![consume](results/c.png)" in md
    assert "| Consume | 1,900,000 | RabbitMQ consume: 30,000 | 63.3x | >= 60x | yes |" in md
    assert "loopback TCP 2,000 MB/s" in md and "sequential disk write 600 MB/s" in md
    assert "FAILED (boom)" in md
    assert "bench/results/peers-2026-11-22.json" in md


def test_render_section_marks_a_missed_target():
    res = _result()
    raw = _raw(samsa=(1_000_000, 100_000, 1_000_000))
    res["summary"] = report.summary_of(raw)
    res["ratios"] = report.ratios_of(res["summary"])
    md = report.render_section(res, "x.json", {})
    assert "| >= 60x | **no** |" in md


def test_plot_writes_small_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    res = _result()
    for system in report.SYSTEMS:
        for test in report.TESTS:
            for r in res["raw"][system][test]:
                if "series" in r:
                    r["series"] = [[i * 0.1, i * 100] for i in range(120)]
    p, c = tmp_path / "p.png", tmp_path / "c.png"
    report.plot(res, str(p), str(c))
    for path in (p, c):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert path.stat().st_size < 300_000


# ---------------------------------------------------------------- disk, config, limits

def test_dir_usage_counts_allocated_blocks(tmp_path):
    (tmp_path / "a").mkdir()
    with open(tmp_path / "a" / "data", "wb") as f:
        f.write(os.urandom(8192))
        f.flush()
        os.fsync(f.fileno())
    with open(tmp_path / "sparse", "wb") as f:      # preallocated the KahaDB way
        f.truncate(32 << 20)
    used = servers.dir_usage(str(tmp_path))
    assert 8192 <= sum(used.values()) < 1 << 20
    assert servers.settled_usage(str(tmp_path), timeout=1) == used


def test_growth_ignores_files_deleted_meanwhile():
    before = {"journal-1": 4096, "index": 8192, "old": 1 << 20}
    after = {"journal-1": 4096, "journal-2": 12288, "index": 16384}    # "old" collected
    assert servers.growth(before, after) == 12288 + 8192
    assert servers.growth(after, after) == 0
    assert servers.growth({"a": 100}, {"a": 50}) == 0                  # shrunk: no credit


def test_activemq_config_has_only_a_stomp_connector():
    debian = ("<beans><broker><persistenceAdapter><kahaDB directory=\"x\"/>"
              "</persistenceAdapter>\n<transportConnectors>\n  <transportConnector "
              "name=\"openwire\" uri=\"tcp://127.0.0.1:61616\"/>\n</transportConnectors>"
              "</broker></beans>")
    xml = servers.activemq_config(debian, 12345)
    assert 'uri="stomp://127.0.0.1:12345"' in xml
    assert "61616" not in xml and "<kahaDB directory=\"x\"/>" in xml
    with pytest.raises(servers.ServerStartError):
        servers.activemq_config("<beans/>", 1)


def test_missing_debian_packages_names_them(monkeypatch):
    monkeypatch.setattr(servers.os.path, "exists", lambda p: False)
    assert {"rabbitmq-server", "activemq"} <= set(servers.missing_debian_packages(
        ["samsa", "rabbitmq", "activemq"]))
    assert servers.missing_debian_packages(["samsa"]) == []


def test_physical_limit_probes(tmp_path):
    tcp = peers.loopback_tcp_speed(seconds=0.2, chunk=1 << 20)
    assert tcp.get("mb_per_s", 0) > 10, tcp
    disk = peers.disk_write_speed(str(tmp_path), mib=4)
    assert disk.get("mb_per_s", 0) > 1, disk
    assert list(tmp_path.iterdir()) == []
    assert peers.filesystem_of(str(tmp_path)) != ""
