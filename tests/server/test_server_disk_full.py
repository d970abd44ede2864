"""A full disk: the broker answers STORAGE_ERROR, appends nothing of the
refused set, keeps serving what it has, and takes appends again once there is
room; no acknowledged message is lost. Runs on a real 4 MiB tmpfs (needs
root, or the right to mount; skipped otherwise)."""
from __future__ import annotations

import errno
import os

from broker.protocol.api import Acks
from broker.protocol.errors import ErrorCode

from broker_helpers import (connect, high_watermark, log_sizes, message_set, produce,
                            read_partition, wait_until)


def fill(path, chunk: bytes = b"\0" * (64 << 10)) -> int:
    """Write ``path`` until the file system is full; returns its size."""
    size = 0
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                size += f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return size


def test_disk_full_refuses_appends_then_recovers_when_space_is_freed(tmpfs, broker_factory):
    small_fs = tmpfs("4m")
    broker = broker_factory(data_dir=str(small_fs / "data"))     # its log stays off the tmpfs
    with connect(broker.address) as conn:
        early = produce(conn, "full", 0, message_set([b"before the disk filled"]))
        assert early.error == 0
        # Most of the space goes to a filler file; the log fills the rest.
        filler = small_fs / "filler"
        fill(filler)
        os.truncate(filler, os.path.getsize(filler) - (512 << 10))
        acked: list[tuple[int, list[bytes]]] = []
        refused = None
        for i in range(100):
            values = [b"%03d-%02d:" % (i, j) + b"v" * 2000 for j in range(16)]
            r = produce(conn, "full", 0, message_set(values), Acks.WRITTEN)
            if r.error:
                refused = r, values
                break
            acked.append((r.base_offset, values))
        assert refused is not None, "the disk never filled"
        r, refused_values = refused
        assert r.error == ErrorCode.STORAGE_ERROR, r.message
        assert (r.base_offset, r.end_offset) == (-1, -1)
        assert len(acked) >= 3
        end = acked[-1][0] + len(message_set(acked[-1][1]))
        assert log_sizes(conn, "full")[0] == end              # nothing of the refused set

        # still alive, still serving: everything acknowledged becomes readable
        assert broker.proc.poll() is None
        wait_until(lambda: high_watermark(conn, "full", 0) == end, what="the flush timer")
        messages = read_partition(conn, "full", 0)
        assert messages[0].value == b"before the disk filled"

        # room again: the next append lands right where the log ended
        filler.unlink()
        r = produce(conn, "full", 0, message_set(refused_values), Acks.FLUSHED)
        assert (r.error, r.base_offset) == (0, end), r.message
        values = [m.value for m in read_partition(conn, "full", 0)]
        expected = [b"before the disk filled"] + [v for _base, vs in acked for v in vs] \
            + refused_values
        assert values == expected                              # no acknowledged message lost
        by_offset = {m.offset: m.value for m in read_partition(conn, "full", 0)}
        assert all(by_offset[base] == vs[0] for base, vs in acked)
