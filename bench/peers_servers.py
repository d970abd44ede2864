"""The three brokers of the peer benchmark, as plain background processes.

* ``SamsaServer``: one ``python -m broker`` (``broker.harness.BrokerProcess``).
* ``RabbitMQServer``: Debian's ``rabbitmq-server`` without its ``su`` wrapper:
  our own ``epmd`` on a free port, the node configured by environment
  variables (loopback only, temporary mnesia/log directories), started with
  ``/usr/lib/rabbitmq/bin/rabbitmq-server``, awaited with ``rabbitmqctl
  await_startup`` and stopped with ``rabbitmqctl stop``.
* ``ActiveMQServer``: Debian's ``activemq.jar`` run by ``java`` in the
  foreground, with a configuration derived from Debian's
  ``instances-available/main/activemq.xml`` whose only transport connector
  is STOMP on a free loopback port; stopped with SIGTERM.

Every process is a ``broker.service_kit.process.SupervisedProcess``: a session
(process group) of its own, and a stop that leaves nothing of the group: the
polite stop first, then SIGTERM, then SIGKILL to whatever is left (a
RabbitMQ node is a shell script, ``beam.smp`` and helpers). Each server also
reports the CPU seconds of its process groups (from /proc, all threads) and
the bytes its data directory takes on disk.

Never touches a process it did not start: everything is found by the
process group ids of its own children.
"""
from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from broker.service_kit.process import (  # noqa: E402
    ProcessStartError,
    SupervisedProcess,
    group_cpu_seconds,
    group_members,
)
from broker.service_kit.ports import free_ports  # noqa: E402

RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"
ACTIVEMQ_HOME = "/usr/share/activemq"
ACTIVEMQ_JAR = ACTIVEMQ_HOME + "/bin/activemq.jar"
ACTIVEMQ_DEBIAN_CONF = "/etc/activemq/instances-available/main"
DEBIAN_PACKAGES = {"rabbitmq": ("rabbitmq-server", RABBITMQ_SERVER),
                   "activemq": ("activemq", ACTIVEMQ_JAR)}


class ServerStartError(RuntimeError):
    pass


# ====================================================================== processes

def dir_usage(path: str) -> dict[str, int]:
    """{file: bytes it takes on disk} under ``path``, as du counts them
    (allocated blocks: a sparse, preallocated file such as a KahaDB journal
    counts only what was written)."""
    usage = {}
    for top, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(top, name)
            try:
                usage[full] = os.lstat(full).st_blocks * 512
            except OSError:
                continue
    return usage


def growth(before: dict[str, int], after: dict[str, int]) -> int:
    """Bytes written between two ``dir_usage`` snapshots: what new files take
    plus what grown files gained. Files deleted or shrunk meanwhile (a broker
    collecting the garbage of messages consumed earlier) do not offset it."""
    return sum(max(0, size - before.get(f, 0)) for f, size in after.items())


def settled_usage(path: str, timeout: float = 5.0, interval: float = 0.3) -> dict[str, int]:
    """dir_usage once it stops changing (a broker may still be writing
    behind its acknowledgement), or after ``timeout`` s."""
    last = dir_usage(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(interval)
        now = dir_usage(path)
        if now == last:
            return now
        last = now
    return last


# ====================================================================== servers

class Server:
    """A broker run by the benchmark. Subclasses start it in ``start`` and
    register each process they start with ``_spawn``; ``stop`` stops them
    in reverse order."""
    name = "?"

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.join(workdir, self.name)
        os.makedirs(self.workdir, exist_ok=True)
        self.procs: list[tuple[str, SupervisedProcess, object]] = []
        self.stop_notes: list[str] = []

    @property
    def data_dir(self) -> str:
        raise NotImplementedError

    def _spawn(self, label: str, cmd: list[str], env: dict | None = None, polite=None,
               cwd: str | None = None) -> SupervisedProcess:
        proc = SupervisedProcess(f"{self.name} {label}", cmd,
                                 os.path.join(self.workdir, f"{label}.out"), cwd=cwd, env=env)
        self.procs.append((label, proc, polite))
        return proc.start()

    def pgids(self) -> list[int]:
        return [p.pid for _label, p, _polite in self.procs if p.pid is not None]

    def cpu_seconds(self) -> float:
        return sum(group_cpu_seconds(g) for g in self.pgids())

    def leftover(self) -> list[int]:
        """Processes of this server's groups still alive (should be none after stop)."""
        return [pid for g in self.pgids() for pid in group_members(g)]

    def stop(self) -> list[str]:
        notes = []
        for label, proc, polite in reversed(self.procs):
            proc.stop(30.0, polite)
            notes += [f"{self.name} {label}: {note}" for note in proc.stop_notes]
        self.stop_notes += notes
        return notes

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(f"--- {proc.log_path}\n{proc.tail_log(lines)}"
                         for _label, proc, _polite in self.procs)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait_port(port: int, proc: SupervisedProcess, timeout: float) -> None:
    try:
        proc.wait_ready(timeout, lambda: _listening(port))
    except ProcessStartError as exc:
        raise ServerStartError(f"nothing listening on port {port}: {exc}") from None


class SamsaServer(Server):
    name = "samsa"

    def __init__(self, workdir: str, settings: dict | None = None) -> None:
        super().__init__(workdir)
        self.settings = dict(settings or {})
        self.broker = None

    @property
    def data_dir(self) -> str:
        return os.path.join(self.workdir, "data")

    @property
    def address(self) -> str:
        return self.broker.address

    def start(self, timeout: float = 30.0) -> "SamsaServer":
        from broker.harness import BrokerProcess
        self.broker = BrokerProcess(self.data_dir, settings=self.settings,
                                    log_path=os.path.join(self.workdir, "broker.out"))
        try:
            self.broker.start(timeout)
        finally:
            if self.broker.process is not None:    # registered even if the start failed
                self.procs.append(("broker", self.broker.process, None))
        return self


class RabbitMQServer(Server):
    name = "rabbitmq"

    def __init__(self, workdir: str) -> None:
        super().__init__(workdir)
        self.port, self.dist_port, self.epmd_port = free_ports(3)
        self.node = f"samsa-peers-{os.getpid()}@localhost"
        self.env: dict[str, str] = {}

    @property
    def data_dir(self) -> str:
        return os.path.join(self.workdir, "mnesia")

    def _environment(self) -> dict[str, str]:
        w = self.workdir
        os.makedirs(self.data_dir, exist_ok=True)
        os.makedirs(os.path.join(w, "log"), exist_ok=True)
        os.makedirs(os.path.join(w, "home"), exist_ok=True)
        with open(os.path.join(w, "rabbitmq.conf"), "w") as f:
            f.write(f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n")
        with open(os.path.join(w, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        env = dict(os.environ)
        env.update({
            "HOME": os.path.join(w, "home"),            # the Erlang cookie goes here
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": self.data_dir,
            "RABBITMQ_LOG_BASE": os.path.join(w, "log"),
            "RABBITMQ_CONFIG_FILE": os.path.join(w, "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": os.path.join(w, "enabled_plugins"),
            "ERL_EPMD_PORT": str(self.epmd_port),
        })
        return env

    def ctl(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        return subprocess.run([RABBITMQCTL, "-n", self.node, *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, timeout: float = 90.0) -> "RabbitMQServer":
        self.env = self._environment()
        # our own epmd first: were none running on ERL_EPMD_PORT, the Erlang VM
        # (and every rabbitmqctl) would start a daemon epmd that nobody stops
        epmd = self._spawn("epmd", ["epmd", "-port", str(self.epmd_port)], env=self.env)
        _wait_port(self.epmd_port, epmd, 10)
        server = self._spawn("rabbitmq-server", [RABBITMQ_SERVER], env=self.env,
                             polite=self._polite_stop)
        _wait_port(self.port, server, timeout)
        r = self.ctl("await_startup", "--timeout", str(int(timeout)), timeout=timeout + 10)
        if r.returncode != 0:
            raise ServerStartError(f"rabbitmqctl await_startup: {r.stdout}{r.stderr}")
        return self

    def _polite_stop(self) -> None:
        self.ctl("stop", timeout=60)


class ActiveMQServer(Server):
    name = "activemq"

    def __init__(self, workdir: str, heap: str = "1G") -> None:
        super().__init__(workdir)
        self.port = free_ports(1)[0]
        self.heap = heap

    @property
    def data_dir(self) -> str:
        return os.path.join(self.workdir, "data")

    def write_config(self) -> str:
        conf = os.path.join(self.workdir, "conf")
        os.makedirs(conf, exist_ok=True)
        with open(os.path.join(ACTIVEMQ_DEBIAN_CONF, "activemq.xml")) as f:
            xml = f.read()
        xml = activemq_config(xml, self.port)
        path = os.path.join(conf, "activemq.xml")
        with open(path, "w") as f:
            f.write(xml)
        log4j = os.path.join(ACTIVEMQ_DEBIAN_CONF, "log4j2.properties")
        if os.path.exists(log4j):
            shutil.copy(log4j, conf)
        return path

    def start(self, timeout: float = 60.0) -> "ActiveMQServer":
        b = self.workdir
        path = self.write_config()
        for d in ("data", "tmp"):
            os.makedirs(os.path.join(b, d), exist_ok=True)
        cmd = ["java", f"-Xms{self.heap}", f"-Xmx{self.heap}",
               f"-Dactivemq.home={ACTIVEMQ_HOME}", f"-Dactivemq.base={b}",
               f"-Dactivemq.conf={b}/conf", f"-Dactivemq.data={b}/data",
               f"-Djava.io.tmpdir={b}/tmp", f"-Dactivemq.classpath={b}/conf",
               "-jar", ACTIVEMQ_JAR, "start", f"xbean:file:{path}"]
        proc = self._spawn("activemq", cmd, cwd=b)
        _wait_port(self.port, proc, timeout)
        stomp_handshake(self.port, timeout=timeout)
        return self


def activemq_config(debian_xml: str, stomp_port: int) -> str:
    """Debian's activemq.xml with its transport connectors replaced by one
    STOMP connector on 127.0.0.1:``stomp_port`` (nothing else changes: KahaDB
    under ${activemq.base}/data, as Debian configures it)."""
    connectors = ("<transportConnectors>\n"
                  f'            <transportConnector name="stomp" '
                  f'uri="stomp://127.0.0.1:{stomp_port}"/>\n'
                  "        </transportConnectors>")
    xml, count = re.subn(r"<transportConnectors>.*?</transportConnectors>", connectors,
                         debian_xml, flags=re.S)
    if count != 1:
        raise ServerStartError("Debian's activemq.xml has no <transportConnectors> block")
    return xml


def stomp_handshake(port: int, timeout: float = 30.0) -> None:
    """Wait until the broker answers a STOMP CONNECT (the port can accept
    before the broker is ready)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\0")
                reply = s.recv(4096)
                if reply.startswith(b"CONNECTED"):
                    s.sendall(b"DISCONNECT\n\n\0")
                    return
                last = reply[:200].decode(errors="replace")
        except OSError as exc:
            last = str(exc)
        time.sleep(0.2)
    raise ServerStartError(f"no STOMP CONNECTED from port {port}: {last}")


def missing_debian_packages(systems) -> list[str]:
    """Debian packages the chosen peers need that are not installed."""
    missing = []
    for system in systems:
        if system in DEBIAN_PACKAGES:
            package, path = DEBIAN_PACKAGES[system]
            if not os.path.exists(path):
                missing.append(package)
    if "rabbitmq" in systems and not shutil.which("epmd"):
        missing.append("erlang-base")
    if "activemq" in systems and not shutil.which("java"):
        missing.append("default-jre-headless")
    return missing
