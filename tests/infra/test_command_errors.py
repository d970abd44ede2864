"""The infra commands when there is nothing to act on, as a script meets
them: ``infra.render`` given no environment or a broken one (one line,
exit 2), ``infra.local.pipeline down`` and ``infra.local down`` with nothing
running (they say so, exit 0)."""
from __future__ import annotations

import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=60, check=False)


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_render_of_a_directory_without_a_topology(tmp_path):
    for check in ([], ["--check"]):
        done = run("infra.render", *check, str(tmp_path / "nowhere"))
        assert done.returncode == 2
        line = one_error_line(done)
        assert f"cannot render {tmp_path / 'nowhere'}" in line and "topology.toml" in line
        assert "No such file or directory" in line
    assert not (tmp_path / "nowhere").exists()          # nothing written


def test_render_of_an_invalid_topology(tmp_path):
    (tmp_path / "topology.toml").write_text("base_port = 29000\nno_such_setting = 1\n")
    done = run("infra.render", "--check", str(tmp_path))
    assert done.returncode == 2
    assert "no_such_setting" in one_error_line(done)
    (tmp_path / "topology.toml").write_text("base_port = [\n")
    done = run("infra.render", str(tmp_path))
    assert done.returncode == 2
    assert "is not valid TOML" in one_error_line(done)
    assert not (tmp_path / "rendered").exists()


def test_pipeline_down_with_nothing_running_says_so(tmp_path):
    done = run("infra.local.pipeline", "down", "--dir", str(tmp_path / "never-started"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"[demo] nothing to stop: no pipeline in {tmp_path}/never-started\n"
    # a state directory left by a demo that is no longer running
    (tmp_path / "old-demo" / "audit").mkdir(parents=True)
    done = run("infra.local.pipeline", "down", "--dir", str(tmp_path / "old-demo"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("[demo] nothing to stop: no process of the pipeline in "
                           f"{tmp_path}/old-demo was running\n")
    assert done.stderr == ""


def test_lab_down_with_nothing_running_says_so(tmp_path):
    done = run("infra.local", "down", "--dir", str(tmp_path / "no-lab"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"no lab in {tmp_path}/no-lab: nothing to stop\n"
