"""The multi-DC part of `make demo` runs end to end on the default topology,
secured (its default): the web servers publish as the lab's producer user,
the mirror copies as its own, and a client without credentials is refused."""
from __future__ import annotations

import pytest

from broker_helpers import run_module


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_lab_demo_copies_every_page_view():
    out = run_module("infra.local.demo", "--messages", "2000", timeout=240)
    text = out.stdout.decode()
    assert out.returncode == 0, text + out.stderr.decode()
    assert "the mirror copied 4000 of 4000 page views" in text
    assert "[lab demo] OK" in text
    assert "secured: TLS listeners asking for SCRAM-SHA-512" in text
    assert "a producer without credentials: refused" in text
    assert "lag from dc-a: 0 bytes" in text and "lag from dc-b: 0 bytes" in text
    assert text.count("/metrics says 0\n") == 2       # the mirror measured it too
    assert "\nprometheus https://127.0.0.1:" in text     # the lab's monitoring, in its status
