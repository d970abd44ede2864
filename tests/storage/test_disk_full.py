"""A full disk, for real: a 1 MiB tmpfs. Appends that do not fit fail whole
(StorageError, offsets given back, the file cut back), what was written
stays readable, and appends work again once space is freed."""
from __future__ import annotations

import errno
import os
import subprocess

import pytest

from broker.storage.errors import StorageError
from broker.storage.log import Log
from broker.storage.log_config import LogConfig
from broker.storage.segment import Segment

from storage_helpers import FakeClock, append, read_from


@pytest.fixture
def tiny_fs(tmp_path):
    """A mounted 1 MiB tmpfs, unmounted afterwards."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                              capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot run mount to make a 1 MiB tmpfs: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a 1 MiB tmpfs (needs root or CAP_SYS_ADMIN): "
                    f"{done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=20)


def fill(mnt, leave: int) -> str:
    """Fill the filesystem until about ``leave`` bytes are free; return the
    filler's path (delete it to free the space)."""
    path = str(mnt / "filler")
    st = os.statvfs(mnt)
    with open(path, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    return path


def test_segment_write_is_all_or_nothing(tiny_fs):
    fill(tiny_fs, 64 << 10)
    seg = Segment(str(tiny_fs), 0, 0)
    chunk = os.urandom(10_000)   # not a multiple of the page size: the last write is partial
    written = b""
    with pytest.raises(StorageError) as err:
        for _ in range(1000):
            seg.write([chunk[:4000], memoryview(chunk)[4000:]])
            written += chunk
    assert err.value.errno in (errno.ENOSPC, errno.EDQUOT)
    assert "disk full" in str(err.value)
    assert len(written) > 0
    assert seg.size == len(written) == os.fstat(seg.fd).st_size
    assert seg.read(0, seg.size + 100) == written
    seg.close()


def test_log_survives_a_full_disk(tiny_fs):
    data_dir = str(tiny_fs / "log")
    os.mkdir(data_dir)
    clock = FakeClock()
    cfg = LogConfig(segment_bytes=100_000)
    lg = Log(data_dir, cfg, clock)
    filler = fill(tiny_fs, 300 << 10)

    stored = []
    value = os.urandom(6000)
    with pytest.raises(StorageError) as err:
        for n in range(1000):
            end_before = lg.end_offset
            # two sets per write: both must be given back when the write fails
            stored_now = append(lg, [(None, value, n)])[1] + append(lg, [(b"k", value, n)])[1]
            unflushed = lg.unflushed_messages
            lg.write_pending()
            stored += stored_now
            if n % 5 == 0:
                lg.flush()
    assert err.value.errno == errno.ENOSPC
    assert len(stored) > 10 and len(lg.segments) > 1
    # the failed appends are gone: offsets given back, the file cut back
    assert lg.end_offset == lg.written_end == end_before == stored[-1].next_offset
    assert lg.unflushed_messages == unflushed - 2
    assert lg.active.size == os.path.getsize(lg.active.path) == end_before - lg.active.base_offset
    # everything written before is intact and becomes visible once flushed
    lg.flush()
    assert read_from(lg, 0) == stored

    # while the disk stays full, appends keep failing cleanly
    append(lg, [(None, value, 0)])
    with pytest.raises(StorageError):
        lg.flush()
    assert lg.end_offset == end_before

    os.unlink(filler)
    more = append(lg, [(None, value, 99)])[1]
    lg.flush()
    stored += more
    assert read_from(lg, 0) == stored
    lg.close()
    lg = Log(data_dir, cfg, clock)
    assert lg.recovered_bytes_cut == 0
    assert read_from(lg, 0) == stored
    lg.close()
