"""Drop-behind (broker/storage/page_cache.py): which flushed ranges leave the
page cache and when, checked with the kernel's own residency count (fincore)
on real files; the free-page-reporting detection on a sysfs-shaped tree; and a
broker with drop-behind on, which must serve every message it acknowledged."""
from __future__ import annotations

import os
import subprocess

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.storage.page_cache import PageCacheBudget, drop_behind_enabled, free_page_reporting
from broker.storage.segment import Segment

from broker_helpers import connect, message_set, metric, produce, read_partition, scrape_metrics

MiB = 1 << 20


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, fd: int, start: int, length: int) -> None:
        self.calls.append((fd, start, length))


def segment(tmp_path, base: int = 0) -> Segment:
    return Segment(str(tmp_path), base, created_ms=0)


def test_ranges_under_the_budget_stay(tmp_path):
    advise = Recorder()
    budget = PageCacheBudget(10 * MiB, advise=advise)
    seg = segment(tmp_path)
    budget.flushed([(seg, 0, 4 * MiB)])
    budget.flushed([(seg, 4 * MiB, 10 * MiB)])
    assert advise.calls == []
    assert budget.cached_bytes == 10 * MiB and budget.dropped_bytes == 0


def test_the_oldest_bytes_go_first_and_only_the_excess(tmp_path):
    advise = Recorder()
    budget = PageCacheBudget(10 * MiB, advise=advise)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = segment(tmp_path / "a"), segment(tmp_path / "b")
    budget.flushed([(a, 0, 6 * MiB)])
    budget.flushed([(b, 0, 3 * MiB)])
    budget.flushed([(a, 6 * MiB, 9 * MiB)])     # 12 MiB recorded: 2 MiB over
    assert advise.calls == [(a.fd, 0, 2 * MiB)]
    budget.flushed([(b, 3 * MiB, 8 * MiB)])     # 15 MiB: the rest of a's first range, 1 MiB of b
    assert advise.calls[1:] == [(a.fd, 2 * MiB, 4 * MiB), (b.fd, 0, 1 * MiB)]
    assert budget.cached_bytes == 10 * MiB
    assert budget.dropped_bytes == 7 * MiB


def test_contiguous_flushes_of_one_file_merge_into_one_range(tmp_path):
    advise = Recorder()
    budget = PageCacheBudget(0, advise=advise)
    seg = segment(tmp_path)
    budget.flushed([(seg, 0, MiB), (seg, MiB, 2 * MiB)])
    assert advise.calls == [(seg.fd, 0, 2 * MiB)]


def test_a_deleted_segment_is_never_advised(tmp_path):
    advise = Recorder()
    budget = PageCacheBudget(MiB, advise=advise)
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old, new = segment(tmp_path / "old"), segment(tmp_path / "new")
    budget.flushed([(old, 0, 4 * MiB)])
    assert advise.calls == [(old.fd, 0, 3 * MiB)]
    old.delete()                                # retention: the file and its pages are gone
    budget.flushed([(new, 0, 2 * MiB)])
    assert advise.calls[1:] == [(new.fd, 0, MiB)]
    assert budget.cached_bytes == MiB


def test_a_failing_advice_does_not_fail_the_flush(tmp_path):
    def failing(fd, start, length):
        raise OSError(22, "Invalid argument")
    budget = PageCacheBudget(0, advise=failing)
    budget.flushed([(segment(tmp_path), 0, MiB)])
    assert budget.cached_bytes == 0 and budget.dropped_bytes == 0


def resident_bytes(path: str) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                         check=True, capture_output=True, text=True).stdout
    return int(out.strip())


def test_the_kernel_really_drops_the_pages(tmp_path):
    """The real system call on a real file: what the budget drops is no longer
    resident; what it keeps still is; the bytes read back unchanged."""
    seg = segment(tmp_path)
    data = os.urandom(16 * MiB)
    seg.write([data])
    seg.sync()
    assert resident_bytes(seg.path) == 16 * MiB     # just written: all in the cache
    budget = PageCacheBudget(4 * MiB)
    budget.flushed([(seg, 0, 16 * MiB)])
    assert budget.dropped_bytes == 12 * MiB
    assert resident_bytes(seg.path) == 4 * MiB
    assert seg.read(0, 16 * MiB) == data


def test_free_page_reporting_is_read_from_the_balloon_features(tmp_path):
    balloon = tmp_path / "virtio_balloon"
    assert not free_page_reporting(str(balloon))          # no balloon device at all
    (balloon / "virtio0").mkdir(parents=True)
    (balloon / "virtio0" / "features").write_text("0110000100000000\n")    # no bit 5
    assert not free_page_reporting(str(balloon))
    assert not drop_behind_enabled("auto", str(balloon))
    (balloon / "virtio0" / "features").write_text("0110010100000000\n")    # bit 5: reporting
    assert free_page_reporting(str(balloon))
    assert drop_behind_enabled("auto", str(balloon))
    assert not drop_behind_enabled("off", str(balloon))
    assert drop_behind_enabled("on", str(tmp_path / "nothing"))
    with pytest.raises(ValueError, match="drop_behind"):
        drop_behind_enabled("sometimes", str(balloon))


def test_config_rejects_bad_drop_behind_settings():
    with pytest.raises(ConfigError, match="drop_behind"):
        BrokerConfig(drop_behind="yes")
    with pytest.raises(ConfigError, match="page_cache_budget_bytes"):
        BrokerConfig(page_cache_budget_bytes=-1)


def test_a_broker_dropping_behind_serves_every_acknowledged_message(broker_factory):
    """Drop-behind on with a 256 KiB budget: 3 MB acknowledged (flushed) go
    through the budget; reading everything back from offset 0 returns every
    value, and the broker says how much it dropped."""
    broker = broker_factory({"drop_behind": "on", "page_cache_budget_bytes": 256 * 1024})
    values = [b"%06d-" % i + os.urandom(500) for i in range(6000)]
    with connect(broker.address) as conn:
        for i in range(0, len(values), 300):
            r = produce(conn, "dropped", 0, message_set(values[i:i + 300]))
            assert r.error == 0, r.message
        got = [m.value for m in read_partition(conn, "dropped", 0)]
    assert got == values
    samples = scrape_metrics(broker.metrics_port)
    assert metric(samples, "samsa_page_cache_budget_bytes") == 256 * 1024
    assert metric(samples, "samsa_page_cache_dropped_bytes_total") >= 2_500_000


def test_advice_starts_at_the_page_holding_a_ranges_start(tmp_path):
    """The kernel drops whole pages only: advice from an unaligned start
    would leave that page cached for ever (review finding)."""
    import os as _os
    page = _os.sysconf("SC_PAGE_SIZE")
    advise = Recorder()
    budget = PageCacheBudget(0, advise=advise)
    seg = segment(tmp_path)
    budget.flushed([(seg, 0, page + 100)])
    budget.flushed([(seg, page + 100, 3 * page + 7)])
    assert advise.calls == [(seg.fd, 0, page + 100), (seg.fd, page, 2 * page + 7)]
    assert budget.cached_bytes == 0
