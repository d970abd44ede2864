"""The loader's offsets, committed with the output."""
from __future__ import annotations

import os

import pytest

from hadoop_loader.state import OffsetStore, StateError, key, parse_key


def test_no_commit_before_the_first_load(tmp_path):
    store = OffsetStore(f"file://{tmp_path}")
    assert store.latest() is None and store.offsets() == {}


def test_commits_merge_and_keep_a_short_history(tmp_path):
    store = OffsetStore(str(tmp_path), keep=3)
    a, b = key("page_views", "0-1"), key("searches", "3")
    assert (a, parse_key(a)) == ("page_views/0-1", ("page_views", "0-1"))
    assert (b, parse_key(b)) == ("searches/3", ("searches", "3"))      # replicated
    store.commit({a: 100}, run="r1")
    store.commit({b: 50}, run="r2")
    latest = store.commit({a: 300}, run="r3", extra={"rows": 12})
    assert latest.sequence == 3 and store.offsets() == {a: 300, b: 50}
    assert OffsetStore(str(tmp_path)).latest().extra == {"rows": 12}
    for i in range(5):
        store.commit({a: 400 + i})
    names = sorted(os.listdir(tmp_path / "_samsa" / "offsets"))
    assert len(names) == 3 and names[-1] == f"{8:020d}.json"


def test_offsets_never_move_back(tmp_path):
    store = OffsetStore(str(tmp_path))
    store.commit({"t/0-0": 100})
    with pytest.raises(StateError, match="would move back"):
        store.commit({"t/0-0": 99})


def test_a_commit_is_atomic_and_a_racing_one_is_refused(tmp_path, monkeypatch):
    store = OffsetStore(str(tmp_path))
    store.commit({"t/0-0": 1})
    other = OffsetStore(str(tmp_path))
    real_latest = other.latest
    seen = real_latest()
    monkeypatch.setattr(other, "latest", lambda: seen)      # read before the first commits
    store.commit({"t/0-0": 2})
    with pytest.raises(StateError, match="another load committed"):
        other.commit({"t/0-0": 3})
    assert OffsetStore(str(tmp_path)).offsets() == {"t/0-0": 2}
    assert not [n for n in os.listdir(tmp_path / "_samsa" / "offsets") if n.endswith(".tmp")]


def test_an_hdfs_output_without_hadoop_s_client_fails_clearly(tmp_path):
    from hadoop_loader.outputfs import OutputError
    with pytest.raises(OutputError, match="HDFS cannot be reached from here.*libhdfs"):
        OffsetStore("hdfs://namenode:8020/warehouse")
