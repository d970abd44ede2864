"""LeaderEpochCache: the (epoch, start offset) entries of a partition, their
file, and the answers a leader and a follower take from them, checked
against a brute-force model of "which epoch appended the byte at offset x"."""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from unittest import mock

import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.storage.leader_epochs import LEADER_EPOCH_FILE, LeaderEpochCache


def written(directory) -> list[list[int]] | None:
    """The entries in the file, or None when there is no file."""
    path = os.path.join(directory, LEADER_EPOCH_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["epochs"]


def cache_of(directory, entries) -> LeaderEpochCache:
    cache = LeaderEpochCache(str(directory))
    for epoch, start in entries:
        cache.assign(epoch, start)
    assert cache.entries == list(entries)
    return cache


# ---------------------------------------------------------------- the brute-force model

def epoch_at(entries, offset: int) -> int:
    """The epoch whose leader appended the byte at ``offset`` (-1: none known)."""
    found = -1
    for epoch, start in entries:
        if start <= offset:
            found = epoch
    return found


def model_end_offset_for(entries, epoch: int, log_end: int) -> tuple[int, int]:
    found = max((e for e, _s in entries if e <= epoch), default=-1)
    end = min((s for e, s in entries if e > epoch), default=log_end)
    return found, end


# ---------------------------------------------------------------- the file

def test_a_new_cache_is_empty_and_writes_no_file(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.entries == [] and cache.latest_epoch == -1 and cache.latest_start == -1
    cache.truncate_from_end(0)
    cache.truncate_from_start(100)
    cache.clear()
    assert os.listdir(tmp_path) == []          # an unreplicated log leaves no file


def test_assign_persists_and_a_new_cache_loads_it(tmp_path):
    cache = cache_of(tmp_path, [(1, 0), (3, 120)])
    assert written(tmp_path) == [[1, 0], [3, 120]]
    assert not os.path.exists(os.path.join(tmp_path, LEADER_EPOCH_FILE + ".tmp"))
    again = LeaderEpochCache(str(tmp_path))
    assert again.entries == [(1, 0), (3, 120)]
    assert (again.latest_epoch, again.latest_start) == (3, 120)
    assert cache.entries is not cache.entries   # a copy each time


def test_assign_of_a_known_epoch_changes_nothing(tmp_path):
    cache = cache_of(tmp_path, [(2, 0), (5, 50)])
    before = os.stat(os.path.join(tmp_path, LEADER_EPOCH_FILE)).st_mtime_ns
    cache.assign(5, 80)
    cache.assign(4, 999)
    cache.assign(3, 10)                       # even with a start that would be invalid
    assert cache.entries == [(2, 0), (5, 50)]
    assert os.stat(os.path.join(tmp_path, LEADER_EPOCH_FILE)).st_mtime_ns == before


def test_an_epoch_cannot_start_before_the_latest(tmp_path):
    cache = cache_of(tmp_path, [(2, 100)])
    with pytest.raises(ValueError, match="before epoch 2"):
        cache.assign(3, 99)
    assert cache.entries == [(2, 100)] and written(tmp_path) == [[2, 100]]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_an_epoch_that_appended_nothing_is_replaced(tmp_path):
    cache = cache_of(tmp_path, [(1, 0), (2, 40)])
    cache.assign(4, 40)                       # epoch 2's leader appended nothing
    assert cache.entries == [(1, 0), (4, 40)] and written(tmp_path) == [[1, 0], [4, 40]]


@pytest.mark.parametrize("content", [
    "not json",
    "[]",
    '{"epochs": 3}',
    '{"epochs": [[1]]}',
    '{"epochs": [[1, "0"]]}',
    '{"epochs": [[1, true]]}',
    '{"epochs": [[2, 0], [2, 10]]}',          # epochs not increasing
    '{"epochs": [[1, 10], [2, 10]]}',         # starts not increasing
    '{"epochs": [[1, -5]]}',
])
def test_an_unreadable_file_is_logged_and_the_cache_starts_empty(tmp_path, caplog, content):
    with open(os.path.join(tmp_path, LEADER_EPOCH_FILE), "w") as f:
        f.write(content)
    with caplog.at_level(logging.WARNING, logger="broker.storage.leader_epochs"):
        cache = LeaderEpochCache(str(tmp_path))
    assert cache.entries == []
    assert any(LEADER_EPOCH_FILE in r.getMessage() for r in caplog.records)
    cache.assign(7, 0)                        # the next change replaces the bad file
    assert written(tmp_path) == [[7, 0]]


def test_clear_removes_the_file(tmp_path):
    cache = cache_of(tmp_path, [(1, 0)])
    with open(os.path.join(tmp_path, LEADER_EPOCH_FILE + ".tmp"), "w") as f:
        f.write("{")                          # a crash's leftover
    cache.clear()
    assert cache.entries == [] and os.listdir(tmp_path) == []
    assert LeaderEpochCache(str(tmp_path)).entries == []


def test_a_failed_write_changes_nothing(tmp_path):
    cache = cache_of(tmp_path, [(1, 0)])
    with mock.patch("broker.storage.leader_epochs.write_json_atomically",
                    side_effect=OSError(28, "No space left on device")):
        with pytest.raises(OSError):
            cache.assign(2, 10)
        with pytest.raises(OSError):
            cache.truncate_from_end(0)
    assert cache.entries == [(1, 0)] and written(tmp_path) == [[1, 0]]


# ---------------------------------------------------------------- answers

@pytest.mark.parametrize("epoch, expected", [
    (0, (-1, 0)),         # below every entry: the first start
    (1, (1, 100)),        # the following epoch's start (epoch 2 is unknown here)
    (2, (1, 100)),        # KIP-279: found epoch 1, which ends where 3 starts
    (3, (3, 250)),
    (4, (3, 250)),
    (5, (5, 400)),        # the latest: the log end
    (9, (5, 400)),
])
def test_end_offset_for(tmp_path, epoch, expected):
    cache = cache_of(tmp_path, [(1, 0), (3, 100), (5, 250)])
    assert cache.end_offset_for(epoch, 400) == expected


def test_end_offset_for_an_empty_cache_is_the_log_end(tmp_path):
    assert LeaderEpochCache(str(tmp_path)).end_offset_for(3, 77) == (-1, 77)


def test_truncate_from_end_drops_epochs_starting_at_or_after(tmp_path):
    cache = cache_of(tmp_path, [(1, 0), (3, 100), (5, 250)])
    cache.truncate_from_end(300)
    assert cache.entries == [(1, 0), (3, 100), (5, 250)]
    cache.truncate_from_end(250)
    assert cache.entries == [(1, 0), (3, 100)] and written(tmp_path) == [[1, 0], [3, 100]]
    cache.truncate_from_end(0)
    assert cache.entries == [] and written(tmp_path) == []


def test_truncate_from_start_keeps_the_epoch_in_force(tmp_path):
    cache = cache_of(tmp_path, [(1, 0), (3, 100), (5, 250)])
    cache.truncate_from_start(0)
    assert written(tmp_path) == [[1, 0], [3, 100], [5, 250]]
    cache.truncate_from_start(150)
    assert cache.entries == [(3, 150), (5, 250)]
    cache.truncate_from_start(250)
    assert cache.entries == [(5, 250)]
    cache.truncate_from_start(900)
    assert cache.entries == [(5, 900)] and written(tmp_path) == [[5, 900]]


def test_truncate_from_start_below_every_epoch_changes_nothing(tmp_path):
    cache = cache_of(tmp_path, [(4, 500)])
    cache.truncate_from_start(200)
    assert cache.entries == [(4, 500)]


def test_overlapping(tmp_path):
    cache = cache_of(tmp_path, [(1, 100), (3, 200), (5, 300)])
    assert cache.overlapping(0, 100) == []                 # before any epoch
    assert cache.overlapping(0, 101) == [(1, 100)]
    assert cache.overlapping(150, 200) == [(1, 100)]
    assert cache.overlapping(150, 201) == [(1, 100), (3, 200)]
    assert cache.overlapping(200, 250) == [(3, 200)]
    assert cache.overlapping(250, 1000) == [(3, 200), (5, 300)]
    assert cache.overlapping(400, 500) == [(5, 300)]
    assert cache.overlapping(250, 250) == []


# ---------------------------------------------------------------- properties

def epoch_lists():
    """Valid entries: strictly increasing epochs and starts."""
    return st.lists(st.tuples(st.integers(0, 3), st.integers(1, 60)), max_size=6).map(
        lambda steps: _accumulate(steps))


def _accumulate(steps):
    entries, epoch, start = [], -1, -1
    for d_epoch, d_start in steps:
        epoch += d_epoch + 1
        start += d_start
        entries.append((epoch, start))
    return entries


@settings(max_examples=300, deadline=None)
@given(entries=epoch_lists(), epoch=st.integers(-1, 25), log_extra=st.integers(0, 50))
def test_end_offset_for_agrees_with_the_model(tmp_path_factory, entries, epoch, log_extra):
    cache = cache_of(tmp_path_factory.mktemp("e"), entries)
    log_end = (entries[-1][1] if entries else 0) + log_extra
    found, end = cache.end_offset_for(epoch, log_end)
    assert (found, end) == model_end_offset_for(entries, epoch, log_end)
    # What KIP-101 relies on: every byte below ``end`` (and at or after the
    # found epoch's start) was appended by an epoch <= ``epoch``, and the byte
    # at ``end`` (if any) by a later one.
    for x in range(0, end):
        assert epoch_at(entries, x) <= epoch or epoch_at(entries, x) == -1
    if end < log_end:
        assert epoch_at(entries, end) > epoch


@settings(max_examples=300, deadline=None)
@given(entries=epoch_lists(), start=st.integers(0, 400), length=st.integers(0, 100))
def test_overlapping_is_the_epochs_of_the_bytes(tmp_path_factory, entries, start, length):
    cache = cache_of(tmp_path_factory.mktemp("o"), entries)
    got = cache.overlapping(start, start + length)
    assert got == [e for e in entries if e in got]          # entries as recorded, in order
    epochs = {epoch_at(entries, x) for x in range(start, start + length)} - {-1}
    assert [e for e, _s in got] == sorted(epochs)


class EpochCacheMachine(RuleBasedStateMachine):
    """Random assigns and truncations against a model list, reopening the
    file now and then: the cache, the file and the model always agree, and
    the truncations keep the epoch of every byte they keep."""

    @initialize()
    def start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="samsa-epochs-")
        self.cache = LeaderEpochCache(self.dir)
        self.model: list[tuple[int, int]] = []
        self.log_end = 0
        self.earliest = 0

    def teardown(self) -> None:
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(bump=st.integers(0, 3), appended=st.integers(0, 40))
    def assign(self, bump: int, appended: int) -> None:
        # a leader elected at the log end, then appending
        epoch = max(e for e, _s in self.model) + 1 + bump if self.model else bump
        start = self.log_end
        if self.model and self.model[-1][1] == start:
            self.model.pop()
        self.model.append((epoch, start))
        self.cache.assign(epoch, start)
        self.log_end += appended

    @rule(epoch=st.integers(0, 30))
    def assign_a_known_epoch(self, epoch: int) -> None:
        if epoch <= self.cache.latest_epoch:
            self.cache.assign(epoch, self.log_end)

    @rule(cut=st.integers(0, 60))
    def truncate_from_end(self, cut: int) -> None:
        offset = max(self.earliest, self.log_end - cut)
        before = [epoch_at(self.model, x) for x in range(self.earliest, offset)]
        self.cache.truncate_from_end(offset)
        self.model = [(e, s) for e, s in self.model if s < offset]
        self.log_end = offset
        assert [epoch_at(self.model, x) for x in range(self.earliest, offset)] == before

    @rule(moved=st.integers(0, 60))
    def truncate_from_start(self, moved: int) -> None:
        offset = min(self.log_end, self.earliest + moved)
        before = [epoch_at(self.model, x) for x in range(offset, self.log_end)]
        self.cache.truncate_from_start(offset)
        in_force = [(e, s) for e, s in self.model if s <= offset][-1:]
        self.model = [(e, offset) for e, _s in in_force] + [
            (e, s) for e, s in self.model if s > offset]
        self.earliest = offset
        assert [epoch_at(self.model, x) for x in range(offset, self.log_end)] == before

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def truncate_at_an_epoch_start(self, data) -> None:
        """The boundaries are where off-by-one mistakes live."""
        start = data.draw(st.sampled_from([s for _e, s in self.model]))
        if data.draw(st.booleans(), label="from the end"):
            self.truncate_from_end(self.log_end - start)
        else:
            self.truncate_from_start(start - self.earliest)

    @precondition(lambda self: self.log_end > 0)
    @rule()
    def clear(self) -> None:
        self.cache.clear()
        self.model = []
        self.earliest = self.log_end = 0

    @rule()
    def reopen(self) -> None:
        self.cache = LeaderEpochCache(self.dir)

    @invariant()
    def agrees_with_the_model_and_the_file(self) -> None:
        if not hasattr(self, "cache"):
            return
        assert self.cache.entries == self.model
        for (e0, s0), (e1, s1) in zip(self.model, self.model[1:]):
            assert e0 < e1 and s0 < s1
        on_disk = written(self.dir)
        if on_disk is None:
            assert self.model == []
        else:
            assert [tuple(e) for e in on_disk] == self.model
        for epoch in range(-1, (self.model[-1][0] + 2) if self.model else 2):
            assert self.cache.end_offset_for(epoch, self.log_end) == \
                model_end_offset_for(self.model, epoch, self.log_end)


EpochCacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                               deadline=None)
test_epoch_cache_machine = EpochCacheMachine.TestCase
