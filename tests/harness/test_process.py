"""broker.service_kit.process: the one way the project starts, awaits and stops
its child processes (brokers, ZooKeeper, the lab, the benchmarks' peers)."""
from __future__ import annotations

import signal
import sys
import time

import pytest

from broker.service_kit.process import (
    ProcessStartError,
    SupervisedProcess,
    group_cpu_seconds,
    group_members,
    proc_stat,
    wait_until,
)


def bash(tmp_path, script: str, name: str = "job") -> SupervisedProcess:
    return SupervisedProcess(name, ["bash", "-c", script], str(tmp_path / f"{name}.log"))


def test_ready_by_output_line_and_the_log_keeps_everything(tmp_path):
    proc = bash(tmp_path, "echo warming up; echo READY port=4242; exec sleep 60")
    seen: list[bytes] = []

    def ready(line: bytes) -> bool:
        seen.append(line)
        return line.startswith(b"READY")

    proc.start(ready_line=ready)
    try:
        proc.wait_ready(10)
        assert seen == [b"warming up\n", b"READY port=4242\n"]
        assert proc.is_running()
        assert proc_stat(proc.pid).pgid == proc.pid      # a session of its own
    finally:
        assert proc.stop(5) == -signal.SIGTERM
    log = proc.read_log()
    assert log.splitlines()[0].startswith("----- job started at ")
    assert "warming up\nREADY port=4242\n" in log
    assert proc.stop_notes == []


def test_ready_by_callable(tmp_path):
    flag = tmp_path / "flag"
    proc = bash(tmp_path, f"sleep 0.2; touch {flag}; exec sleep 60").start()
    try:
        proc.wait_ready(10, ready=flag.exists)
        assert flag.exists() and proc.is_running()
    finally:
        proc.stop(5)


def test_a_process_that_exits_before_it_is_ready_fails_the_start_with_its_log(tmp_path):
    proc = bash(tmp_path, "echo cannot bind port 1 >&2; exit 3")
    proc.start(ready_line=lambda line: b"READY" in line)
    with pytest.raises(ProcessStartError) as err:
        proc.wait_ready(10)
    assert "exited with status 3 before it was ready" in str(err.value)
    assert "cannot bind port 1" in str(err.value)


def test_output_that_ends_without_the_ready_line_is_no_readiness(tmp_path):
    # the reader marks the end of the output before the process has exited:
    # that was taken for readiness when the exit came a moment later
    proc = bash(tmp_path, "echo going; exec >&- 2>&-; sleep 0.3; exit 3")
    proc.start(ready_line=lambda line: b"READY" in line)
    with pytest.raises(ProcessStartError, match="exited with status 3 before it was ready"):
        proc.wait_ready(10)


def test_a_process_not_ready_in_time_is_killed(tmp_path):
    proc = bash(tmp_path, "exec sleep 60").start()
    with pytest.raises(ProcessStartError, match="was not ready after 0 s"):
        proc.wait_ready(0.3, ready=lambda: False)
    assert not proc.is_running() and group_members(proc.pid) == []


def test_stop_reaches_the_whole_group(tmp_path):
    proc = bash(tmp_path, "sleep 60 & sleep 60 & wait").start()
    assert wait_until(lambda: len(group_members(proc.pid)) >= 3, 5)
    proc.stop(5)
    assert group_members(proc.pid) == []
    assert proc.returncode is not None
    assert proc.stop(5) == proc.returncode       # twice is fine


@pytest.mark.slow
def test_stop_kills_what_ignores_sigterm(tmp_path):
    proc = bash(tmp_path, "trap '' TERM; sleep 60 & wait").start()
    assert wait_until(lambda: len(group_members(proc.pid)) >= 2, 5)
    t0 = time.monotonic()
    proc.stop(timeout=0.5)
    assert group_members(proc.pid) == []
    assert any("SIGKILL" in note for note in proc.stop_notes), proc.stop_notes
    assert time.monotonic() - t0 < 15


def test_stop_uses_the_polite_stop_then_cleans_up_the_group(tmp_path):
    proc = bash(tmp_path, "trap 'exit 0' USR1; sleep 60 & wait").start()
    assert wait_until(lambda: len(group_members(proc.pid)) >= 2, 5)
    assert proc.stop(5, polite=lambda: proc.send_signal(signal.SIGUSR1)) == 0
    assert group_members(proc.pid) == []
    # the leader left politely; its orphaned sleep needed the group signal
    assert any("SIGTERM" in note for note in proc.stop_notes), proc.stop_notes
    assert not any("still running" in note for note in proc.stop_notes)


def test_a_failing_polite_stop_goes_on_the_hard_way(tmp_path):
    proc = bash(tmp_path, "exec sleep 60").start()

    def broken() -> None:
        raise OSError("rabbitmqctl: not found")

    proc.stop(0.2, polite=broken)
    assert not proc.is_running()
    assert any("polite stop failed: rabbitmqctl: not found" in n for n in proc.stop_notes)


def test_kill_is_a_crash_of_the_group_and_a_restart_appends_to_the_log(tmp_path):
    proc = bash(tmp_path, "echo run; sleep 60 & wait")
    proc.start(ready_line=lambda line: line == b"run\n").wait_ready(10)
    first = proc.pid
    proc.kill()
    assert proc.returncode == -signal.SIGKILL and group_members(first) == []
    proc.start(ready_line=lambda line: line == b"run\n").wait_ready(10)
    assert proc.pid != first
    proc.stop(5)
    assert proc.read_log().count("----- job started at") == 2
    assert proc.read_log().count("run\n") == 2


def test_a_restart_gets_a_fresh_ready_event(tmp_path):
    """The first run's output reader must not make the second run ready."""
    proc = bash(tmp_path, "echo READY; exec sleep 60")
    proc.start(ready_line=lambda line: b"READY" in line).wait_ready(10)
    proc.stop(5)
    proc.command = ["bash", "-c", "exec sleep 60"]
    proc.start(ready_line=lambda line: b"READY" in line)
    with pytest.raises(ProcessStartError, match="not ready"):
        proc.wait_ready(0.5)


def test_group_cpu_seconds_of_a_busy_group(tmp_path):
    proc = SupervisedProcess("busy", [sys.executable, "-c",
                                      "import time\nt=time.process_time()\n"
                                      "while time.process_time()-t<0.3: pass\n"
                                      "print('done', flush=True)\ntime.sleep(30)"],
                             str(tmp_path / "busy.log"))
    proc.start(ready_line=lambda line: line == b"done\n")
    try:
        proc.wait_ready(20)
        assert group_cpu_seconds(proc.pid) >= 0.25
    finally:
        proc.stop(5)
    assert group_cpu_seconds(proc.pid) == 0


def test_tail_log_is_the_end_of_the_log(tmp_path):
    proc = bash(tmp_path, "for i in $(seq 1 100); do echo line $i; done")
    proc.start()
    assert proc.wait(10) == 0
    assert proc.tail_log(3) == "line 98\nline 99\nline 100\n"
    assert proc.exit_status() == "exited with status 0"
