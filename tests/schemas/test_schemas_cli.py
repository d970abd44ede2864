"""python -m schemas, as a user runs it (a file registry, and a real ZooKeeper)."""
from __future__ import annotations

import json
import subprocess
import sys


def schemas(*args: str, registry: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "schemas"]
    if registry:
        cmd += ["--registry", registry]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=60)


def test_help_and_shipped():
    out = schemas("--help")
    assert out.returncode == 0 and "register" in out.stdout and "zookeeper://" in out.stdout
    shipped = schemas("shipped").stdout
    assert "samsa.events.PageViewEvent   (topic page_views)" in shipped
    assert "samsa.audit.MonitoringEvent   (topic _audit)" in shipped


def test_register_check_list_show(tmp_path):
    reg = f"file:{tmp_path / 'registry.json'}"
    done = schemas("register", "page_views", "samsa.events.PageViewEvent", registry=reg)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("page_views: version 1, id ")
    v2_file = tmp_path / "pv2.avsc"
    v2_file.write_text(open("schemas/avsc/samsa.events.PageViewEvent.v2.avsc").read())
    assert schemas("check", "page_views", str(v2_file), registry=reg).stdout == \
        "compatible (BACKWARD)\n"
    assert schemas("register", "page_views", str(v2_file), registry=reg).returncode == 0

    breaking = json.loads(v2_file.read_text())
    breaking["fields"].append({"name": "locale", "type": "string"})
    bad_file = tmp_path / "pv3.avsc"
    bad_file.write_text(json.dumps(breaking))
    check = schemas("check", "page_views", str(bad_file), registry=reg)
    assert check.returncode == 1 and "incompatible (BACKWARD)" in check.stdout
    refused = schemas("register", "page_views", str(bad_file), registry=reg)
    assert refused.returncode == 1
    assert "refused" in refused.stderr and "/locale" in refused.stderr

    listed = json.loads(schemas("list", "page_views", "--json", registry=reg).stdout)
    assert [v["version"] for v in listed["versions"]] == [1, 2]
    shown = schemas("show", "page_views", "--version", "1", registry=reg)
    # stdout is the schema alone, ready for a file; which one it is, on stderr
    first = listed["versions"][0]["id"]
    assert json.loads(shown.stdout) == json.loads(schemas("show", "--id", str(first),
                                                          registry=reg).stdout)
    assert shown.stderr == f"// page_views version 1, id {first}\n"
    by_id = json.loads(schemas("show", "--id", str(listed["versions"][1]["id"]),
                               registry=reg).stdout)
    assert by_id["fields"][-1]["name"] == "session_id"
    assert schemas("config", "page_views", "FULL", registry=reg).stdout == "FULL\n"


def test_errors_have_their_exit_status(tmp_path):
    reg = f"file:{tmp_path / 'registry.json'}"
    # reading a registry file that is not there: a mistyped path, not an empty registry
    for command in (["list"], ["show", "page_views"], ["config", "page_views"]):
        missing = schemas(*command, registry=reg)
        assert missing.returncode == 3, command
        assert missing.stderr == f"error: no registry file at {tmp_path / 'registry.json'} " \
                                 f"(register a schema, or run bootstrap, to create one)\n"
    assert schemas("register", "page_views", "samsa.events.PageViewEvent",
                   registry=reg).returncode == 0
    unknown = schemas("show", "nothing", registry=reg)
    assert unknown.returncode == 2 and "no subject 'nothing'" in unknown.stderr
    bad_schema = tmp_path / "bad.avsc"
    bad_schema.write_text('{"type": "record", "name": "R"}')
    out = schemas("register", "x", str(bad_schema), registry=reg)
    assert out.returncode == 2 and "error:" in out.stderr
    down = schemas("--timeout", "1", "list", registry="zookeeper://127.0.0.1:1")
    assert down.returncode == 3 and "cannot reach ZooKeeper" in down.stderr


def test_bootstrap_and_sync_between_two_clusters(zookeeper, zk_chroot):
    dc_a = f"zookeeper://{zookeeper.connect_string(zk_chroot + '/dc-a')}"
    analysis = f"zookeeper://{zookeeper.connect_string(zk_chroot + '/analysis')}"
    boot = schemas("bootstrap", registry=dc_a)
    assert boot.returncode == 0, boot.stderr
    assert len(boot.stdout.splitlines()) == 5
    synced = schemas("sync", "--to", analysis, registry=dc_a)
    assert synced.returncode == 0 and synced.stdout.endswith("5 change(s)\n")
    a = json.loads(schemas("list", "--json", registry=dc_a).stdout)
    b = json.loads(schemas("list", "--json", registry=analysis).stdout)
    assert a == b and {row["subject"] for row in a} == {
        "page_views", "searches", "logins", "service_calls", "_audit"}


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_bad_files_are_one_clear_line(tmp_path):
    reg = f"file:{tmp_path / 'registry.json'}"
    unknown = tmp_path / "unknown.avsc"
    unknown.write_text('{"type": "record", "name": "R", "fields": '
                       '[{"name": "a", "type": "nosuch"}]}')
    done = schemas("register", "x", str(unknown), registry=reg)
    assert done.returncode == 2
    assert one_line(done) == (f"error: {unknown}: unknown type 'nosuch': neither an Avro type "
                              "nor a named type defined before it (in the file, or shipped)")
    unknown.write_text('{"type": "nosuchtype"}')
    done = schemas("check", "x", str(unknown), registry=reg)
    assert done.returncode == 2 and "unknown type 'nosuchtype'" in one_line(done)

    missing = tmp_path / "missing.avsc"
    done = schemas("register", "x", str(missing), registry=reg)
    assert done.returncode == 2
    assert one_line(done) == f"error: {missing}: No such file or directory"

    # a registry file where none can be written: the store's status, 3
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    done = schemas("register", "x", "samsa.events.PageViewEvent",
                   registry=f"file:{blocked / 'registry.json'}")
    assert done.returncode == 3
    # (a registration reads the subject first: the file is not there to read)
    assert one_line(done).startswith(f"error: cannot read the schema registry file "
                                     f"{blocked / 'registry.json'}: ")
