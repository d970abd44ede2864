"""Run real ZooKeeper servers as Java processes (for the tests, the demo and the lab).

A ``ZooKeeperEnsemble`` of size 1 is a standalone server; of size 3 (or any
odd size) it is a quorum. Each member gets a directory of its own
(``<dir>/zk-<id>/``) holding its ``zoo.cfg``, its ``data/`` (with ``myid`` in
an ensemble) and its ``server.log``, free ports on ``host`` (a client port
and, in an ensemble, a quorum and an election port), and is started as

    java -Xmx256m -Dzookeeper.admin.enableServer=false
         -Dzookeeper.4lw.commands.whitelist=* -cp <jars>
         org.apache.zookeeper.server.quorum.QuorumPeerMain zoo.cfg

in a process group of its own, so stopping it leaves nothing behind.
``QuorumPeerMain`` runs a config without ``server.N`` lines as a standalone
server, so one command serves both shapes.

Readiness is asked of the servers themselves with four-letter words: a
member is up when ``ruok`` answers ``imok`` *and* ``srvr`` names its mode
(``ruok`` alone answers ``imok`` while a quorum member is still electing and
serves nobody); an ensemble is up when every running member is leader or
follower and exactly one is leader.

Where the jars come from (first found wins):

1. ``$SAMSA_ZOOKEEPER_CLASSPATH``, used as given;
2. Debian's package (``apt-get install zookeeper``; the jar lives in
   ``libzookeeper-java``): ``/usr/share/java/zookeeper.jar``, whose manifest
   ``Class-Path`` names its dependencies (netty, jute, slf4j-api, ...), plus
   ``slf4j-simple.jar`` so the server's log is written at all;
3. the jars of an installed pyspark wheel (``pyspark/jars/*``: ZooKeeper,
   jute, netty, slf4j and log4j2, configured by the ``log4j2.properties``
   written next to each ``zoo.cfg``).

Ports not given are free_ports() of broker/service_kit/ports.py (outside
the ephemeral range). This module never picks a fixed port, never writes
outside the directories it is given (or the temporary one it made), and
never leaves a process it started running after ``stop()``.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from broker.service_kit.ports import NoFreePorts, free_ports
from broker.service_kit.process import SupervisedProcess, read_from, tail

DEBIAN_JAVA_DIR = "/usr/share/java"
CLASSPATH_ENV = "SAMSA_ZOOKEEPER_CLASSPATH"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

#: Modes ``srvr`` reports for a member that serves clients.
SERVING_MODES = ("standalone", "leader", "follower", "observer")

INSTALL_HINT = (
    "install Debian's ZooKeeper (`apt-get install zookeeper`, which `make setup` does "
    "as root) or pyspark in this Python environment (`pip install pyspark`, whose "
    f"wheel carries the jars), or set {CLASSPATH_ENV} to a Java classpath holding "
    "ZooKeeper's server and its dependencies")

_LOG4J2_PROPERTIES = """\
# Read only when log4j2 is the slf4j backend (pyspark's jars); Debian's
# classpath logs through slf4j-simple and ignores this file.
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} [%t] %-5p %c{1} - %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""


class ZooKeeperError(RuntimeError):
    """ZooKeeper could not be run here."""


class ZooKeeperNotFoundError(ZooKeeperError):
    """Java or ZooKeeper's jars are missing; the message says what to install."""


class ZooKeeperStartError(ZooKeeperError):
    """A server did not come up in time; the message carries its log's tail."""


# --------------------------------------------------------------------------- discovery

def _pyspark_jars_dir() -> str | None:
    # find_spec locates the package without importing it (pyspark's import is slow)
    try:
        spec = importlib.util.find_spec("pyspark")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        jars = os.path.join(location, "jars")
        if os.path.isdir(jars):
            return jars
    return None


def find_classpath(java_dir: str = DEBIAN_JAVA_DIR,
                   pyspark_jars: str | None = None,
                   environ: dict[str, str] | None = None) -> str:
    """The Java classpath that runs a ZooKeeper server, or ZooKeeperNotFoundError.

    ``java_dir`` is where Debian puts jars; ``pyspark_jars`` is a pyspark
    ``jars`` directory (by default the installed pyspark's, if any).
    """
    environ = os.environ if environ is None else environ
    if environ.get(CLASSPATH_ENV):
        return environ[CLASSPATH_ENV]
    debian_jar = os.path.join(java_dir, "zookeeper.jar")
    if os.path.isfile(debian_jar):
        # the jar's manifest Class-Path brings its dependencies; slf4j-api alone
        # logs nothing (a "NOP logger" warning), so add the simple backend;
        # the manifest also leaves out netty's codec, which the Netty
        # connection factory of a TLS port needs (same package as the rest)
        parts = [debian_jar]
        for extra in ("netty-codec.jar", "slf4j-simple.jar"):
            if os.path.isfile(os.path.join(java_dir, extra)):
                parts.append(os.path.join(java_dir, extra))
        return os.pathsep.join(parts)
    jars = pyspark_jars if pyspark_jars is not None else _pyspark_jars_dir()
    if jars and glob.glob(os.path.join(jars, "zookeeper-[0-9]*.jar")):
        return os.path.join(jars, "*")     # java expands the wildcard itself
    raise ZooKeeperNotFoundError(
        f"ZooKeeper's jars were not found (no {debian_jar}, no pyspark/jars/zookeeper-*.jar): "
        + INSTALL_HINT)


def find_java(java: str | None = None) -> str:
    """The ``java`` executable to run, or ZooKeeperNotFoundError."""
    path = shutil.which(java or os.environ.get("JAVA", "java"))
    if path is None:
        raise ZooKeeperNotFoundError(
            "`java` was not found: install a Java runtime "
            "(`apt-get install openjdk-17-jre-headless`, which `make setup` does as root)")
    return path


# --------------------------------------------------------------------------- probes

def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0,
                     tls: ssl.SSLContext | None = None) -> str:
    """Send a four-letter word (``ruok``, ``srvr``, ``mntr``, ...) and return the
    whole answer; OSError when nothing listens or the answer is cut off.
    ``tls``: a client context, for a TLS client port (ZooKeeper's Netty
    factory answers the words there too)."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        sock = tls.wrap_socket(raw, server_hostname=host) if tls else raw
        sock.sendall(word.encode("ascii"))
        chunks = []
        while True:          # the server closes the connection after its answer
            chunk = sock.recv(4096)
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def server_mode(host: str, port: int, timeout: float = 1.0,
                tls: ssl.SSLContext | None = None) -> str | None:
    """The ``Mode:`` ``srvr`` reports (``standalone``, ``leader``, ``follower``...),
    or None while the server is up but not serving (electing, syncing) or down."""
    try:
        if four_letter_word(host, port, "ruok", timeout, tls) != "imok":
            return None
        answer = four_letter_word(host, port, "srvr", timeout, tls)
    except OSError:         # ssl.SSLError among them
        return None
    match = re.search(r"^Mode: (\S+)", answer, re.MULTILINE)
    return match.group(1) if match else None


# --------------------------------------------------------------------------- TLS

@dataclass(frozen=True)
class ZooKeeperServerTls:
    """A TLS client port on every member (ZooKeeper's ``secureClientPort``,
    served by its Netty connection factory), beside the plaintext one (a
    migration) or instead of it (``plaintext=False``).

    * ``cert_file``/``key_file``: the servers' certificate and key (PEM; the
      key PKCS#8, as broker/security/ca.py writes it), joined into the PEM
      key store ZooKeeper reads;
    * ``ca_file``: the authorities of clients' certificates (ZooKeeper's
      trust store, PEM);
    * ``client_auth``: ``need`` (a client certificate or no connection),
      ``want`` or ``none``;
    * ``probe_cert_file``/``probe_key_file``: the certificate the harness's
      own probes (``ruok``, ``srvr``) present on a TLS-only server that
      needs one;
    * ``quorum``: the members of an ensemble speak TLS to each other too
      (``sslQuorum``: the quorum and election ports, the same key store;
      each member presents its certificate and checks the other's against
      its address, or the name the address resolves back to).
    """
    cert_file: str
    key_file: str
    ca_file: str
    client_auth: str = "need"
    plaintext: bool = True
    probe_cert_file: str = ""
    probe_key_file: str = ""
    quorum: bool = False

    def __post_init__(self) -> None:
        if self.client_auth not in ("need", "want", "none"):
            raise ValueError(f"client_auth is need, want or none, not {self.client_auth!r}")

    def probe_context(self) -> ssl.SSLContext:
        """The client context of the harness's probes."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.probe_cert_file:
            context.load_cert_chain(self.probe_cert_file, self.probe_key_file)
        return context

    def write_key_store(self, path: str) -> str:
        """The key and certificate joined into the PEM key store ZooKeeper
        reads, written to ``path`` (the owner's alone); returns ``path``."""
        with open(self.key_file) as key, open(self.cert_file) as cert:
            text = key.read() + cert.read()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)          # an older file's mode
        return path

    def settings(self, key_store: str, host: str, port: int) -> dict[str, object]:
        """The zoo.cfg lines of a member's TLS port (ZooKeeper makes its
        unknown keys system properties ``zookeeper.<key>``)."""
        return {"secureClientPort": port, "secureClientPortAddress": host,
                "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
                "ssl.keyStore.location": key_store, "ssl.keyStore.type": "PEM",
                "ssl.trustStore.location": self.ca_file, "ssl.trustStore.type": "PEM",
                "ssl.clientAuth": self.client_auth}

    def quorum_settings(self, key_store: str) -> dict[str, object]:
        """The zoo.cfg lines of TLS between the members (``quorum``)."""
        return {"sslQuorum": "true",
                "ssl.quorum.keyStore.location": key_store, "ssl.quorum.keyStore.type": "PEM",
                "ssl.quorum.trustStore.location": self.ca_file,
                "ssl.quorum.trustStore.type": "PEM"}


# --------------------------------------------------------------------------- one server

@dataclass
class ZooKeeperServer:
    """One ZooKeeper process: its config, ports, directory and log.

    Not thread-safe: one thread drives a server (the ensemble does).
    """
    server_id: int
    directory: str
    host: str
    client_port: int
    quorum_port: int | None = None      # None for a standalone server
    election_port: int | None = None
    secure_port: int | None = None      # the TLS client port, when there is one
    tls: ZooKeeperServerTls | None = None
    process: SupervisedProcess | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """host:port of the plaintext client port (the TLS one on a TLS-only server)."""
        if self.tls is not None and not self.tls.plaintext:
            return self.secure_address
        return f"{self.host}:{self.client_port}"

    @property
    def secure_address(self) -> str:
        return f"{self.host}:{self.secure_port}"

    def _probe(self) -> tuple[int, ssl.SSLContext | None]:
        """The port and context the probes use: plaintext where there is one."""
        if self.tls is not None and not self.tls.plaintext:
            return self.secure_port, self.tls.probe_context()
        return self.client_port, None

    @property
    def config_path(self) -> str:
        return os.path.join(self.directory, "zoo.cfg")

    @property
    def data_dir(self) -> str:
        return os.path.join(self.directory, "data")

    @property
    def log_path(self) -> str:
        return os.path.join(self.directory, "server.log")

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.process.proc if self.process is not None else None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.is_running()

    def mode(self, timeout: float = 1.0) -> str | None:
        """See server_mode(); None as well when the process is not running."""
        if not self.is_running():
            return None
        port, tls = self._probe()
        return server_mode(self.host, port, timeout, tls)

    def four_letter_word(self, word: str, timeout: float = 1.0) -> str:
        port, tls = self._probe()
        return four_letter_word(self.host, port, word, timeout, tls)

    def write_config(self, settings: dict[str, object], server_lines: list[str]) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        lines = [f"{key}={value}" for key, value in settings.items()]
        lines.append(f"dataDir={self.data_dir}")
        if self.tls is None or self.tls.plaintext:
            lines += [f"clientPort={self.client_port}", f"clientPortAddress={self.host}"]
        if self.tls is not None:
            key_store = self.tls.write_key_store(os.path.join(self.directory, "key-store.pem"))
            lines += [f"{key}={value}" for key, value in
                      self.tls.settings(key_store, self.host, self.secure_port).items()]
            if self.tls.quorum and server_lines:
                lines += [f"{key}={value}" for key, value in
                          self.tls.quorum_settings(key_store).items()]
        lines += server_lines
        with open(self.config_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        if server_lines:
            with open(os.path.join(self.data_dir, "myid"), "w") as f:
                f.write(f"{self.server_id}\n")
        with open(os.path.join(self.directory, "log4j2.properties"), "w") as f:
            f.write(_LOG4J2_PROPERTIES)

    def command(self, java: str, classpath: str, jvm_args: list[str]) -> list[str]:
        return [java, *jvm_args,
                f"-Dlog4j2.configurationFile={os.path.join(self.directory, 'log4j2.properties')}",
                "-cp", classpath, MAIN_CLASS, self.config_path]

    def launch(self, java: str, classpath: str, jvm_args: list[str]) -> None:
        """Start the process (not waiting for it to serve); the log is appended to."""
        if self.is_running():
            return
        self.process = SupervisedProcess(f"ZooKeeper server {self.server_id}",
                                         self.command(java, classpath, jvm_args),
                                         self.log_path, cwd=self.directory)
        self.process.start()

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the process group, wait, SIGKILL if it is still there.
        Returns the exit status (None if it was never started)."""
        self.terminate()
        return self.wait_stopped(timeout)

    def terminate(self) -> None:
        """Send SIGTERM to the process group, not waiting (see wait_stopped())."""
        if self.process is not None:
            self.process.stop_notes = []
            self.process.terminate()

    def wait_stopped(self, timeout: float = 10.0) -> int | None:
        """Wait for the process to end; SIGKILL it after ``timeout``."""
        return self.process.wait_stopped(timeout) if self.process is not None else None

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed that was not already."""
        if self.process is not None:
            self.process.kill()

    def log_size(self) -> int:
        return os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0

    def read_log(self, start: int = 0) -> str:
        """The log from byte ``start`` on (see log_size())."""
        return read_from(self.log_path, start)

    def tail_log(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)


# --------------------------------------------------------------------------- ensemble

class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers on ``host``: 1 is standalone, 3 a quorum.

    Members are indexed 0..size-1 in ``servers`` (their ZooKeeper ids are
    index + 1). ``start()`` starts every member that is not running and waits
    until the ensemble serves; ``kill(i)``/``restart(i)`` act on one member
    for fault tests; ``stop()`` ends them all. Use it as a context manager.

    Arguments (all but ``size`` and ``directory`` keyword-only):

    * ``size`` (1): members; 1 runs standalone, an odd number >= 3 a quorum.
    * ``directory`` (None): where the members' ``zk-<id>/`` directories go; a
      directory given is reused as it is (its data survive from an earlier
      run). None makes a temporary one, removed by ``stop()`` unless
      ``keep_directory`` (False); a failed start keeps it, for its logs.
    * ``host`` ("127.0.0.1"): the address every port is bound on (the lab
      may give each data center an address of its own).
    * ``client_ports`` / ``peer_ports`` (None): fixed ports instead of free
      ones picked now (the lab's topology names its ports): one client port
      per member, and in a quorum one (quorum, election) pair per member.
    * ``tick_time_ms`` (200): ZooKeeper's tick. Short, so elections, syncs and
      session expiry are quick; the lowest session timeout is 2 ticks.
    * ``max_session_timeout_ms`` (120000): raised because the default, 20
      ticks (4 s here), would silently cut every client's session timeout.
    * ``heap`` ("256m"): the JVM's -Xmx.
    * ``classpath`` (found by find_classpath()), ``java`` (``$JAVA`` or
      ``java`` on the PATH).
    * ``settings`` ({}): extra or overriding zoo.cfg lines, e.g.
      {"syncLimit": 5}; ``jvm_args`` ([]): extra JVM options, after ours.
    * ``tls`` (None): a TLS client port on every member (ZooKeeperServerTls),
      beside the plaintext one (a port of its own) or alone (on the client
      port); ``connect_string(tls=True)`` names them.

    Not thread-safe: drive an ensemble from one thread.
    """

    def __init__(self, size: int = 1, directory: str | None = None, *,
                 host: str = "127.0.0.1",
                 client_ports: list[int] | None = None,
                 peer_ports: list[tuple[int, int]] | None = None,
                 tick_time_ms: int = 200,
                 max_session_timeout_ms: int = 120_000,
                 heap: str = "256m",
                 classpath: str | None = None,
                 java: str | None = None,
                 settings: dict[str, object] | None = None,
                 jvm_args: list[str] | None = None,
                 keep_directory: bool = False,
                 tls: ZooKeeperServerTls | None = None) -> None:
        if size < 1:
            raise ValueError(f"an ensemble has at least one server, not {size}")
        self.size = size
        self.host = host
        self.classpath = classpath or find_classpath()
        self.java = find_java(java)
        self._made_directory = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="samsa-zookeeper-")
        self.keep_directory = keep_directory
        self.tls = tls
        self.settings: dict[str, object] = {
            "tickTime": tick_time_ms,
            "initLimit": 50,          # ticks a follower has to connect and sync
            "syncLimit": 10,          # ticks a follower may lag before it is dropped
            "maxSessionTimeout": max_session_timeout_ms,
            "4lw.commands.whitelist": "*",
            "admin.enableServer": "false",   # it would take port 8080
        }
        self.settings.update(settings or {})
        self.jvm_args = [
            f"-Xmx{heap}",
            "-XX:+UseSerialGC",       # two cores here: no parallel GC threads per server
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            # an electing member re-polls peers that are not up yet with a backoff
            # doubling up to 60 s by default: cap it, so a member whose JVM
            # starts late (a slow machine, a restart) is found within a second
            "-Dzookeeper.fastleader.maxNotificationInterval=1000",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",    # slf4j-simple (Debian)
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            *(jvm_args or []),
        ]
        self.servers = self._plan_servers(client_ports, peer_ports)

    def _plan_servers(self, client_ports: list[int] | None,
                      peer_ports: list[tuple[int, int]] | None) -> list[ZooKeeperServer]:
        quorum = self.size > 1
        if client_ports is not None and len(client_ports) != self.size:
            raise ValueError(f"{self.size} members need {self.size} client ports, "
                             f"not {list(client_ports)}")
        if quorum and peer_ports is not None and len(peer_ports) != self.size:
            raise ValueError(f"{self.size} members need {self.size} (quorum, election) "
                             f"port pairs, not {list(peer_ports)}")
        # a TLS-only member serves TLS on its client port; one with both,
        # TLS on a port of its own
        tls_port_apart = self.tls is not None and self.tls.plaintext
        wanted = ((0 if client_ports is not None else self.size)
                  + (2 * self.size if quorum and peer_ports is None else 0)
                  + (self.size if tls_port_apart else 0))
        try:
            free = iter(free_ports(wanted, self.host) if wanted else [])
        except NoFreePorts as exc:
            raise ZooKeeperError(str(exc)) from None
        clients = list(client_ports) if client_ports is not None else \
            [next(free) for _ in range(self.size)]
        peers = (list(peer_ports) if peer_ports is not None else
                 [(next(free), next(free)) for _ in range(self.size)]) if quorum else []
        secure = ([next(free) for _ in range(self.size)] if tls_port_apart else
                  clients if self.tls is not None else [])
        servers = []
        for i in range(self.size):
            servers.append(ZooKeeperServer(
                server_id=i + 1,
                directory=os.path.join(self.directory, f"zk-{i + 1}"),
                host=self.host,
                client_port=clients[i],
                quorum_port=peers[i][0] if quorum else None,
                election_port=peers[i][1] if quorum else None,
                secure_port=secure[i] if secure else None, tls=self.tls))
        server_lines = ([f"server.{s.server_id}={s.host}:{s.quorum_port}:{s.election_port}"
                         for s in servers] if quorum else [])
        for server in servers:
            os.makedirs(server.directory, exist_ok=True)
            server.write_config(self.settings, server_lines)
        return servers

    # ---- addresses

    def connect_string(self, chroot: str | None = None, tls: bool = False) -> str:
        """``"127.0.0.1:p1,127.0.0.1:p2,.../chroot"`` (every member, running or
        not); ``tls``: their TLS client ports."""
        hosts = ",".join(server.secure_address if tls else server.address
                         for server in self.servers)
        if chroot:
            hosts += "/" + chroot.strip("/")
        return hosts

    # ---- lifecycle

    def start(self, timeout: float = 30.0) -> "ZooKeeperEnsemble":
        """Start every member not running and wait until the ensemble serves."""
        for server in self.servers:
            server.launch(self.java, self.classpath, self.jvm_args)
        self._wait_serving(self.servers, timeout, kill_on_failure=True)
        return self

    def wait_serving(self, timeout: float = 30.0) -> None:
        """Wait until every running member serves (one of them leading)."""
        running = [s for s in self.servers if s.is_running()]
        if not running:
            raise ZooKeeperError("no member of the ensemble is running")
        self._wait_serving(running, timeout)

    def _wait_serving(self, members: list[ZooKeeperServer], timeout: float,
                      kill_on_failure: bool = False) -> None:
        deadline = time.monotonic() + timeout
        modes: dict[int, str | None] = {}
        while True:
            for server in members:
                if not server.is_running():
                    self._fail(server, server.process.exit_status(),
                               kill_on_failure)
                modes[server.server_id] = server.mode(timeout=1.0)
            serving = all(mode in SERVING_MODES for mode in modes.values())
            leaders = sum(1 for mode in modes.values() if mode in ("leader", "standalone"))
            if serving and leaders == 1:
                return
            if time.monotonic() >= deadline:
                waiting = [s for s in members if modes[s.server_id] not in SERVING_MODES]
                self._fail(waiting[0] if waiting else members[0],
                           f"not serving after {timeout:.0f} s (modes by id: {modes})",
                           kill_on_failure)
            time.sleep(0.05)     # poll interval: the servers publish no event to wait on

    def _fail(self, server: ZooKeeperServer, why: str, kill_all: bool) -> None:
        if kill_all:     # a half-started ensemble is of no use to anyone
            self.kill_all()
        raise ZooKeeperStartError(
            f"ZooKeeper server {server.server_id} ({server.address}) {why}; "
            f"its directory is kept: {server.directory}\n"
            f"----- tail of {server.log_path} -----\n{server.tail_log(60)}")

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every member (SIGTERM, then SIGKILL after ``timeout``) and remove
        the temporary directory this ensemble made, unless kept."""
        for server in self.servers:      # all at once: each takes ~0.4 s to exit
            server.terminate()
        for server in self.servers:
            server.wait_stopped(timeout)
        if self._made_directory and not self.keep_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def kill_all(self) -> None:
        for server in self.servers:
            server.kill()

    def kill(self, i: int) -> None:
        """SIGKILL member ``i`` (index into ``servers``): a crash."""
        self.servers[i].kill()

    def restart(self, i: int, timeout: float = 30.0) -> None:
        """Stop member ``i`` if it runs, start it on the same ports and data, and
        wait until the ensemble serves with it."""
        server = self.servers[i]
        server.stop()
        server.launch(self.java, self.classpath, self.jvm_args)
        self.wait_serving(timeout)

    # ---- state

    def modes(self) -> list[str | None]:
        """Each member's mode, None for a member down or not serving."""
        return [server.mode() for server in self.servers]

    def leader(self) -> int | None:
        """Index of the leader (the standalone server counts), or None."""
        for i, mode in enumerate(self.modes()):
            if mode in ("leader", "standalone"):
                return i
        return None

    def followers(self) -> list[int]:
        return [i for i, mode in enumerate(self.modes()) if mode == "follower"]

    def pids(self) -> list[int]:
        return [server.pid for server in self.servers if server.pid is not None]

    # ---- logs

    def log_positions(self) -> list[int]:
        """Each member's log size now, to pass to logs(since=...) later."""
        return [server.log_size() for server in self.servers]

    def logs(self, since: list[int] | None = None) -> str:
        """Every member's log (from ``since`` on), each under a header."""
        parts = []
        for i, server in enumerate(self.servers):
            start = since[i] if since else 0
            parts.append(f"----- ZooKeeper server {server.server_id} ({server.address}), "
                         f"{server.log_path} -----\n{server.read_log(start)}")
        return "\n".join(parts)

    def tail_log(self, lines: int = 40) -> str:
        """The last ``lines`` of every member's log, each under a header."""
        return "\n".join(f"----- ZooKeeper server {s.server_id} ({s.address}) -----\n"
                         f"{s.tail_log(lines)}" for s in self.servers)

    def __enter__(self) -> "ZooKeeperEnsemble":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ZooKeeperEnsemble({self.connect_string()!r}, directory={self.directory!r})"
