"""A real S3 server on loopback for tests: Ceph's RADOS gateway (``radosgw``)
on a one-node Ceph cluster, every daemon a plain child process (no
containers, no systemd), every file in one directory of the caller's.

    os.environ.update(CephS3.client_env())      # before making any S3 client
    with CephS3().start(tmp_path / "ceph") as s3:
        fs = pyarrow.fs.S3FileSystem(**s3.pyarrow_options())
        client = boto3.client("s3", **s3.boto3_options())

What it runs (Debian 12's Ceph 16.2.15 "pacific": ``apt-get install
--no-install-recommends ceph-mon ceph-osd radosgw ceph-common``, 57 packages,
about 60 MB to download, 264 MB installed; no ceph-mgr):

* one monitor, ``ceph-mon -f``, msgr2 only, on ``127.0.0.1:<mon_port>``;
* one OSD, ``ceph-osd -f``, with the ``memstore`` object store by default:
  objects live in the OSD's memory (no block device, nothing on disk), so
  its RSS grows with what is stored (256 MiB stored: about 470 MB). Past
  85% of ``capacity_bytes`` (1 GiB) the health says "nearfull"; past 95%
  the pools are marked full and a PUT hangs, with no error, as on a full
  real cluster (the mark lags the writes by a few seconds).
  ``objectstore="bluestore"`` puts the objects in a sparse file
  ``osd/ceph-0/block`` of ``capacity_bytes`` instead (start about 5.5 s, the
  mkfs being most of it);
* one gateway, ``radosgw -f``, beast frontend on ``127.0.0.1:<rgw_port>``;
  it makes its realm, zone group, zone and pools ("default") itself;
* one S3 user, made by ``radosgw-admin user create`` with the given keys
  (random ones by default).

No manager daemon: I/O does not need one. ``ceph -s`` then says "no active
mgr" and shows no PG states, and commands a manager serves (``ceph df``,
``ceph osd df``) never answer. Cluster authentication is ``none`` (any local
process may talk to the monitor); S3 requests are still signed and checked
against the user's keys.

``start`` waits on real conditions, not fixed sleeps: the monitor's admin
socket says "leader", the OSD's says "active", and radosgw itself listens on
its port and answers HTTP. Measured on this project's 2-core machine: about
1.1 s to a ready gateway and user, 1.4 s to a first PUT (bucket creation
included; median of three bring-ups); ``stop`` 0.15-0.4 s; RSS at rest
about 35 MB (mon) + 50 MB (OSD) + 45 MB (gateway).

Limits and what clients need:

* Ceph 16's gateway does not understand the streaming "aws-chunked" uploads
  with trailing checksums that newer AWS SDKs send by default: pyarrow 26's
  bundled SDK does for UploadPart (every Parquet write), and the gateway
  answers 411 MissingContentLength. ``client_env()`` holds
  ``AWS_REQUEST_CHECKSUM_CALCULATION=when_required``, which the SDK reads
  when a client is made: set it before making the ``S3FileSystem``.
* pyarrow 26's ``S3FileSystem()`` ignores AWS_ENDPOINT_URL: give it
  ``endpoint_override`` (``pyarrow_options()``), or a URI with the endpoint
  in its query (``pyarrow_uri()``, for ``FileSystem.from_uri``).
* pyarrow creates and deletes buckets only with ``allow_bucket_creation`` /
  ``allow_bucket_deletion`` (``pyarrow_options()`` sets both); bucket names
  follow S3's rules (3 to 63 characters).
* Path-style addressing only (no ``rgw_dns_name``); plain HTTP; region
  "us-east-1" is accepted. Lifecycle rules are stored but never applied
  (the lifecycle threads are off: they made SIGTERM take 4.5 s).
* Nothing survives ``stop``: ``start`` wants an absent or empty directory.
* The daemons run as the calling user (root here: Ceph daemons started as
  root stay root unless given ``--setuser``), die with the thread that
  started them (PR_SET_PDEATHSIG: start them from one that lives as long as
  they do, such as the main thread), and write only under the directory.
  Their admin sockets live in ``<directory>/run``: a directory longer than
  about 75 characters would pass the 108-byte Unix socket path limit, and
  ``start`` refuses it.
* Ports: the monitor's and the gateway's are picked at random below the
  kernel's ephemeral range (a port taken before a daemon binds it makes
  ``start`` begin again on new ones); the OSD's come from Ceph's own range,
  6800-7300, first free.
"""
from __future__ import annotations

import ctypes
import json
import os
import random
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

#: What to install for the commands this module runs.
DEBIAN_PACKAGES = ("ceph-mon", "ceph-osd", "radosgw", "ceph-common")
INSTALL_HINT = ("apt-get install --no-install-recommends " + " ".join(DEBIAN_PACKAGES))
#: Each command this module runs and the Debian package that carries it.
COMMANDS = {
    "ceph-mon": "ceph-mon",
    "ceph-osd": "ceph-osd",
    "radosgw": "radosgw",
    "radosgw-admin": "ceph-common",
    "ceph": "ceph-common",
    "monmaptool": "ceph-base (a dependency of ceph-mon)",
}
#: Environment for S3 clients of Ceph 16's gateway (see the module docstring).
CLIENT_ENV = {"AWS_REQUEST_CHECKSUM_CALCULATION": "when_required"}
REGION = "us-east-1"
MON_ID = "a"
RGW_NAME = "client.rgw.s3"
UNIX_PATH_MAX = 107


class CephS3Error(RuntimeError):
    """A command is missing, or a daemon did not start (the message holds
    the end of its log)."""


def find_commands() -> dict[str, str]:
    """Every command's path, or CephS3Error naming the packages to install."""
    found, missing = {}, []
    for command, package in COMMANDS.items():
        path = shutil.which(command) or next(
            (p for p in (f"/usr/bin/{command}", f"/usr/sbin/{command}") if os.access(p, os.X_OK)),
            None)
        if path is None:
            missing.append(f"{command} (Debian package {package})")
        else:
            found[command] = path
    if missing:
        raise CephS3Error("Ceph's S3 gateway needs " + ", ".join(missing) +
                          f": install them as root with `{INSTALL_HINT}`")
    return found


def missing_commands() -> str:
    """Why this machine cannot run CephS3, or "" if it can (for skips)."""
    try:
        find_commands()
    except CephS3Error as error:
        return str(error)
    return ""


def free_port(avoid: tuple[int, ...] = ()) -> int:
    """A port free on 127.0.0.1 now, at random below the kernel's ephemeral
    range (where outgoing connections take their source ports, so that
    only a deliberate bind can take it before the daemon binds it; the
    policy of broker/service_kit/ports.py)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(10_000, max(low, 11_000))
        if port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise CephS3Error("no free port found on 127.0.0.1 between 10000 and the ephemeral range")


def render_conf(directory: Path, fsid: str, mon_port: int, rgw_port: int,
                capacity_bytes: int, objectstore: str = "memstore") -> str:
    """ceph.conf for the one-node cluster; each setting says why it is there."""
    d = directory
    if objectstore == "memstore":
        store = f"""\
osd objectstore = memstore
memstore device bytes = {capacity_bytes}"""
    elif objectstore == "bluestore":
        store = f"""\
osd objectstore = bluestore
# a sparse file osd/ceph-0/block (100 GiB by default), made by --mkfs
bluestore block size = {capacity_bytes}
bluestore fsck on mkfs = false
# 4 GiB by default; the caches shrink toward it
osd memory target = 1073741824"""
    else:
        raise ValueError(f"objectstore {objectstore!r}: memstore or bluestore")
    return f"""\
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
# everything on loopback, msgr2 only (else every daemon also binds a v1 port)
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr1 = false
# no keyrings; radosgw otherwise defaults to cephx and to "secure" mon
# connections, which auth none cannot give (it then retries -13 forever)
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
# nothing written outside the directory
run dir = {d}/run
crash dir = {d}/crash
log file = {d}/log/$name.log
mon cluster log file = {d}/log/$cluster.$channel.log
admin socket = {d}/run/$name.$pid.asok
# one OSD: pools of one replica. min size 1 is what is needed (with the
# defaults, 3 and 2, no PG is ever active and radosgw hangs at start); size 1
# spares PGs that are "undersized" for ever
osd pool default size = 1
osd pool default min size = 1
# 7 pools of 32 PGs by default (224, near mon_max_pg_per_osd 250); 8 is plenty
osd pool default pg num = 8
osd pool default pgp num = 8
# health only: a pool of one replica is what is wanted here
mon warn on pool no redundancy = false
# health only: auth none has no global_id to reclaim
mon warn on insecure global id reclaim allowed = false
# every pool radosgw makes waits for monitor proposals (1 s apart by default:
# 12.7 s to a ready gateway instead of 1.1 s): propose at once
paxos propose interval = 0.01
# the host's disk, not this cluster's: no "low on available space" warning, and
# the monitor must not shut itself down when the disk has under 5% free
mon data avail warn = 1
mon data avail crit = 0

[mon]
mon data = {d}/mon/$cluster-$id
admin socket = {d}/run/$name.asok

[osd]
osd data = {d}/osd/$cluster-$id
admin socket = {d}/run/$name.asok
{store}
# CRUSH weight 1 whatever the capacity (a tiny memstore would weigh ~0)
osd crush initial weight = 1

[{RGW_NAME}]
admin socket = {d}/run/$name.asok
rgw data = {d}/rgw
# without TCP_NODELAY a small GET or LIST waits ~40 ms (Nagle and delayed ACK)
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
# beast's default: 512 threads
rgw thread pool size = 16
# the lifecycle workers sleep in 5 s steps and SIGTERM waits for them
rgw enable lc threads = false
"""


def admin_socket(path: str, prefix: str, timeout: float = 2.0) -> dict:
    """One command on a daemon's admin socket (Ceph's protocol: JSON and a
    NUL; the answer is a 4-byte big-endian length and JSON)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(json.dumps({"prefix": prefix, "format": "json"}).encode() + b"\0")
        header = b""
        while len(header) < 4:
            chunk = s.recv(4 - len(header))
            if not chunk:
                raise OSError("admin socket closed")
            header += chunk
        (length,) = struct.unpack(">I", header)
        body = b""
        while len(body) < length:
            chunk = s.recv(length - len(body))
            if not chunk:
                raise OSError("admin socket closed")
            body += chunk
    return json.loads(body or b"{}")


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on 127.0.0.1:``port``
    (read from /proc: its network namespace's table and its descriptors)."""
    try:
        with open(f"/proc/{pid}/net/tcp") as table:
            rows = [line.split() for line in table.readlines()[1:]]
        inodes = {row[9] for row in rows
                  if row[3] == "0A" and row[1] == f"0100007F:{port:04X}"}
        if not inodes:
            return False
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in inodes:
                return True
    except OSError:
        pass
    return False


# looked up once, in the parent: a library load in the forked child could
# deadlock on a lock another thread of the parent held at the fork
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: a daemon gets SIGTERM when the thread that started it
    # ends (start the daemons from a thread that lives as long as they do:
    # the test's main thread), so a test run killed by a timeout leaves no
    # Ceph behind; a parent gone before the call: exit at once
    parent = os.getppid()
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class CephS3:
    """A one-node Ceph with its S3 gateway; ``start`` it in an empty
    directory, ``stop`` it (or use it as a context manager)."""

    def __init__(self, access_key: str | None = None, secret_key: str | None = None,
                 user: str = "samsa", rgw_port: int | None = None, mon_port: int | None = None,
                 capacity_bytes: int = 1 << 30, objectstore: str = "memstore",
                 start_timeout: float = 90.0, stop_timeout: float = 10.0) -> None:
        self.access_key = access_key or "SAMSA" + secrets.token_hex(8).upper()
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.user = user
        self.rgw_port = rgw_port
        self.mon_port = mon_port
        self.capacity_bytes = capacity_bytes
        self.objectstore = objectstore
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.directory: Path | None = None
        self.conf: Path | None = None
        self.fsid = ""
        self.processes: dict[str, subprocess.Popen] = {}
        self.timings: dict[str, float] = {}
        self._commands: dict[str, str] = {}
        self._logs: list = []

    # -- what clients need ------------------------------------------------
    @property
    def endpoint(self) -> str:
        """host:port, as pyarrow's ``endpoint_override`` wants it."""
        return f"127.0.0.1:{self.rgw_port}"

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.endpoint}"

    @staticmethod
    def client_env() -> dict[str, str]:
        """Set these in os.environ before making an S3 client (module docstring)."""
        return dict(CLIENT_ENV)

    def aws_env(self) -> dict[str, str]:
        """The usual AWS environment for clients that take their settings
        from it: keys, region, no instance-metadata lookups, and
        ``client_env()``. Not the endpoint: pyarrow 26's ``S3FileSystem()``
        ignores AWS_ENDPOINT_URL (it went to amazonaws.com when tried), so
        pass ``endpoint_override`` or use ``pyarrow_uri``."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true", **CLIENT_ENV}

    def pyarrow_uri(self, path: str) -> str:
        """``s3://path`` with this endpoint in its query, for
        ``pyarrow.fs.FileSystem.from_uri`` (keys from ``aws_env()``)."""
        return (f"s3://{path.lstrip('/')}?endpoint_override={self.endpoint}&scheme=http"
                f"&region={REGION}")

    def pyarrow_options(self) -> dict:
        """Keyword arguments for pyarrow.fs.S3FileSystem."""
        return {"access_key": self.access_key, "secret_key": self.secret_key,
                "endpoint_override": self.endpoint, "scheme": "http", "region": REGION,
                "allow_bucket_creation": True, "allow_bucket_deletion": True}

    def boto3_options(self) -> dict:
        """Keyword arguments for boto3.client("s3", ...)."""
        return {"endpoint_url": self.endpoint_url, "aws_access_key_id": self.access_key,
                "aws_secret_access_key": self.secret_key, "region_name": REGION}

    # -- running it -------------------------------------------------------
    def start(self, directory: str | os.PathLike) -> "CephS3":
        """Make the cluster in ``directory`` (absent or empty) and start it;
        returns when the gateway answers and the user exists."""
        self._commands = find_commands()
        directory = Path(directory).absolute()
        if directory.exists() and any(directory.iterdir()):
            raise CephS3Error(f"{directory} is not empty: CephS3 makes a new cluster each time")
        longest = f"{directory}/run/{RGW_NAME}.asok"
        if len(longest) > UNIX_PATH_MAX:
            raise CephS3Error(f"{directory} is too long: Ceph's admin socket {longest} would "
                              f"exceed the {UNIX_PATH_MAX}-byte Unix socket path limit")
        self.directory = directory
        chosen = (self.mon_port, self.rgw_port)
        for attempt in range(3):
            self.mon_port = chosen[0] or free_port()
            self.rgw_port = chosen[1] or free_port(avoid=(self.mon_port,))
            try:
                self._bring_up()
                return self
            except BaseException as error:
                self.stop()
                # a port picked here was taken before the daemon bound it
                # (ceph-mon: "unable to bind", radosgw: "failed to bind"):
                # a new cluster on new ports (a retried radosgw alone would
                # leave its dead twin's watches, which stall the next
                # notify for 30 s)
                if not (isinstance(error, CephS3Error) and "to bind" in str(error)
                        and None in chosen and attempt < 2):
                    raise
                for entry in directory.iterdir():
                    if entry.is_dir():
                        shutil.rmtree(entry)
                    else:
                        entry.unlink()
        raise AssertionError("unreachable")

    def _bring_up(self) -> None:
        for sub in ("run", "log", "crash", "rgw", f"mon/ceph-{MON_ID}", "osd/ceph-0"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        self.fsid = str(uuid.uuid4())
        self.conf = self.directory / "ceph.conf"
        self.conf.write_text(render_conf(self.directory, self.fsid, self.mon_port,
                                         self.rgw_port, self.capacity_bytes, self.objectstore))
        began = time.monotonic()
        deadline = began + self.start_timeout
        self.timings = {}
        self._start_mon(self.fsid, deadline)
        self._mark("mon", began)
        self._start_osd(deadline)
        self._mark("osd", began)
        self._start_rgw(deadline)
        self._mark("rgw", began)
        self._run("radosgw-admin", "user", "create", f"--uid={self.user}",
                  f"--display-name={self.user}", f"--access-key={self.access_key}",
                  f"--secret-key={self.secret_key}")
        self._mark("user", began)

    def stop(self) -> None:
        """SIGTERM to each daemon in turn, the gateway first and the monitor
        last (each takes under 0.3 s so; all at once, the gateway and the OSD
        wait about 5 s for a monitor that is gone), SIGKILL to one still
        running after ``stop_timeout``; the directory stays (its logs)."""
        for name in reversed(list(self.processes)):
            process = self.processes[name]
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> "CephS3":
        if not self.processes:
            raise CephS3Error("call start(directory) first: `with CephS3().start(d) as s3:`")
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.processes.items() if p.poll() is None}

    def ceph(self, *args: str, timeout: float = 30.0) -> str:
        """A ``ceph`` command on this cluster (e.g. "-s", "osd", "pool", "ls");
        its output. Monitor commands only: there is no manager."""
        return self._run("ceph", *args, timeout=timeout)

    # -- steps --------------------------------------------------------------
    def _start_mon(self, fsid: str, deadline: float) -> None:
        monmap = self.directory / "monmap"
        self._run("monmaptool", "--create", "--fsid", fsid, "--addv", MON_ID,
                  f"[v2:127.0.0.1:{self.mon_port}]", str(monmap))
        self._run("ceph-mon", "--mkfs", "-i", MON_ID, "--monmap", str(monmap))
        self._daemon("mon", "ceph-mon", "-f", "-i", MON_ID)
        sock = str(self.directory / "run" / f"mon.{MON_ID}.asok")
        self._wait("mon", deadline, lambda: self._asok_field(sock, "mon_status", "state")
                   == "leader", "the monitor to be leader")

    def _start_osd(self, deadline: float) -> None:
        osd_uuid = str(uuid.uuid4())
        osd_id = self._run("ceph", "osd", "new", osd_uuid).strip()
        if osd_id != "0":
            raise CephS3Error(f"`ceph osd new` gave id {osd_id!r}, expected 0")
        self._run("ceph-osd", "--mkfs", "-i", "0", "--osd-uuid", osd_uuid)
        self._daemon("osd", "ceph-osd", "-f", "-i", "0")
        sock = str(self.directory / "run" / "osd.0.asok")
        self._wait("osd", deadline, lambda: self._asok_field(sock, "status", "state")
                   == "active", "the OSD to be active (booted and up in the OSD map)")

    def _start_rgw(self, deadline: float) -> None:
        self._daemon("rgw", "radosgw", "-f", "-n", RGW_NAME)
        self._wait("rgw", deadline, self._rgw_answers, f"the gateway to answer on {self.endpoint}")

    # -- helpers ------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        # /usr/bin/ceph is Debian's python3 with python3-rados: keep a caller's
        # virtualenv's Python settings away from it
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "PYTHONHOME", "CEPH_ARGS", "CEPH_CONF")}
        env.pop("VIRTUAL_ENV", None)
        return env

    def _argv(self, command: str, *args: str) -> list[str]:
        return [self._commands[command], "-c", str(self.conf), *args]

    def _run(self, command: str, *args: str, timeout: float = 60.0) -> str:
        argv = self._argv(command, *args)
        if command == "ceph":
            argv[3:3] = ["--connect-timeout", "15"]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, env=self._env(),
                                    timeout=timeout, cwd=self.directory)
        except subprocess.TimeoutExpired:
            raise CephS3Error(f"{' '.join(argv)} gave no answer in {timeout:.0f} s (commands "
                              f"that a manager serves, such as `ceph df` or `ceph osd df`, "
                              f"wait forever: this cluster has no ceph-mgr)") from None
        if result.returncode != 0:
            raise CephS3Error(f"{' '.join(argv)} exited {result.returncode}:\n"
                              f"{result.stdout}{result.stderr}")
        return result.stdout

    def _daemon(self, name: str, command: str, *args: str) -> None:
        log = open(self.directory / "log" / f"{name}.out", "ab")
        self._logs.append(log)
        self.processes[name] = subprocess.Popen(
            self._argv(command, *args), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, env=self._env(), cwd=self.directory,
            start_new_session=True, preexec_fn=_die_with_parent)

    def _asok_field(self, sock: str, prefix: str, field: str):
        try:
            return admin_socket(sock, prefix).get(field)
        except (OSError, ValueError):
            return None

    def _rgw_answers(self) -> bool:
        # the port must be radosgw's own (another server may hold it) ...
        if not listens(self.processes["rgw"].pid, self.rgw_port):
            return False
        # ... and its frontend must serve
        try:
            with urllib.request.urlopen(self.endpoint_url + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True          # any HTTP answer: the frontend serves
        except OSError:
            return False

    def _wait(self, name: str, deadline: float, condition, what: str) -> None:
        process = self.processes[name]
        delay = 0.02
        while True:
            if process.poll() is not None:
                raise CephS3Error(f"{name} exited {process.returncode} while waiting for {what}; "
                                  f"its log ends:\n{self._daemon_log(name)}")
            if condition():
                return
            if time.monotonic() > deadline:
                raise CephS3Error(f"timed out ({self.start_timeout:.0f} s) waiting for {what}; "
                                  f"{name}'s log ends:\n{self._daemon_log(name)}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _daemon_log(self, name: str) -> str:
        files = {"mon": f"mon.{MON_ID}", "osd": "osd.0", "rgw": RGW_NAME}
        log = self.directory / "log"
        return (_tail(log / f"{files[name]}.log") + "\n--- stdout/stderr:\n" +
                _tail(log / f"{name}.out", 10))

    def _mark(self, step: str, began: float) -> None:
        self.timings[step] = round(time.monotonic() - began, 3)
