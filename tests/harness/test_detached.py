"""broker/service_kit/detached.py: the one way the lab, the local daemon and
the local Airflow keep a detached process in a state file, tell whether it
is still theirs and alive, and stop it (SIGTERM, then SIGKILL, to its whole
group)."""
from __future__ import annotations

import dataclasses
import json
import signal

import pytest

from broker.service_kit import detached
from broker.service_kit.detached import DetachedProcess
from broker.service_kit.process import SupervisedProcess, group_members, wait_until


def start(tmp_path, script: str, name: str = "job") -> tuple[SupervisedProcess, DetachedProcess]:
    proc = SupervisedProcess(name, ["bash", "-c", script], str(tmp_path / f"{name}.log")).start()
    return proc, DetachedProcess.of(proc)


def test_the_record_survives_its_state_file_and_finds_the_process_again(tmp_path):
    proc, record = start(tmp_path, "exec sleep 60")
    try:
        path = str(tmp_path / "state.json")
        detached.write_state(path, [record], runtime="processes")
        assert not (tmp_path / "state.json.tmp").exists()
        fields, (again,) = detached.read_state(path)
        assert fields == {"runtime": "processes"}
        assert again == record and again.alive()
        assert record.command == ["bash", "-c", "exec sleep 60"]
        assert record.log == str(tmp_path / "job.log")
    finally:
        proc.kill()
    assert not record.alive()
    assert detached.read_state(str(tmp_path / "none.json")) is None


def test_a_subclass_keeps_its_fields_and_an_unreadable_file_says_so(tmp_path):
    @dataclasses.dataclass(kw_only=True)
    class Labelled(DetachedProcess):
        role: str
        ports: dict = dataclasses.field(default_factory=dict)

    record = Labelled(name="b", pid=1, start_ticks=-1, command=[], log="b.log", role="broker",
                      ports={"port": 9092})
    path = tmp_path / "state.json"
    detached.write_state(str(path), [record])
    assert detached.read_state(str(path), Labelled)[1] == [record]
    path.write_text("{not json")
    with pytest.raises(detached.StateFileError, match="unreadable state file"):
        detached.read_state(str(path))


def test_a_pid_with_another_start_time_is_not_ours(tmp_path):
    proc, record = start(tmp_path, "exec sleep 60")
    try:
        stranger = dataclasses.replace(record, start_ticks=record.start_ticks - 1)
        assert not stranger.alive() and stranger.leftovers() == []
        stranger.signal(signal.SIGKILL)             # not ours: nothing is sent
        assert proc.poll() is None and record.alive()
    finally:
        proc.kill()


def test_stop_terms_the_whole_group(tmp_path):
    proc, record = start(tmp_path, "sleep 60 & sleep 60 & wait")
    assert wait_until(lambda: len(group_members(record.pid)) == 3, 5)
    assert detached.stop([record], timeout=10) == []
    assert group_members(record.pid) == [] and not record.alive()
    assert proc.wait(5) == -signal.SIGTERM


def test_stop_kills_a_group_that_ignores_sigterm(tmp_path):
    proc, record = start(tmp_path, "trap '' TERM; (trap '' TERM; exec sleep 60) & "
                                   "echo TRAP''PED; wait")    # the log's header holds the command
    assert wait_until(lambda: "TRAPPED" in proc.read_log(), 5)
    assert detached.stop([record], timeout=0.5) == []
    assert group_members(record.pid) == []
    assert proc.wait(5) == -signal.SIGKILL


def test_what_a_gone_leader_left_in_its_group_is_still_stopped(tmp_path):
    proc, record = start(tmp_path, "sleep 60 & echo LEFT''OVER; exit 0")
    assert wait_until(lambda: proc.poll() is not None, 5)       # the leader is gone
    (left,) = record.leftovers()
    assert left != record.pid and not record.alive()
    assert detached.stop([record], timeout=10) == []
    assert record.leftovers() == [] and group_members(record.pid) == []


def test_stop_delivers_through_the_given_sender(tmp_path):
    procs = [start(tmp_path, "exec sleep 60", f"job-{i}") for i in range(2)]
    sent = []

    def send(record, sig):
        sent.append((record.name, sig))
        record.signal(sig)

    assert detached.stop([r for _, r in procs], timeout=10, send=send) == []
    assert sent == [("job-0", signal.SIGTERM), ("job-1", signal.SIGTERM)]
    assert json.dumps([r.to_json() for _, r in procs])      # records stay plain data
