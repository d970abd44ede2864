"""python -m infra.local.drill_network (make drill-network): the pipeline
under the faults of a network, and the audit's word that nothing
acknowledged was lost.

It brings the lab up in the netns runtime (infra/local/lab.py, every host
in a network namespace of its own, docs/network-lab.md) on the default
topology (two datacenters of two replicating brokers behind HAProxy, the
analysis cluster, a mirror of two processes), with WAN links of ``--rtt-ms``
between every two datacenters, and the audit (its counters and service in
the analysis datacenter's ``audit`` host: Lab.start_audit). Audited
traffic is produced from each datacenter's ``<dc>.client`` host (a process
in its namespace: ``python -m infra.local.drill_network traffic``). Then,
one after the other, while traffic flows:

1. **cut**: dc-a cut off from analysis, both ways, for ``--cut-seconds``
   (default 120). dc-a keeps taking writes; the mirror's lag from dc-a
   grows and drains after the heal.
2. **broker off ZooKeeper**: dc-a.broker-0 cut off from its datacenter's
   ZooKeeper only, for ``--zk-cut-seconds``: its registration goes once its
   session expires; the cluster replicates, so the controller fences it
   (every partition it led gets a new leader, it leaves every in-sync set);
   unblocked, it registers anew and catches up until every replica is in
   sync.
3. **mirror off its target**: to-analysis.mirror-0 cut off from every host
   of the analysis cluster (its source datacenters still reachable), for
   ``--cut-seconds``: the partitions it holds stop being copied (the lag
   grows) and are copied after the heal.
4. **one-way loss**: dc-b -> analysis drops ``--loss`` of its packets (the
   way back none) for ``--cut-seconds``.

Each fault's traffic has event times in an hour of its own (the hours
before the current one), so the audit judges each fault apart: its windows
are pending (the audit's grace is set to 12 hours: late, not lost) while
copies are on their way, and complete once everything arrived. For each
fault the drill records what it observed (the mirror's lag before, at its
peak and when drained; the audit's pending windows; the broker's
registration gone and back; the leaders moved; the link's drop counters;
the times). Then it waits for the audit: every tier (producer, cluster,
mirror) must have every acknowledged message of the drill's hours (missing
0); it prints a table, writes it as JSON with ``--report FILE``, and exits
1 on any loss.

It must never leave anything behind: the traffic processes and the lab
(namespaces, processes) are taken down on the way out, on failure too
(``--keep-up`` leaves the lab running; ``python -m infra.local down --dir
DIR`` stops it). Needs root (see docs/network-lab.md); exit 2 with the
reason when namespaces cannot be made.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.service_kit import cli
from broker.service_kit.process import wait_until
from infra.local.lab_security import ADMIN
from infra.local.network import control
from infra.local.traffic import HOUR_MS, TrafficConfig, TrafficResult, produce

#: the drill's network lab (other labs of this repository use other ranges)
DEFAULT_SUBNET = "10.87.0.0/16"
TIERS = ("producer", "cluster", "mirror")
DATACENTERS = ("dc-a", "dc-b")
#: a window of a fault's hour stays pending, not lost, this long after it ends
AUDIT_GRACE_MS = 12 * HOUR_MS
LOSING = ("lost", "lost_and_duplicated")
CUT_BROKER = ("dc-a", 0)
CUT_MIRROR = "to-analysis.mirror-0"


def say(text: str) -> None:
    print(f"[drill-network] {text}", flush=True)


# ------------------------------------------------------------------ the topology

def drill_topology(subnet: str = DEFAULT_SUBNET, rtt_ms: float = 40.0,
                   overrides: dict[str, str] | None = None, secure: bool = False):
    """The default topology (infra/local/topology.toml) in the network lab:
    ``subnet``, every two datacenters joined by a link of ``rtt_ms``; the
    mirror publishing its tier's counts every 2 s (as the demo's);
    ``secure``: the secured lab (docs/security.md, "The secured lab")."""
    from infra.local.lab import DEFAULT_TOPOLOGY
    from infra.topology import LinkSpec, NetworkSpec, SecuritySpec, load_topology
    topology = load_topology(DEFAULT_TOPOLOGY, {
        "mirrors.to-analysis.settings": "audit_publish_interval_ms=2000",
        **(overrides or {})})
    names = [c.name for c in topology.clusters()]
    links = tuple(LinkSpec((a, b), rtt_ms=rtt_ms) for i, a in enumerate(names)
                  for b in names[i + 1:])
    return dataclasses.replace(topology, network=NetworkSpec(subnet=subnet, links=links,
                                                             namespaces=True),
                               security=SecuritySpec(enabled=secure))


# ------------------------------------------------------------------ traffic

def traffic_main(args: argparse.Namespace) -> int:
    """``traffic``: audited rounds of ``--per-round`` events into one
    datacenter, event times over the hour ``--hour-ms``, until SIGTERM;
    then what was acknowledged, as JSON, into ``--out``. Runs in a client
    host's namespace. Each finished round prints a line ``round N``."""
    # dies with the drill that started it (prctl PR_SET_PDEATHSIG), even a
    # drill killed -9: traffic must not outlive the lab it feeds
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != args.parent:
        return 1                          # the drill died before the prctl took
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    result = TrafficResult()
    rounds = errors = 0
    security = None
    if args.security_dir:
        from infra.local.lab_security import LabSecurity
        security = LabSecurity(args.security_dir)
    while not stop.is_set():
        try:
            produce({args.dc: (args.lb, args.zookeeper)},
                    TrafficConfig(messages_per_dc=args.per_round, hours=1, batch_size=200,
                                  seed=args.seed * 100_000 + rounds),
                    first_hour_ms=args.hour_ms, tolerate_failures=True, result=result,
                    security=security)
        except Exception as exc:          # noqa: BLE001 - the round is retried, and counted
            errors += 1
            print(f"round {rounds} stopped early: {type(exc).__name__}: {exc}"[:300],
                  flush=True)
            stop.wait(1.0)
        rounds += 1
        print(f"round {rounds} acknowledged {result.total()} failed {result.failed}", flush=True)
        stop.wait(0.3)
    with open(args.out + ".tmp", "w") as f:
        json.dump({"acked": result.acked, "failed": result.failed, "rounds": rounds,
                   "errors": errors}, f)
    os.replace(args.out + ".tmp", args.out)
    return 0


class Traffic:
    """One traffic process per datacenter, each in its ``<dc>.client`` host,
    all with event times in ``hour_ms``."""

    def __init__(self, lab, directory: str, hour_ms: int, per_round: int, seed: int) -> None:
        self.lab = lab  # a secured lab's traffic is produced as its producer user
        self.directory = directory
        self.hour_ms = hour_ms
        self.per_round = per_round
        self.seed = seed
        self.procs: dict[str, subprocess.Popen] = {}

    def _path(self, dc: str, what: str) -> str:
        return os.path.join(self.directory, f"{dc}.{what}")

    def start(self) -> None:
        from infra.local.lab import SOURCE_ROOT
        os.makedirs(self.directory, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SOURCE_ROOT, env.get("PYTHONPATH"))
                                            if p)
        for i, dc in enumerate(DATACENTERS):
            command = control.enter_command(self.lab.state_dir, f"{dc}.client", [
                self.lab.python, "-m", "infra.local.drill_network", "traffic", "--dc", dc,
                "--lb", self.lab.lb_address(dc), "--zookeeper", self.lab.zookeeper_connect(dc),
                "--hour-ms", str(self.hour_ms), "--per-round", str(self.per_round),
                "--seed", str(self.seed * 10 + i), "--out", self._path(dc, "json"),
                "--parent", str(os.getpid()),
                *([] if self.lab.security is None
                  else ["--security-dir", self.lab.security.directory])])
            with open(self._path(dc, "log"), "w") as log_file:
                self.procs[dc] = subprocess.Popen(command, stdout=log_file,
                                                  stderr=subprocess.STDOUT, env=env,
                                                  cwd=SOURCE_ROOT, start_new_session=True)

    def _finished(self, dc: str) -> list[str]:
        """The ``round N acknowledged A failed F`` lines of ``dc``'s traffic so far."""
        try:
            with open(self._path(dc, "log")) as f:
                return [line for line in f if line.startswith("round ") and
                        " acknowledged " in line]
        except FileNotFoundError:
            return []

    def rounds(self, dc: str) -> int:
        """Rounds ``dc``'s traffic has finished so far."""
        return len(self._finished(dc))

    def acknowledged(self, dc: str) -> int:
        """Messages of ``dc`` acknowledged by the end of its last finished round."""
        finished = self._finished(dc)
        return int(finished[-1].split()[3]) if finished else 0

    def wait_rounds(self, n: int, timeout: float = 180.0) -> None:
        """Until every datacenter's traffic has finished ``n`` rounds."""
        def done() -> bool:
            for dc, proc in self.procs.items():
                if proc.poll() is not None:
                    raise DrillError(f"the traffic of {dc} exited ({proc.returncode}): "
                                     f"{self._tail(dc)}")
            return all(self.rounds(dc) >= n for dc in self.procs)
        if not wait_until(done, timeout, interval=0.5):
            raise DrillError(f"traffic did not finish {n} rounds in {timeout:.0f} s: "
                             + "; ".join(self._tail(dc) for dc in self.procs))

    def _tail(self, dc: str) -> str:
        try:
            with open(self._path(dc, "log")) as f:
                return f.read()[-1500:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self, timeout: float = 300.0) -> TrafficResult:
        """SIGTERM (each finishes its round), and what was acknowledged."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        result = TrafficResult(first_hour_ms=self.hour_ms)
        for dc, proc in self.procs.items():
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise DrillError(f"the traffic of {dc} did not stop in {timeout:.0f} s: "
                                 f"{self._tail(dc)}") from None
            try:
                with open(self._path(dc, "json")) as f:
                    document = json.load(f)
            except FileNotFoundError:
                raise DrillError(f"the traffic of {dc} exited ({proc.returncode}) without "
                                 f"its result: {self._tail(dc)}") from None
            for d, topics in document["acked"].items():
                for topic, hours in topics.items():
                    for hour, n in hours.items():
                        result.add(d, topic, int(hour), n)
            result.failed += document["failed"]
        self.procs = {}
        return result

    def kill(self) -> None:
        """Every traffic process still running, SIGKILLed (on the way out)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs = {}


# ------------------------------------------------------------------ what the drill watches

class DrillError(RuntimeError):
    """The drill could not go on; the message says why."""


@dataclass
class FaultReport:
    kind: str
    target: str
    hour_ms: int
    at_s: float = 0.0
    held_s: float = 0.0
    acked: int = 0
    observed: dict[str, Any] = field(default_factory=dict)
    effects: dict[str, bool] = field(default_factory=dict)
    """Each effect the fault must have, and whether the drill saw it."""

    def lines(self) -> list[str]:
        out = [f"  {self.kind} ({self.target}) at {self.at_s:.0f} s, held {self.held_s:.0f} s, "
               f"{self.acked:,} messages acknowledged meanwhile"]
        out += [f"    {k}: {v}" for k, v in self.observed.items()]
        out += [f"    effect {'seen' if ok else 'NOT SEEN'}: {k}" for k, ok in self.effects.items()]
        return out


@dataclass
class NetworkDrillReport:
    faults: list[FaultReport] = field(default_factory=list)
    acked: int = 0
    failed: int = 0
    tiers: dict[str, dict[str, int]] = field(default_factory=dict)
    lost: int = 0
    settled: bool = False

    def table(self) -> str:
        lines = ["network faults:"]
        for f in self.faults:
            lines += f.lines()
        lines.append(f"messages acknowledged: {self.acked:,} (not acknowledged after the "
                     f"producers' retries: {self.failed:,}, so not counted by the audit)")
        lines.append("per tier (every window of the drill's hours):")
        for tier, t in self.tiers.items():
            lines.append(f"  {tier:<9} produced {t['produced']:,}  counted {t['count']:,}  "
                         f"missing {t['missing']:,}  duplicated {t['duplicated']:,}")
        lines.append(f"LOST: {self.lost:,}" + ("  (nothing acknowledged was lost)"
                                               if not self.lost else ""))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def tier_sums(verdicts: list[dict]) -> dict[str, dict[str, int]]:
    return {tier: {k: sum(v[k] for v in verdicts if v["tier"] == tier)
                   for k in ("produced", "count", "missing", "duplicated")} for tier in TIERS}


def settled(verdicts: list[dict], acked: int) -> bool:
    """Whether the audit has every acknowledged message at every tier: the
    producers' counts are all there, every tier reported, and no window
    misses a message (copies allowed: at-least-once). A window with copies
    stays ``pending`` until the audit's grace has passed, not
    ``duplicated`` (audit/compare.py), so the states alone cannot say it;
    ``missing`` can: it is 0 only where the count reached the producers'
    and, where the counts are equal, the id checksums match."""
    sums = tier_sums(verdicts)
    return (sums["producer"]["produced"] == acked
            and all(any(v["tier"] == t for v in verdicts) for t in TIERS)
            and all(v["missing"] == 0 and v["state"] not in LOSING for v in verdicts))


class Watch:
    """The drill's own view of the lab, from this machine over the lab's
    management network (never delayed nor cut): ZooKeeper clients of every
    cluster, the mirror's lag, the audit's verdicts, the link counters."""

    def __init__(self, lab, audit_url: str) -> None:
        from broker.coordination.cluster import ClusterView
        from broker.coordination.zk import make_client, start_client
        self.lab = lab
        self.audit_url = audit_url
        self.clients = {}
        self.views = {}
        for spec in lab.topology.clusters():
            connect = lab.zookeeper_connect(spec.name)
            client = make_client(connect, tls=lab.zookeeper_tls())
            start_client(client, connect, timeout=15.0, what="drill")
            self.clients[spec.name] = client
            # a secured lab's brokers are asked at their TLS listeners, as its admin
            self.views[spec.name] = ClusterView(client, tls=lab.security is not None)
        self.admin_options = {} if lab.security is None else \
            lab.security.admin_options(ADMIN)

    def close(self) -> None:
        for client in self.clients.values():
            client.stop()
            client.close()

    def mirror_lag(self, sources: tuple[str, ...] = DATACENTERS) -> int | None:
        """Bytes the mirror has still to copy from ``sources`` (its
        committed offsets against the latest ones); None: unknown now."""
        from broker.coordination.ownership import Subscription
        from infra.local.status import group_lag
        total = 0
        for mirror in self.lab.topology.mirrors:
            subscription = Subscription(whitelist=mirror.whitelist,
                                        blacklist=mirror.blacklist or None)
            for source in mirror.sources:
                if source not in sources:
                    continue
                lag = group_lag(self.clients[source], self.views[source], mirror.mirror_group,
                                subscription, self.admin_options)
                if lag["errors"]:
                    return None
                total += lag["lag_bytes"]
        return total

    def verdicts(self, begin_ms: int, end_ms: int) -> list[dict]:
        from audit.remote import fetch_verdicts
        return fetch_verdicts(self.audit_url, begin_ms, end_ms,
                              credentials=self.lab.http_access)["verdicts"]

    def pending(self, hour_ms: int) -> tuple[int, int]:
        """(windows pending, messages of dc-a's producers the audit has
        heard of) in the hour of ``hour_ms``."""
        verdicts = self.verdicts(hour_ms, hour_ms + HOUR_MS)
        return (sum(v["state"] == "pending" for v in verdicts),
                sum(v["produced"] for v in verdicts
                    if v["tier"] == "producer" and v["cluster"] == "dc-a"))

    def links(self) -> dict[tuple[str, str], dict[str, int]]:
        return {(link["from"], link["to"]): link["counters"]
                for link in control.request(self.lab.state_dir, "status")["links"]}

    def registration(self, cluster: str, broker: int) -> int | None:
        """The czxid of the broker's registration, None while it has none."""
        from broker.coordination import paths
        stat = self.clients[cluster].exists(paths.broker_id_path(broker))
        return stat.czxid if stat else None

    def partitions(self, cluster: str):
        from broker.coordination import replica_admin
        return replica_admin.describe(self.clients[cluster])


# ------------------------------------------------------------------ the drill

class NetworkDrill:
    def __init__(self, lab, watch: Watch, args: argparse.Namespace) -> None:
        self.lab = lab
        self.watch = watch
        self.args = args
        self.report = NetworkDrillReport()
        self.t0 = time.monotonic()
        self.traffic: Traffic | None = None
        self.lag: dict[str, Any] | None = None    # the mirror's lag around the fault under way
        now = int(time.time() * 1000)
        self.this_hour = now - now % HOUR_MS

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def hold(self, seconds: float, sample: Callable[[], None]) -> None:
        """``seconds`` of a fault, ``sample`` called every second or so."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sample()
            time.sleep(max(0.0, min(1.0, end - time.monotonic())))

    def _lag(self, sources=DATACENTERS) -> int | None:
        try:
            return self.watch.mirror_lag(sources)
        except Exception:             # noqa: BLE001 - a broker not answering: unknown now
            return None

    def phase(self, index: int, kind: str, target: str,
              run: Callable[[FaultReport], None]) -> FaultReport:
        """One fault under its own hour of traffic: traffic up (a first round
        done), ``run`` (apply, observe, heal), traffic stopped, then the
        wait until the audit calls the hour complete."""
        hour = self.this_hour - (index + 1) * HOUR_MS
        fault = FaultReport(kind, target, hour)
        say(f"fault {index + 1}: {kind} ({target}); its traffic's event times in the hour "
            f"{time.strftime('%H:%M', time.gmtime(hour / 1000))} UTC")
        self.traffic = Traffic(self.lab, os.path.join(self.lab.state_dir, "traffic",
                                                      f"fault-{index + 1}"),
                               hour, self.args.per_round, self.args.seed * 10 + index)
        self.traffic.start()
        self.traffic.wait_rounds(1)
        fault.at_s = self.elapsed()
        run(fault)
        self.traffic.wait_rounds(min(self.traffic.rounds(dc) for dc in DATACENTERS) + 1)
        result = self.traffic.stop()
        self.traffic = None
        fault.acked = result.total()
        self.report.acked += result.total()
        self.report.failed += result.failed
        stopped = time.monotonic()
        if self.lag is not None:
            self._drained(fault, stopped)
        state = {"verdicts": []}

        def complete() -> bool:
            state["verdicts"] = self.watch.verdicts(hour, hour + HOUR_MS)
            return settled(state["verdicts"], fault.acked)

        done = wait_until(complete, self.args.settle_timeout, interval=2.0)
        states: dict[str, int] = {}
        for v in state["verdicts"]:
            states[v["state"]] = states.get(v["state"], 0) + 1
        copies = sum(1 for v in state["verdicts"] if v["duplicated"])
        fault.observed["audit windows of its hour"] = (
            (f"nothing missing {time.monotonic() - stopped:.1f} s after the traffic stopped"
             if done else f"STILL MISSING messages {self.args.settle_timeout:.0f} s after "
                          f"the traffic stopped")
            + f" (verdicts {states}; {copies} with copies, at-least-once)")
        fault.effects["the audit has every message of its hour"] = done
        self.report.faults.append(fault)
        for line in fault.lines():
            say(line.strip())
        return fault

    def _watch_lag(self, sources, grows: bool = True) -> Callable[[], None]:
        """Start following the mirror's lag from ``sources`` for the fault
        under way (``grows``: the fault must make it grow); the sampler to
        call while it is held."""
        self.lag = {"sources": sources, "before": self._lag(sources), "peak": 0,
                    "grows": grows}

        def sample() -> None:
            self.lag["peak"] = max(self.lag["peak"], self._lag(sources) or 0)
        return sample

    def _healed(self) -> None:
        self.lag["healed"] = time.monotonic()

    def _drained(self, fault: FaultReport, stopped: float) -> None:
        """Once the traffic has stopped: how long after the heal the
        mirror's lag was 0 (everything copied and its offsets committed)."""
        lag = self.lag
        self.lag = None
        ok = wait_until(lambda: self._lag(lag["sources"]) == 0, self.args.settle_timeout,
                        interval=1.0)
        before = lag["before"]
        fault.observed[f"mirror lag from {', '.join(lag['sources'])}"] = (
            f"{'?' if before is None else f'{before:,}'} bytes before, peak {lag['peak']:,} "
            f"during, "
            + (f"0 {time.monotonic() - lag['healed']:.1f} s after the heal (the traffic "
               f"stopped {stopped - lag['healed']:.1f} s after it)" if ok
               else f"NOT 0 {self.args.settle_timeout:.0f} s after the traffic stopped"))
        # traffic flows all along: the lag the fault made is well above the
        # few batches in flight before it
        if lag["grows"]:
            fault.effects["the mirror's lag grew"] = \
                lag["peak"] > 2 * (before or 0) + 64 * 1024
        fault.effects["the mirror caught up"] = ok

    # ------------------------------------------------------------ the four faults

    def cut(self, fault: FaultReport) -> None:
        lab, watch = self.lab, self.watch
        lag_sample = self._watch_lag(("dc-a",))
        counters = watch.links()
        rounds = self.traffic.rounds("dc-a")
        # a round under way when the link is cut may have had some messages
        # acknowledged and counted across it already: at most a round more
        acked_at_cut = self.traffic.acknowledged("dc-a") + self.args.per_round
        pending = heard = 0
        control.request(lab.state_dir, "cut", **{"from": "dc-a", "to": "analysis",
                                                 "both": True})
        cut_at = time.monotonic()

        def sample() -> None:
            nonlocal pending, heard
            lag_sample()
            windows, heard = watch.pending(fault.hour_ms)
            pending = max(pending, windows)

        try:
            self.hold(self.args.cut_seconds, sample)
        finally:
            control.request(lab.state_dir, "heal", **{"from": "dc-a", "to": "analysis",
                                                      "both": True})
        self._healed()
        fault.held_s = time.monotonic() - cut_at
        during = self.traffic.rounds("dc-a") - rounds
        after = watch.links()
        dropped = {f"{a}->{b}": after[(a, b)]["cut"] - counters[(a, b)]["cut"]
                   for a, b in (("dc-a", "analysis"), ("analysis", "dc-a"))}
        fault.observed["link dc-a<->analysis"] = f"packets dropped by the cut: {dropped}"
        fault.observed["dc-a's traffic during the cut"] = f"{during} rounds acknowledged"
        acked_at_heal = self.traffic.acknowledged("dc-a")
        fault.observed["audit"] = (
            f"up to {pending} windows of its hour pending during the cut; at the heal it had "
            f"heard of {heard:,} messages from dc-a's producers, of {acked_at_heal:,} "
            f"acknowledged ({acked_at_cut - self.args.per_round:,} when the link was cut)")
        # the producers' counts cross the cut link too (dc-a's audit topic,
        # mirrored): nothing acknowledged during the cut reaches the audit
        fault.effects["the audit heard nothing from dc-a during the cut"] = (
            heard <= acked_at_cut < acked_at_heal)
        fault.effects["the link dropped packets both ways"] = all(n > 0 for n in dropped.values())
        fault.effects["dc-a kept taking writes"] = during > 0
        fault.effects["the audit showed windows pending"] = pending > 0

    def broker_off_zookeeper(self, fault: FaultReport) -> None:
        lab, watch = self.lab, self.watch
        cluster, broker = CUT_BROKER
        host = lab.broker_name(cluster, broker)
        spec = lab.topology.cluster(cluster)
        led_before = [p for p in watch.partitions(cluster) if p.leader == broker]
        registered = watch.registration(cluster, broker)
        if registered is None:
            raise DrillError(f"{host} is not registered before the fault")
        control.request(lab.state_dir, "block", host=host,
                        peers=[f"{cluster}.zookeeper-1"])
        blocked = time.monotonic()
        times: dict[str, float] = {}
        try:
            gone = wait_until(lambda: watch.registration(cluster, broker) is None,
                              self.args.zk_cut_seconds + 60, interval=0.25)
            if gone:
                times["gone"] = time.monotonic() - blocked

            holding: list[str] = []

            def fenced() -> bool:
                """It leads nothing and is in no in-sync set, but one it is
                the last of: a partition whose other replicas had fallen
                behind goes offline keeping its last in-sync set, so that
                the first of them to return leads again (the controller's
                rule, broker/coordination/controller.py)."""
                parts = watch.partitions(cluster)
                holding[:] = [f"{p.topic}/{p.partition} leader {p.leader} isr {list(p.isr)}"
                              for p in parts
                              if p.leader == broker or (broker in p.isr and not (
                                  p.leader < 0 and tuple(p.isr) == (broker,)))]
                return bool(parts) and not holding
            if spec.replicated:
                if wait_until(fenced, 60, interval=0.5):
                    times["fenced"] = time.monotonic() - blocked
            left = self.args.zk_cut_seconds - (time.monotonic() - blocked)
            self.hold(max(0.0, left), lambda: None)
        finally:
            control.request(lab.state_dir, "unblock", host=host)
        unblocked = time.monotonic()
        fault.held_s = unblocked - blocked
        back = wait_until(lambda: watch.registration(cluster, broker) not in (None, registered),
                          90, interval=0.25)
        if back:
            times["back"] = time.monotonic() - unblocked
        in_sync = None
        if spec.replicated:
            in_sync = lab.wait_fully_replicated(cluster, timeout=300)
        from broker.config import BrokerConfig
        session_ms = spec.broker_overrides().get("zookeeper_session_timeout_ms",
                                                 BrokerConfig.zookeeper_session_timeout_ms)
        fault.observed["registration"] = (
            (f"gone {times['gone']:.1f} s after the block (session timeout "
             f"{int(session_ms) / 1000:g} s)" if "gone" in times else "NEVER gone")
            + (f", back (a new session) {times['back']:.1f} s after the unblock" if back
               else ", NOT back"))
        if spec.replicated:
            fault.observed["fencing"] = (
                (f"{len(led_before)} partitions it led got other leaders and it left every "
                 f"in-sync set {times['fenced']:.1f} s after the block" if "fenced" in times
                 else f"NOT fenced (still held by {', '.join(holding[:5])})")
                + f"; every replica in sync again {in_sync:.1f} s after it registered")
            fault.effects["it was fenced (no leadership, out of every in-sync set)"] = \
                "fenced" in times
        fault.effects["its registration went once its session expired"] = "gone" in times
        fault.effects["it registered anew when healed"] = back

    def mirror_off_target(self, fault: FaultReport) -> None:
        lab = self.lab
        target = lab.topology.analysis
        peers = [f"{target.name}.zookeeper-1"] + [lab.broker_name(target.name, i)
                                                   for i in range(target.brokers)]
        sample = self._watch_lag(DATACENTERS)
        control.request(lab.state_dir, "block", host=CUT_MIRROR, peers=peers)
        blocked = time.monotonic()
        try:
            self.hold(self.args.cut_seconds, sample)
        finally:
            control.request(lab.state_dir, "unblock", host=CUT_MIRROR)
        self._healed()
        fault.held_s = time.monotonic() - blocked
        alive = lab.alive(CUT_MIRROR)
        fault.observed["the mirror process"] = ("still running after the heal" if alive
                                                else "EXITED during the cut")
        fault.effects["the mirror process waited (still running)"] = alive
        if not alive:                       # as an operator would: start it again
            lab.restart_process(CUT_MIRROR)

    def one_way_loss(self, fault: FaultReport) -> None:
        lab, watch = self.lab, self.watch
        link = next((l for l in lab.topology.network.links
                     if set(l.between) == {"dc-b", "analysis"}), None)
        loss_before = link.loss if link else 0.0
        counters = watch.links()
        sample = self._watch_lag(("dc-b",), grows=False)
        control.request(lab.state_dir, "shape", **{"from": "dc-b", "to": "analysis",
                                                   "both": False, "loss": self.args.loss})
        shaped = time.monotonic()
        try:
            self.hold(self.args.cut_seconds, sample)
        finally:
            control.request(lab.state_dir, "shape", **{"from": "dc-b", "to": "analysis",
                                                       "both": False, "loss": loss_before})
        self._healed()
        fault.held_s = time.monotonic() - shaped
        after = watch.links()
        lost = {f"{a}->{b}": after[(a, b)]["lost"] - counters[(a, b)]["lost"]
                for a, b in (("dc-b", "analysis"), ("analysis", "dc-b"))}
        sent = after[("dc-b", "analysis")]["packets"] - counters[("dc-b", "analysis")]["packets"]
        fault.observed["link dc-b<->analysis"] = (f"packets lost {lost} of {sent:,} "
                                                  f"dc-b->analysis")
        fault.effects["dc-b->analysis lost packets, the way back none"] = (
            lost["dc-b->analysis"] > 0 and lost["analysis->dc-b"] == 0)

    # ------------------------------------------------------------ the run

    def run(self) -> NetworkDrillReport:
        faults = [("cut", "dc-a <-> analysis, both ways", self.cut),
                  ("broker off ZooKeeper", f"{CUT_BROKER[0]}.broker-{CUT_BROKER[1]} from "
                                           f"{CUT_BROKER[0]}.zookeeper-1",
                   self.broker_off_zookeeper),
                  ("mirror off its target", f"{CUT_MIRROR} from the analysis cluster",
                   self.mirror_off_target),
                  ("one-way loss", f"dc-b -> analysis, {self.args.loss:.0%} of packets",
                   self.one_way_loss)]
        for index, (kind, target, run) in enumerate(faults):
            if self.args.only and kind.split()[0] not in self.args.only:
                continue
            self.phase(index, kind, target, run)
        self.settle([f.hour_ms for f in self.report.faults])
        return self.report

    def settle(self, hours: list[int]) -> None:
        """Every tier of every fault's hour has every acknowledged message."""
        verdicts: list[dict] = []
        if not hours:
            return

        def done() -> bool:
            verdicts[:] = [v for h in hours for v in self.watch.verdicts(h, h + HOUR_MS)]
            return settled(verdicts, self.report.acked)

        self.report.settled = wait_until(done, self.args.settle_timeout, interval=2.0)
        self.report.tiers = tier_sums(verdicts)
        produced = self.report.tiers["producer"]["produced"]
        self.report.lost = (sum(t["missing"] for t in self.report.tiers.values())
                            + max(0, self.report.acked - produced))


# ------------------------------------------------------------------ main

def up(args: argparse.Namespace):
    """The lab in the netns runtime, its topics, the mirror, the audit."""
    from infra.local.lab import Lab
    from infra.local.traffic import prepare_clusters
    overrides = dict(item.split("=", 1) for item in args.set)
    topology = drill_topology(args.subnet, args.rtt_ms, overrides, secure=not args.insecure)
    lab = Lab(topology, args.dir, runtime="netns")
    say(f"bringing the lab up in network namespaces ({args.subnet}, {args.rtt_ms:g} ms "
        f"between datacenters)")
    lab.up(timeout=120, mirrors=False)
    try:
        prepare_clusters({lab.zookeeper_connect(c.name): c.topic_partitions()
                          for c in topology.clusters()}, lab.security)
        lab.start_mirrors(timeout=120)
        url = lab.start_audit(grace_ms=AUDIT_GRACE_MS, timeout=120)
    except BaseException:
        lab.down(timeout=20)
        raise
    say(f"the lab is up: the audit service at {url}/ (host audit)")
    return lab, url


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m infra.local.drill_network", description=__doc__,
        epilog=cli.exit_status((0, "nothing acknowledged was lost"),
                               (1, "something was lost, or the drill failed (why above)"),
                               (2, "bad usage, or network namespaces cannot be made here "
                                   "(the reason is printed; 0 with --skip-if-unable)")),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_version_option(p)
    p.add_argument("--dir", default=".drill-network",
                   help="the lab's state directory (default .drill-network)")
    p.add_argument("--subnet", default=DEFAULT_SUBNET,
                   help=f"the network lab's range (default {DEFAULT_SUBNET})")
    p.add_argument("--rtt-ms", type=float, default=40.0,
                   help="round trip of every link between datacenters (default 40)")
    p.add_argument("--cut-seconds", type=float, default=120.0,
                   help="how long dc-a is cut off from analysis, the mirror process from its "
                        "target, and dc-b -> analysis lossy (default 120)")
    p.add_argument("--zk-cut-seconds", type=float, default=30.0,
                   help="how long the broker is cut off from ZooKeeper (default 30; its "
                        "session timeout is 6 s)")
    p.add_argument("--loss", type=float, default=0.05,
                   help="fraction of dc-b -> analysis packets dropped (default 0.05)")
    p.add_argument("--per-round", type=int, default=300,
                   help="events per datacenter per traffic round (default 300)")
    p.add_argument("--settle-timeout", type=float, default=300.0,
                   help="how long to wait for the mirror to catch up and the audit to call "
                        "an hour complete (default 300)")
    p.add_argument("--only", nargs="+", choices=["cut", "broker", "mirror", "one-way"],
                   help="run only these faults (default: all four)")
    p.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a topology override, as `python -m infra.local up --set`")
    p.add_argument("--report", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--keep-up", action="store_true", help="leave the lab running")
    p.add_argument("--insecure", action="store_true",
                   help="run the lab open: no TLS, users, ACLs or ZooKeeper identities "
                        "(default: secured, docs/security.md)")
    p.add_argument("--skip-if-unable", action="store_true",
                   help="where network namespaces cannot be made, say why and exit 0 (make "
                        "drill: the network drill after the process drill, where it can run)")
    sub = p.add_subparsers(dest="command", metavar="[traffic]")
    t = sub.add_parser("traffic", help="(internal) one datacenter's traffic, run by the "
                                       "drill in the datacenter's client host")
    t.add_argument("--dc", required=True, help="the datacenter (cluster) produced to")
    t.add_argument("--lb", required=True, help="its load balancer, HOST:PORT")
    t.add_argument("--zookeeper", required=True, help="its ZooKeeper, with the chroot")
    t.add_argument("--hour-ms", type=int, required=True,
                   help="the hour (its start, ms since the epoch) of the events' times")
    t.add_argument("--per-round", type=int, default=300, help="events per round")
    t.add_argument("--seed", type=int, default=1, help="seed of the events (ids, keys)")
    t.add_argument("--out", required=True, help="where to write what was acknowledged (JSON)")
    t.add_argument("--parent", type=int, required=True,
                   help="the drill's pid: the traffic dies with it")
    t.add_argument("--security-dir", help="a secured lab's secrets: produce as its producer")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "traffic":
        return traffic_main(args)
    # a drill told to stop (SIGTERM) takes everything down on the way out
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from infra.local.lab import Lab, LabError
    from infra.local.network.runner import missing_requirements
    missing = missing_requirements()
    if missing:
        say("skipped: network namespaces cannot be made here; the network drill needs "
            + ", ".join(missing))
        return 0 if args.skip_if_unable else 2
    if os.path.exists(os.path.join(args.dir, "topology.toml")):
        with contextlib.suppress(LabError):          # an earlier run, perhaps left up
            Lab.open(args.dir).down(timeout=20)
        # its brokers' data and audit database would count in this run's hours
        shutil.rmtree(args.dir)
    elif os.path.isdir(args.dir) and os.listdir(args.dir):
        say(f"{os.path.abspath(args.dir)} is not empty and holds no lab: choose another --dir")
        return 2
    lab, url = up(args)
    drill = None
    watch = None
    try:
        watch = Watch(lab, url)
        drill = NetworkDrill(lab, watch, args)
        say(f"seed {args.seed}; faults held {args.cut_seconds:g} s "
            f"(the broker's {args.zk_cut_seconds:g} s)")
        report = drill.run()
        print(report.table(), flush=True)
        if args.report:
            with open(args.report, "w") as f:
                json.dump(report.to_json(), f, indent=2)
    finally:
        if drill is not None and drill.traffic is not None:
            drill.traffic.kill()
        if watch is not None:
            watch.close()
        if not args.keep_up:
            lab.down(timeout=20)
            say("the lab is down")
    return 0 if report.lost == 0 and report.settled else 1


if __name__ == "__main__":
    sys.exit(main())
