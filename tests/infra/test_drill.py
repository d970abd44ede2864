"""One fault drill (infra/local/drill.py, fewer faults than make drill):
while audited traffic flows, a broker in each datacenter, a mirror process,
the audit counter and a loader run are killed -9 and restarted, ZooKeeper
once, and a broker of each datacenter is killed with its data directory
deleted (the clusters replicate: it copies its replicas back). The audit
must show every acknowledged message at every tier, every replica must be
byte-identical to its leader's, and the
duplicates it reports at the hadoop tier must equal what a direct count of
the Parquet finds (rows minus distinct event ids)."""
from __future__ import annotations

import re
import subprocess
import sys

import pyarrow.dataset as ds
import pytest


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_drill_loses_nothing_and_reports_its_duplicates_exactly(tmp_path):
    state = tmp_path / "drill"
    out = subprocess.run([sys.executable, "-m", "infra.local.drill", "--dir", str(state),
                          "--rounds", "1", "--per-round", "300", "--seed", "11", "--keep-up"],
                         capture_output=True, text=True, timeout=840)
    try:
        text = out.stdout + out.stderr
        assert out.returncode == 0, text[-6000:]
        assert "LOST: 0  (nothing acknowledged was lost)" in text
        kinds = re.findall(r"^  (broker kill -9|broker wiped|mirror kill -9|counter kill -9|"
                           r"loader kill -9|ZooKeeper kill -9) ", text, re.M)
        assert sorted(set(kinds)) == ["ZooKeeper kill -9", "broker kill -9", "broker wiped",
                                      "counter kill -9", "loader kill -9", "mirror kill -9"]
        # a broker of each datacenter lost its disk and came back with every replica
        wiped = re.findall(r"^  broker wiped +(dc-[ab])\.broker-\d", text, re.M)
        assert sorted(wiped) == ["dc-a", "dc-b"]
        identical = dict(re.findall(r"^replicas of ([\w-]+): (\d+) partitions byte-identical",
                                    text, re.M))
        assert set(identical) == {"dc-a", "dc-b", "analysis"}, text[-3000:]
        assert all(int(n) > 0 for n in identical.values())
        acked = int(re.search(r"messages acknowledged: ([\d,]+)", text).group(1)
                    .replace(",", ""))
        tiers = {m[0]: [int(x.replace(",", "")) for x in m[1:]] for m in re.findall(
            r"^  (\w+) +produced ([\d,]+) +counted ([\d,]+) +missing ([\d,]+) +duplicated "
            r"([\d,]+)", text, re.M)}
        assert tiers["producer"][0] == acked > 0
        assert all(t[2] == 0 for t in tiers.values())            # missing
        # the hadoop tier's duplicates, counted directly in what was written
        rows = ids = 0
        for topic in ("page_views", "searches", "logins"):
            table = ds.dataset(str(state / "warehouse" / topic), partitioning="hive") \
                .to_table(columns=["header"])
            event_ids = [h["event_id"] for h in table.column("header").to_pylist()]
            rows += len(event_ids)
            ids += len(set(event_ids))
        assert ids == acked
        assert tiers["hadoop"][1] == rows and tiers["hadoop"][3] == rows - ids
    finally:
        subprocess.run([sys.executable, "-m", "infra.local.pipeline", "down", "--dir",
                        str(state)], capture_output=True, timeout=120)
