"""make drill-loss (infra/local/drill_loss.py): a segment deleted before the
mirror copied it must be reported by the audit exactly (topic, window, tier,
count) and must block its hour's warehouse load; and the drill's own
verdict logic must fail when the audit or the gate gets it wrong."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from broker.service_kit.process import command_lines
from infra.local.drill_loss import LOST_TIERS, LossReport

HOUR = 3_600_000
W0 = 10 * HOUR                          # a window of the first hour
RUN_OK = {"state": "success", "tasks": {"audit_complete": "success", "load": "success"},
          "success": True}
RUN_BLOCKED = {"state": "failed", "tasks": {"audit_complete": "failed",
                                            "load": "upstream_failed"}, "success": False}


def _report(reported: dict, runs: dict) -> LossReport:
    report = LossReport(segment="s", expected={("page_views", W0): 7},
                        lost_hours={W0 - W0 % HOUR})
    report.reported = reported
    report.runs = runs
    return report


EXACT = {(tier, cluster, "page_views", W0): 7 for tier, cluster in LOST_TIERS}
HOURS_OK = {W0: RUN_BLOCKED, W0 + HOUR: RUN_OK}


@pytest.mark.parametrize("reported, runs, exact, blocked", [
    (EXACT, HOURS_OK, True, True),
    # a lower bound at one tier (duplicates hid part of the loss)
    ({**EXACT, ("mirror", "dc-a", "page_views", W0): 3}, HOURS_OK, False, True),
    # a tier that did not see the loss at all
    ({k: v for k, v in EXACT.items() if k[0] != "hadoop"}, HOURS_OK, False, True),
    # a loss reported somewhere it did not happen
    ({**EXACT, ("cluster", "dc-b", "searches", W0): 1}, HOURS_OK, False, True),
    # the lost hour loaded anyway, or marked done
    (EXACT, {W0: RUN_OK, W0 + HOUR: RUN_OK}, True, False),
    (EXACT, {W0: {**RUN_BLOCKED, "success": True}, W0 + HOUR: RUN_OK}, True, False),
    # the gate failed a whole hour, not the lost one
    (EXACT, {W0: RUN_BLOCKED, W0 + HOUR: RUN_BLOCKED}, True, False),
    # nothing ran
    (EXACT, {}, True, False),
])
def test_the_drills_verdict(reported, runs, exact, blocked):
    report = _report(reported, runs)
    assert report.audit_exact() is exact
    assert report.load_blocked() is blocked
    assert ("RESULT: the loss was reported exactly" in report.table()) is (exact and blocked)


def test_nothing_expected_is_never_exact():
    report = _report({}, HOURS_OK)
    report.expected = {}
    assert not report.audit_exact()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_deleted_segment_is_reported_exactly_and_blocks_its_hour(tmp_path):
    state = tmp_path / "loss"
    # The hour holding the loss fails when its sensor gives up: its timeout
    # after its first ask, but never before the audit's grace has run out
    # (counted from the producers' last report, here some 25 s before that
    # ask). The drill reads the audit's missing counts, which the grace does
    # not change: with a grace of 20 s the run fails 10 s after its first
    # ask, where the default minute held it some 45 s.
    # Spark's driver JVM (spark-submit's, which gets the environment through
    # Airflow) runs seconds: C1 only (C2 never pays off in a job that short,
    # on two cores), the serial GC, no UI. Speed only: the same job.
    env = dict(os.environ, SPARK_SUBMIT_OPTS=" ".join(filter(None, (
        os.environ.get("SPARK_SUBMIT_OPTS"),
        "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dspark.ui.enabled=false"))))
    out = subprocess.run([sys.executable, "-m", "infra.local.drill_loss", "--dir", str(state),
                          "--messages", "6000", "--sensor-timeout", "10",
                          "--audit-grace", "20"],
                         capture_output=True, text=True, timeout=840, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    deleted = int(re.search(r"deleted \S+ \S+ \(([\d,]+) messages\)", text).group(1)
                  .replace(",", ""))
    rows = re.findall(r"^  (\w+) +(\S+) +page_views +\S+ \S+ +([\d,]+) +([\d,]+)  ok$", text,
                      re.M)
    assert {(tier, cluster) for tier, cluster, _e, _r in rows} == set(LOST_TIERS)
    for tier, cluster, _e, _r in rows:      # every tier's windows add up to the segment
        assert sum(int(r.replace(",", "")) for t, c, _x, r in rows
                   if (t, c) == (tier, cluster)) == deleted > 0
    assert "WRONG" not in text
    assert re.search(r"failed +no _SUCCESS +audit_complete failed.*<- holds the loss", text)
    assert "RESULT: the loss was reported exactly" in text
    assert not any(str(state).encode() in b" ".join(a) for _, a in command_lines())
