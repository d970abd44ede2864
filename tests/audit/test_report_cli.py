"""python -m audit report and db when the database is not there to answer:
one line on stderr and exit 3, never the traceback nor the 1 that means a
loss (a cron job must not page anyone about lost data for a database down)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from broker_helpers import unused_port


def audit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "audit", *args], capture_output=True,
                          text=True, timeout=60, check=False)


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["report"], ["db", "upgrade"]], ids=" ".join)
def test_a_database_that_refuses_is_exit_3(command):
    port = unused_port()
    done = audit(*command, "--db", f"postgresql+psycopg://samsa@127.0.0.1:{port}/audit")
    assert done.returncode == 3, done.stderr
    line = one_line(done)
    assert line.startswith(f"error: cannot reach the audit database at "
                           f"postgresql+psycopg://samsa@127.0.0.1:{port}/audit: ")
    assert "refused" in line
    assert done.stdout == ""


def test_a_database_file_that_cannot_be_opened_is_exit_3(tmp_path):
    done = audit("report", "--data-dir", str(tmp_path / "no" / "such" / "dir"))
    assert done.returncode == 3, done.stderr
    assert "unable to open database file" in one_line(done)


def test_a_bad_url_is_bad_usage():
    done = audit("report", "--db", "nosuchdialect://x/y")
    assert done.returncode == 2, done.stderr
    assert one_line(done).startswith("error: bad database URL 'nosuchdialect://x/y'")


def test_an_empty_database_is_still_bad_usage(tmp_path):
    done = audit("report", "--data-dir", str(tmp_path))
    assert done.returncode == 2
    assert "no audit database at sqlite:///" in one_line(done)


def test_the_help_says_what_each_status_means():
    helped = audit("report", "--help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "1 a window lost messages" in text
    assert "3 the database cannot be reached or opened" in text
