"""make demo's pipeline (infra/local/pipeline.py) with less traffic, secured
(its default: every service with its own user, every fetch over TLS): the lab,
the audit counters and service, a real Airflow whose scheduler runs
warehouse_load for three hours, Spark writing Parquet; the summary says
100 % at every tier and each hour's rows equal what was produced (read from
the Parquet footers), and nothing is left running afterwards."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from broker.service_kit.process import command_lines


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_loses_nothing_and_loads_every_hour(tmp_path):
    state = tmp_path / "demo"
    out = subprocess.run([sys.executable, "-m", "infra.local.pipeline", "up", "--dir",
                          str(state), "--messages", "1500"], capture_output=True, text=True,
                         timeout=840)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    assert "RESULT: nothing lost, every hour loaded" in text
    for tier in ("producer", "cluster", "mirror", "hadoop"):
        assert re.search(rf"  {tier} +100\.000 %.*missing 0,", text), (tier, text[-4000:])
    rows = re.findall(r"  (\w+) +\S+ \d\d:00 +([\d,]+) rows of +([\d,]+) produced  _SUCCESS",
                      text)
    assert len(rows) == 9                    # 3 topics x 3 hours, each marked done
    assert all(loaded == produced for _topic, loaded, produced in rows)
    assert sum(int(p.replace(",", "")) for _t, _l, p in rows) == 3000
    assert re.search(r"Prometheus: https://127\.0\.0\.1:\d+/ \(alerts: ", text), text[-4000:]
    secured = re.search(r"secured: every fetch on the brokers' TLS listeners \(([\d,]+) bytes "
                        r"encrypted, 0 sent in clear by sendfile\)", text)
    assert secured and int(secured.group(1).replace(",", "")) > 0, text[-4000:]
    assert not any(str(state).encode() in b" ".join(a) for _, a in command_lines())
    # Airflow's processes do not name the state directory: its port is closed
    import socket
    ports = re.findall(r"https?://127\.0\.0\.1:(\d+)/", text)
    assert re.search(r"Airflow: https://127\.0\.0\.1:\d+/ \(login admin / ", text)
    assert len(ports) >= 5                   # audit, registry, Prometheus, Airflow, lag
    for url in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", int(url))) != 0, f"port {url} still open"
