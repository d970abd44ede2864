"""``python -m broker.tools http-users``: the users file of the HTTP services
(docs/security.md, "HTTP services"), as an operator runs it."""
from __future__ import annotations

import os

from broker.service_kit import http_security as hs
from broker_helpers import run_module


def tool(*args: str, stdin: bytes | None = None):
    out = run_module("broker.tools", "http-users", *args, stdin=stdin)
    return out.returncode, out.stdout.decode(), out.stderr.decode()


def test_add_replace_list_remove(tmp_path):
    users = str(tmp_path / "users")
    assert tool("add", "alice", "--role", "read", "--password-stdin", "--iterations", "10000",
                "--file", users, stdin=b"first\n") == (0, "user alice created (read)\n", "")
    password = tmp_path / "pw"
    password.write_text("second\r\n")
    assert tool("add", "alice", "--role", "admin", "--password-file", str(password),
                "--iterations", "10000", "--file", users)[:2] == \
        (0, "user alice replaced (admin)\n")
    assert tool("add", "CN=Samsa Prometheus,O=samsa", "--role", "read", "--certificate",
                "--file", users)[0] == 0
    assert tool("list", "--file", users)[:2] == (
        0, "CN=Samsa Prometheus,O=samsa read certificate\nalice admin password\n")
    read = hs.read_users_file(users)
    assert hs.password_matches("second", read["alice"].secret)
    assert not hs.password_matches("first", read["alice"].secret)
    assert "second" not in open(users).read()
    assert os.stat(users).st_mode & 0o777 == 0o600
    assert tool("remove", "alice", "--file", users)[:2] == (0, "user alice removed\n")
    code, _, err = tool("remove", "alice", "--file", users)
    assert code == 1 and f"no user 'alice' in {users}" in err
    assert tool("list", "--file", users)[1] == "CN=Samsa Prometheus,O=samsa read certificate\n"


def test_bad_usage_is_refused_and_changes_nothing(tmp_path):
    users = str(tmp_path / "users")
    code, _, err = tool("add", "bob", "--role", "read", "--file", users)
    assert code == 2 and "never the password on the command line" in err
    code, _, err = tool("add", "bob", "--password-stdin", "--file", users, stdin=b"x\n")
    assert code == 2 and "needs --role" in err
    code, _, err = tool("add", "b:ob", "--role", "read", "--password-stdin", "--file", users,
                        stdin=b"x\n")
    assert code == 2 and "no ':'" in err
    code, _, err = tool("add", "bob", "--role", "read", "--password-stdin", "--file", users,
                        stdin=b"\n")
    assert code == 2 and "the password is empty" in err
    code, _, err = tool("add", "bob", "--role", "read", "--password-stdin", "--iterations",
                        "100", "--file", users, stdin=b"x\n")
    assert code == 2 and "at least 10000" in err
    code, _, err = tool("list", "bob", "--file", users)
    assert code == 2 and "takes no NAME" in err
    assert not os.path.exists(users)
    open(users, "w").write("bob superuser certificate\n")
    code, _, err = tool("list", "--file", users)
    assert code == 1 and "line 1: role 'superuser'" in err


def test_a_name_the_file_would_read_as_a_comment_is_refused(tmp_path):
    users = str(tmp_path / "users")
    code, _, err = tool("add", "#bob", "--role", "read", "--certificate", "--file", users)
    assert code == 2 and "no '#' first" in err
    assert not os.path.exists(users)
