"""Scale: a control plane of its own under hollow nodes and 10,000 pods, per cluster size.

For each size (default 100, 1,000 and 5,000 nodes) it starts a fresh etcd, RabbitMQ,
apiserver, scheduler and controller-manager in a temporary directory (the process
classes of ``tests/conftest.py``), then ``minik8s-kubelet --hollow`` processes of up to
``--nodes-per-kubelet`` nodes each: real Node objects with heartbeats and pods reported
Running, no containers. Once every node is Ready it creates the pods as ReplicaSets
(100 pods each) and, until every pod is Running, follows one watch on the pods and times
per pod, from the moment the bench saw it ADDED: to ``spec.nodeName`` set (bound) and to
Running. Then ``--latency-pods`` more pods are created one by one at 10/s on the full
cluster (upstream's density test method) and timed from their create request.
Meanwhile a probe PATCHes an annotation of one Service every ~100 ms (apiserver write
latency) and a sampler reads VmRSS and CPU time of every process group (each daemon
with its children) once a second.

Settings of the bench's control plane: log level WARNING everywhere, resyncs every
hour (none during a run), the hollow nodes' heartbeat interval stretched so that all
of them together give about ``--heartbeats-per-second`` heartbeats (each a Lease renewal
and a read of the Node from the apiserver's cache; the status only when it changes), and the node
lifecycle controller's grace period four heartbeat intervals (at least 40 s), so a
node whose heartbeats queue behind the load is not evicted; the figures say which.

    .venv/bin/python bench/scale.py [--nodes 100,1000,5000] [--pods 10000] [--write BENCHMARKS.md]

Prints the machine, the settings and one table per size; ``--write FILE`` also puts
each size's table into FILE (between ``<!-- scale:N -->`` markers, others kept).
Every process is stopped and the temporary directory removed after each size.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.stats import percentile  # noqa: E402
from daemons.api import kubeconfig  # noqa: E402
from daemons.api.client import ApiClient  # noqa: E402
from daemons.api.resources import resolve  # noqa: E402
from tests.conftest import (  # noqa: E402
    ApiServerProcess,
    ControllerManagerProcess,
    EtcdProcess,
    RabbitMQProcess,
    SchedulerProcess,
    ServiceProcess,
    daemon_environment,
    free_port,
    make_pki,
)

PODS = resolve("pods")
NODES = resolve("nodes")
NAMESPACES = resolve("namespaces")
SERVICES = resolve("services")
REPLICASETS = resolve("replicasets")
NAMESPACE = "scale"
PODS_PER_REPLICASET = 100
LATENCY_POD_RATE = 10.0  # latency pods created per second
PROBE_PERIOD = 0.1
RESYNC_SECONDS = "3600"
LOG_LEVEL = "WARNING"
CONTROL_PLANE = ("apiserver", "scheduler", "controller-manager", "etcd", "rabbitmq")

TARGET_PODS_PER_SECOND = 300.0  # at 1,000 nodes
TARGET_STARTUP_P99 = 5.0  # seconds, at 1,000 nodes and 10,000 pods
TARGET_WRITE_P99 = 1.0  # seconds
TARGET_CONTROL_PLANE_RSS = 4 * 1024**3  # bytes, at 5,000 nodes
UPSTREAM_PODS_PER_SECOND = "680-810"  # Kubernetes' published scheduler throughput at 5,000 nodes
Obj = dict[str, Any]


# --- the processes ------------------------------------------------------------------------------------


class HollowKubeletProcess(ServiceProcess):
    """``minik8s-kubelet --hollow``: ``count`` nodes named ``<name>-0000``... in one process, no containers."""

    name = "hollow-kubelet"

    def __init__(self, workdir: Path, apiserver: ApiServerProcess, amqp_url: str, node_name: str, count: int,
                 status_interval: float) -> None:
        super().__init__(workdir)
        self.apiserver, self.amqp_url, self.count, self.status_interval = apiserver, amqp_url, count, status_interval
        self.node_prefix = f"{node_name}-"
        (workdir / "node.yaml").write_text(yaml.safe_dump({"name": node_name, "roles": ["worker"],
                                                            "labels": {"minik8s.io/hollow": "true"}}))

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name("minik8s-kubelet")), "--hollow",
                "--hollow-nodes", str(self.count), "--node-config", str(self.workdir / "node.yaml"),
                "--kubeconfig", str(self.apiserver.kubeconfig), "--amqp-url", self.amqp_url,
                "--status-interval", f"{self.status_interval:g}", "--resync-seconds", RESYNC_SECONDS,
                "--log-level", LOG_LEVEL, "--root-dir", str(self.workdir / "root"),
                "--bind-address", "127.0.0.1", "--port", str(free_port()),
                "--pod-cidr-file", str(self.workdir / "no-subnet.env")]

    def environment(self) -> dict[str, str]:
        return daemon_environment()

    def is_ready(self) -> bool:
        return True  # its nodes' readiness is what the bench waits for, all processes at once


@dataclass(frozen=True)
class Settings:
    """How the bench runs one size's control plane and nodes, printed with the figures."""

    nodes: int
    pods: int
    nodes_per_kubelet: int
    status_interval: float
    grace_period: float

    @classmethod
    def for_size(cls, nodes: int, pods: int, nodes_per_kubelet: int, heartbeats_per_second: float) -> Settings:
        interval = max(10.0, nodes / heartbeats_per_second)
        return cls(nodes, pods, nodes_per_kubelet, interval, max(40.0, 4 * interval))

    def describe(self) -> str:
        kubelets = -(-self.nodes // self.nodes_per_kubelet)
        return (f"{self.nodes} hollow nodes in {kubelets} kubelet process(es), heartbeat every "
                f"{self.status_interval:g} s; controller-manager --node-monitor-grace-period {self.grace_period:g} s; "
                f"resync {RESYNC_SECONDS} s, log level {LOG_LEVEL}")


class ControlPlane:
    """etcd, RabbitMQ, apiserver, scheduler, controller-manager and the hollow kubelets, all in ``workdir``."""

    def __init__(self, workdir: Path, settings: Settings) -> None:
        self.workdir, self.settings = workdir, settings
        self.etcd = EtcdProcess(workdir / "etcd")
        self.rabbitmq = RabbitMQProcess(workdir / "rabbitmq")
        self.apiserver: ApiServerProcess | None = None
        self.daemons: list[ServiceProcess] = []
        self.kubelets: list[HollowKubeletProcess] = []

    def start(self) -> None:
        self.etcd.start()
        self.rabbitmq.start()
        self.apiserver = ApiServerProcess(self.workdir / "apiserver", self.etcd.endpoint, self.rabbitmq.url,
                                          make_pki(self.workdir / "pki"), extra_args=["--log-level", LOG_LEVEL])
        self.apiserver.start()
        common = ("--amqp-url", self.rabbitmq.url, "--log-level", LOG_LEVEL, "--resync-seconds", RESYNC_SECONDS)
        self.daemons = [
            SchedulerProcess(self.workdir / "scheduler", self.apiserver, *common),
            ControllerManagerProcess(self.workdir / "controller-manager", self.apiserver, *common,
                                     "--node-monitor-grace-period", f"{self.settings.grace_period:g}"),
        ]
        for daemon in self.daemons:
            daemon.start()
        remaining, index = self.settings.nodes, 0
        while remaining > 0:
            count = min(remaining, self.settings.nodes_per_kubelet)
            name = f"hollow{index:02d}"
            kubelet = HollowKubeletProcess(self.workdir / name, self.apiserver, self.rabbitmq.url, name, count,
                                           self.settings.status_interval)
            self.kubelets.append(kubelet)
            kubelet.start()
            remaining, index = remaining - count, index + 1

    def groups(self) -> dict[str, list[int]]:
        """Process group leaders per component (every service runs in a process group of its own)."""
        found: dict[str, list[int]] = {}
        for process in (self.etcd, self.rabbitmq, self.apiserver, *self.daemons, *self.kubelets):
            if process is not None and process.process is not None:
                found.setdefault(process.name, []).append(process.process.pid)
        if self.rabbitmq.epmd is not None:
            found.setdefault(self.rabbitmq.name, []).append(self.rabbitmq.epmd.pid)
        return found

    def stop(self) -> None:
        """Every process, each step on its own so that one failing leaves none of the others running."""
        steps: list[Callable[[], Any]] = [*(k.stop for k in self.kubelets), *(d.stop for d in self.daemons)]
        if self.apiserver is not None:
            steps.append(self.apiserver.stop)
        steps += [self.rabbitmq.terminate, self.etcd.stop]
        for step in steps:
            try:
                step()
            except Exception as error:
                print(f"shutdown: {error}", file=sys.stderr)


# --- what is measured ---------------------------------------------------------------------------------


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_groups() -> dict[int, list[tuple[int, float]]]:
    """Every process as (pid, CPU seconds used) by its process group id, from /proc/<pid>/stat."""
    groups: dict[int, list[tuple[int, float]]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(entry.path, "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()  # after the name: state, ppid, pgrp, ... utime, stime
            cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            groups.setdefault(int(fields[2]), []).append((int(entry.name), cpu))
    return groups


def vm_rss(pid: int) -> int:
    """VmRSS of ``pid`` in bytes (0 once it is gone)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """Once a second: each component's RSS and CPU time (all processes of its groups); keeps each one's peak RSS,
    the control plane's peak total, and the CPU time used since ``mark()``."""

    def __init__(self, groups: Callable[[], dict[str, list[int]]]) -> None:
        self.groups = groups
        self.peak: dict[str, int] = {}
        self.peak_per_kubelet = 0
        self.peak_control_plane = 0
        self.cpu: dict[str, float] = {}
        self.cpu_at_mark: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def sample(self) -> None:
        members = proc_groups()
        totals: dict[str, int] = {}
        with self._lock:
            for component, leaders in self.groups().items():
                processes = [members.get(leader, []) for leader in leaders]
                sizes = [sum(vm_rss(pid) for pid, _ in group) for group in processes]
                totals[component] = sum(sizes)
                cpu = sum(seconds for group in processes for _, seconds in group)
                self.cpu[component] = max(self.cpu.get(component, 0.0), cpu)
                if component == HollowKubeletProcess.name and sizes:
                    self.peak_per_kubelet = max(self.peak_per_kubelet, max(sizes))
            for component, size in totals.items():
                self.peak[component] = max(self.peak.get(component, 0), size)
            self.peak_control_plane = max(self.peak_control_plane, sum(totals.get(c, 0) for c in CONTROL_PLANE))

    def mark(self) -> None:
        """From now on: the CPU time of the run itself."""
        self.sample()
        with self._lock:
            self.cpu_at_mark = dict(self.cpu)

    def cpu_since_mark(self) -> dict[str, float]:
        with self._lock:
            return {name: seconds - self.cpu_at_mark.get(name, 0.0) for name, seconds in self.cpu.items()}

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class WriteProbe:
    """PATCHes an annotation of one Service every ~100 ms on a connection of its own; the durations, in s."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client = ApiClient(client.connection)
        self.namespace = namespace
        self.samples: list[float] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="write-probe", daemon=True)
        self.client.create(SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "write-probe"},
                                      "spec": {"ports": [{"port": 80}]}}, namespace)

    def _run(self) -> None:
        count = 0
        while not self._stop.is_set():
            count += 1
            began = time.perf_counter()
            try:
                self.client.patch(SERVICES, "write-probe", {"metadata": {"annotations": {"probe": str(count)}}},
                                  self.namespace)
                self.samples.append(time.perf_counter() - began)
            except Exception:
                self.failures += 1
            self._stop.wait(max(0.0, PROBE_PERIOD - (time.perf_counter() - began)))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.client.close()


def running(pod: Obj) -> bool:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return status.get("phase") == "Running" and bool(containers) and all(
        "running" in (container.get("state") or {}) for container in containers)


class PodTimeline:
    """One watch on the namespace's pods: when the bench first saw each pod ADDED, bound and Running."""

    def __init__(self, client: ApiClient, namespace: str) -> None:
        self.client, self.namespace = ApiClient(client.connection, timeout=120), namespace
        self.added: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.deleted = 0
        self.changed = threading.Condition()
        self._stopping = threading.Event()
        self._version = self.client.list(PODS, namespace)["metadata"]["resourceVersion"]
        threading.Thread(target=self._follow, name="pod-watch", daemon=True).start()

    def _follow(self) -> None:
        while not self._stopping.is_set():
            try:
                for event in self.client.watch(PODS, self.namespace, resource_version=self._version,
                                               timeout_seconds=3600):
                    self._seen(event)
            except Exception as error:  # the stream broke: resume from the last revision seen
                if not self._stopping.is_set():
                    print(f"pod watch: {error}; resuming", file=sys.stderr)
                    time.sleep(0.5)

    def close(self) -> None:
        """Stop following; the stream itself ends with the apiserver (closing it from here could break TLS)."""
        self._stopping.set()

    def _seen(self, event: Obj) -> None:
        now, pod = time.perf_counter(), event["object"]
        if event["type"] == "ERROR":
            raise RuntimeError(f"watch error: {pod.get('message')}")
        metadata = pod["metadata"]
        self._version = metadata.get("resourceVersion", self._version)
        name = metadata["name"]
        with self.changed:
            if event["type"] == "DELETED" or metadata.get("deletionTimestamp"):
                if event["type"] == "DELETED":
                    self.deleted += 1
                return
            self.added.setdefault(name, now)
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound.setdefault(name, now)
            if running(pod):
                self.running.setdefault(name, now)
            self.changed.notify_all()

    def wait(self, done: Callable[[], bool], deadline: float) -> bool:
        """Wait until ``done()`` (called under the lock) holds or the monotonic ``deadline`` passes."""
        with self.changed:
            return self.changed.wait_for(done, timeout=max(0.0, deadline - time.monotonic()))


def pod_template(app: str) -> Obj:
    return {"metadata": {"labels": {"app": app}},
            "spec": {"terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "pause", "image": "pause:latest",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def replicaset(name: str, replicas: int) -> Obj:
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": pod_template(name)}}


def node_ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def ready_nodes(client: ApiClient) -> int:
    return sum(node_ready(node) for node in client.list(NODES)["items"])


# --- one size -----------------------------------------------------------------------------------------


@dataclass
class Result:
    settings: Settings
    complete: bool = True
    note: str = ""
    registered_s: float = 0.0
    created_per_s: float = 0.0
    pods_per_s: float = 0.0
    all_running_s: float = 0.0
    bind: list[float] = field(default_factory=list)
    startup: list[float] = field(default_factory=list)
    latency_bind: list[float] = field(default_factory=list)
    latency_startup: list[float] = field(default_factory=list)
    writes: list[float] = field(default_factory=list)
    write_failures: int = 0
    rss: dict[str, int] = field(default_factory=dict)
    rss_per_kubelet: int = 0
    rss_control_plane: int = 0
    not_ready_at_end: int = 0
    pods_deleted: int = 0
    load: list[float] = field(default_factory=list)  # 1-minute load average at the start and at the end
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per component from the first pod on
    run_s: float = 0.0  # how long that was


def measure(client: ApiClient, plane: ControlPlane, sampler: RssSampler, settings: Settings, latency_pods: int,
            deadline: float, result: Result) -> None:
    """The run itself, filling ``result`` as it goes (a run cut short by ``deadline`` keeps what it measured)."""
    began = time.monotonic()
    while ready_nodes(client) < settings.nodes:
        if time.monotonic() > deadline or any(not k.running for k in plane.kubelets):
            raise TimeoutError(f"only {ready_nodes(client)} of {settings.nodes} nodes Ready")
        time.sleep(max(3.0, settings.nodes / 500))  # a LIST of every node is no small request either
    result.registered_s = time.monotonic() - began
    print(f"  {settings.nodes} nodes Ready after {result.registered_s:.0f} s; creating {settings.pods} pods",
          flush=True)

    client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    sampler.mark()
    run_began = time.monotonic()
    timeline = PodTimeline(client, NAMESPACE)
    probe = WriteProbe(client, NAMESPACE)
    probe.start()
    try:
        sets = -(-settings.pods // PODS_PER_REPLICASET)
        for index in range(sets):
            size = min(PODS_PER_REPLICASET, settings.pods - index * PODS_PER_REPLICASET)
            client.create(REPLICASETS, replicaset(f"scale-{index:03d}", size), NAMESPACE)
        if not timeline.wait(lambda: len(timeline.running) >= settings.pods, deadline):
            result.complete = False
            result.note = (f"cut short: {len(timeline.running)} of {settings.pods} pods Running, "
                           f"{len(timeline.bound)} bound")
        with timeline.changed:
            added, bound, run = dict(timeline.added), dict(timeline.bound), dict(timeline.running)
        if bound:
            first = min(added.values())
            result.created_per_s = len(added) / max(1e-3, max(added.values()) - first)
            result.pods_per_s = len(bound) / max(1e-3, max(bound.values()) - first)
            result.bind = [bound[name] - added[name] for name in bound]
        if run:
            result.startup = [run[name] - added[name] for name in run]
            result.all_running_s = max(run.values()) - min(added.values())
        print(f"  saturation done: {len(run)} Running; {latency_pods} latency pods at {LATENCY_POD_RATE:g}/s",
              flush=True)
        if result.complete and latency_pods:
            measure_latency_pods(client, timeline, latency_pods, deadline, result)
    finally:
        probe.stop()
        result.writes, result.write_failures = probe.samples, probe.failures
        result.pods_deleted = timeline.deleted
        timeline.close()
        sampler.sample()
        result.cpu, result.run_s = sampler.cpu_since_mark(), time.monotonic() - run_began
    result.not_ready_at_end = settings.nodes - ready_nodes(client)


def measure_latency_pods(client: ApiClient, timeline: PodTimeline, count: int, deadline: float,
                         result: Result) -> None:
    """Pods created one at a time at a steady low rate on the loaded cluster, each timed from its create request."""
    sent: dict[str, float] = {}
    for index in range(count):
        name = f"latency-{index:04d}"
        template = pod_template("latency")
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **template["metadata"]},
                "spec": template["spec"]}
        sent[name] = time.perf_counter()
        client.create(PODS, body, NAMESPACE)
        time.sleep(max(0.0, 1 / LATENCY_POD_RATE - (time.perf_counter() - sent[name])))
    if not timeline.wait(lambda: all(name in timeline.running for name in sent), deadline):
        result.complete = False
        result.note = "cut short: not every latency pod Running"
    with timeline.changed:
        result.latency_bind = [timeline.bound[n] - sent[n] for n in sent if n in timeline.bound]
        result.latency_startup = [timeline.running[n] - sent[n] for n in sent if n in timeline.running]


def run_size(settings: Settings, latency_pods: int, size_timeout: float) -> Result:
    """A fresh control plane and nodes for one size, measured, then stopped and removed."""
    result = Result(settings)
    workdir = Path(tempfile.mkdtemp(prefix=f"minik8s-scale-{settings.nodes}-"))
    plane = ControlPlane(workdir, settings)
    sampler = RssSampler(plane.groups)
    deadline = time.monotonic() + size_timeout
    result.load.append(os.getloadavg()[0])
    try:
        print(f"{settings.nodes} nodes: starting the control plane and hollow kubelets in {workdir}", flush=True)
        sampler.start()
        plane.start()
        assert plane.apiserver is not None
        with ApiClient(kubeconfig.load(plane.apiserver.kubeconfig), timeout=120) as client:
            measure(client, plane, sampler, settings, latency_pods, deadline, result)
    except Exception as error:  # a failed or cut-short run still reports what it measured
        result.complete = False
        result.note = result.note or f"cut short: {error}"
    finally:
        sampler.stop()
        result.rss, result.rss_per_kubelet = sampler.peak, sampler.peak_per_kubelet
        result.rss_control_plane = sampler.peak_control_plane
        result.load.append(os.getloadavg()[0])
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return result


# --- the figures --------------------------------------------------------------------------------------


def machine() -> str:
    """The machine the figures come from, as the bench saw it."""
    memory = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal:"))
    model = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
    return (f"{os.cpu_count()} CPUs ({model.group(1).strip() if model else platform.machine()}), "
            f"{memory / 1024**3:.1f} GiB RAM, Linux {platform.release()}, Python {platform.python_version()}")


def revision() -> str:
    """The checkout measured: its commit, and whether files differed from it."""
    described = subprocess.run(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"], capture_output=True,
                               text=True, check=False).stdout.strip()
    return described or "unknown"


def mib(size: int) -> str:
    return f"{size / 1024**2:,.0f} MiB"


def ms(samples: list[float], p: float | None = None) -> str:
    if not samples:
        return "-"
    value = statistics.fmean(samples) if p is None else percentile(samples, p)
    return f"{value * 1000:,.0f} ms"


def cpu(result: Result, component: str) -> str:
    """CPU seconds a component used during the run, and how many cores that kept busy on average."""
    seconds = result.cpu.get(component, 0.0)
    return f"{seconds:,.1f} s ({seconds / result.run_s:.2f} cores)" if result.run_s else "-"


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def figures(result: Result) -> list[tuple[str, str, str]]:
    """The rows of one size's table: (figure, measured, target)."""
    s = result.settings
    at_1000, at_5000 = s.nodes == 1000, s.nodes == 5000
    startup_p99 = percentile(result.startup, 99) if result.startup else float("inf")
    write_p99 = percentile(result.writes, 99) if result.writes else float("inf")
    rows = [
        ("pods created (ReplicaSet controller)", f"{result.created_per_s:,.0f} pods/s", ""),
        ("scheduling throughput", f"{result.pods_per_s:,.0f} pods/s",
         (f">= {TARGET_PODS_PER_SECOND:.0f} pods/s: {verdict(result.pods_per_s >= TARGET_PODS_PER_SECOND)}"
          if at_1000 else "") + (f"; Kubernetes: {UPSTREAM_PODS_PER_SECOND} pods/s at 5,000 nodes"
                                 if at_1000 or at_5000 else "")),
        ("create -> bound avg / p99", f"{ms(result.bind)} / {ms(result.bind, 99)}", ""),
        ("create -> Running p50 / p99", f"{ms(result.startup, 50)} / {ms(result.startup, 99)}",
         f"p99 <= {TARGET_STARTUP_P99:g} s: {verdict(startup_p99 <= TARGET_STARTUP_P99)}" if at_1000 else ""),
        (f"all {s.pods:,} pods Running after" if result.complete else "last pod Running after",
         f"{result.all_running_s:,.1f} s", ""),
        (f"latency pods ({len(result.latency_startup)} at {LATENCY_POD_RATE:g}/s) -> bound p50 / p99",
         f"{ms(result.latency_bind, 50)} / {ms(result.latency_bind, 99)}", ""),
        ("latency pods -> Running p50 / p99",
         f"{ms(result.latency_startup, 50)} / {ms(result.latency_startup, 99)}", ""),
        (f"apiserver write (PATCH) p99, n={len(result.writes)}",
         f"{ms(result.writes, 99)} (max {ms([max(result.writes)] if result.writes else [])})",
         f"<= {TARGET_WRITE_P99:g} s: {verdict(write_p99 <= TARGET_WRITE_P99)}"),
    ]
    rows += [(f"{name}: peak RSS / CPU in the run", f"{mib(result.rss.get(name, 0))} / {cpu(result, name)}", "")
             for name in CONTROL_PLANE]
    rows.append(("peak RSS control plane (sum)", mib(result.rss_control_plane),
                 f"<= 4 GiB: {verdict(result.rss_control_plane <= TARGET_CONTROL_PLANE_RSS)}" if at_5000 else ""))
    kubelets = -(-s.nodes // s.nodes_per_kubelet)
    rows.append((f"hollow kubelets ({kubelets}): peak RSS / CPU in the run",
                 f"{mib(result.rss.get(HollowKubeletProcess.name, 0))} / {cpu(result, HollowKubeletProcess.name)}",
                 f"largest process {mib(result.rss_per_kubelet)}"))
    rows.append(("nodes Ready to start / not Ready at end",
                 f"{result.registered_s:.0f} s / {result.not_ready_at_end}", ""))
    rows.append(("pods deleted during the run (evictions)", str(result.pods_deleted), ""))
    rows.append(("load average (1 min) at start / end", " / ".join(f"{load:.1f}" for load in result.load), ""))
    if result.write_failures:
        rows.append(("probe writes failed", str(result.write_failures), ""))
    return rows


def print_result(result: Result) -> None:
    print(f"\n{result.settings.nodes:,} nodes, {result.settings.pods:,} pods: {result.settings.describe()}")
    if result.note:
        print(f"INCOMPLETE: {result.note}")
    rows = figures(result)
    width = max(len(name) for name, _, _ in rows) + 2
    for name, value, target in rows:
        print(f"  {name:<{width}}{value:>24}   {target}")


def markdown(result: Result, host: str, checkout: str, command: str) -> str:
    """One size's section of BENCHMARKS.md, between its markers."""
    s = result.settings
    lines = [f"<!-- scale:{s.nodes} -->", f"### {s.nodes:,} nodes, {s.pods:,} pods", "",
             f"Machine: {host}. Checkout: {checkout}. Command: `{command}`. {s.describe()}.", ""]
    if result.note:
        lines += [f"**Incomplete run** ({result.note}).", ""]
    lines += ["| figure | measured | target |", "|---|---:|---|"]
    lines += [f"| {name} | {value} | {target} |" for name, value, target in figures(result)]
    lines += ["", f"<!-- /scale:{s.nodes} -->"]
    return "\n".join(lines)


def write_section(text: str, nodes: int, section: str) -> str:
    """``text`` with the ``nodes`` section replaced by ``section``, or ``section`` added in order of size."""
    block = re.compile(rf"<!-- scale:{nodes} -->.*?<!-- /scale:{nodes} -->", re.S)
    if block.search(text):
        return block.sub(lambda _: section, text)
    later = [(int(m.group(1)), m.start()) for m in re.finditer(r"<!-- scale:(\d+) -->", text)]
    after = [start for size, start in later if size > nodes]
    if after:
        return text[:min(after)] + section + "\n\n" + text[min(after):]
    return text.rstrip("\n") + "\n\n" + section + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="100,1000,5000", help="cluster sizes, comma-separated")
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--latency-pods", type=int, default=100, help="pods created at 10/s after the others")
    parser.add_argument("--nodes-per-kubelet", type=int, default=1000)
    parser.add_argument("--heartbeats-per-second", type=float, default=50.0,
                        help="heartbeats per second of all hollow nodes together (interval at least 10 s)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds one size may take at most")
    parser.add_argument("--write", metavar="FILE", help="also put each size's table into FILE")
    args = parser.parse_args()
    sizes = [int(size) for size in args.nodes.split(",") if size.strip()]

    host = machine()
    command = " ".join(["bench/scale.py", *sys.argv[1:]])
    checkout = revision()
    print(f"machine: {host}; checkout {checkout}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for nodes in sizes:
        settings = Settings.for_size(nodes, args.pods, args.nodes_per_kubelet, args.heartbeats_per_second)
        result = run_size(settings, args.latency_pods, args.timeout)
        print_result(result)
        if args.write:
            path = Path(args.write)
            path.write_text(write_section(path.read_text() if path.exists() else "", nodes,
                                          markdown(result, host, checkout, command)))
            print(f"  written to {path}")


if __name__ == "__main__":
    main()
