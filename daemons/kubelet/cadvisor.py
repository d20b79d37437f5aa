"""Container metrics in cAdvisor's format, read from cgroup v1 and the pods' network namespaces.

No cAdvisor runs on these machines, so the kubelet serves what Prometheus, the
metrics API and the autoscaler read from it under cAdvisor's names and labels:
``container_cpu_usage_seconds_total``, ``container_memory_working_set_bytes``,
``container_memory_usage_bytes`` and the ``container_network_*`` counters, labelled
``container``, ``pod``, ``namespace``, ``id`` (the cgroup), ``image`` and ``name``
(Docker's name). The pause container is ``container="POD"`` and carries the pod's
network counters; the node's totals have ``id="/"`` and empty pod labels.

A scrape lists the node's running containers once; where each container's
cgroups are and which process holds its network namespace is asked of Docker
only the first time the container is seen. The parsers take text and return
numbers, so tests feed them files' contents.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import docker.errors
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from daemons.kubelet.runtime import DOCKER_ERRORS, DockerRuntime
from daemons.kubelet.spec import (
    KIND_PAUSE,
    LABEL_CONTAINER_KIND,
    LABEL_CONTAINER_NAME,
    LABEL_NODE,
    LABEL_POD_NAME,
    LABEL_POD_NAMESPACE,
    POD_CONTAINER_NAME,
)

log = logging.getLogger(__name__)

CPU_CONTROLLER = "cpuacct"
MEMORY_CONTROLLER = "memory"
# Interfaces cAdvisor leaves out of the network series.
IGNORED_INTERFACES = frozenset({"lo"})
# Options of a cgroup v1 mount that are not controllers.
MOUNT_FLAGS = frozenset({"rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods"})
LABELS = ("container", "id", "image", "name", "namespace", "pod")
NETWORK_LABELS = (*LABELS, "interface")

# --- parsing (pure) ---------------------------------------------------------------------------------


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` as controller -> cgroup path, for the v1 hierarchies (``N:cpu,cpuacct:/docker/x``)."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[1]:
            continue  # the v2 line ("0::/path") names no controller
        for controller in parts[1].split(","):
            paths[controller] = parts[2]
    return paths


def parse_cgroup_mounts(mountinfo: str) -> dict[str, tuple[str, str]]:
    """``/proc/self/mountinfo``'s cgroup v1 mounts as controller -> (root of the hierarchy mounted, mount point)."""
    mounts: dict[str, tuple[str, str]] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        separator = fields.index("-")
        if len(fields) < separator + 4 or fields[separator + 1] != "cgroup":
            continue
        root, mount_point = fields[3], fields[4]
        for option in fields[separator + 3].split(","):
            if option not in MOUNT_FLAGS and ("=" not in option or option.startswith("name=")):
                mounts.setdefault(option, (root, mount_point))
    return mounts


def cgroup_directory(mounts: Mapping[str, tuple[str, str]], controller: str, path: str) -> str | None:
    """Where the cgroup ``path`` of ``controller`` lies in this machine's file system; None when not mounted."""
    mount = mounts.get(controller)
    if mount is None:
        return None
    root, mount_point = mount
    relative = path[len(root):] if root != "/" and (path == root or path.startswith(root + "/")) else path
    return mount_point.rstrip("/") + "/" + relative.strip("/") if relative.strip("/") else mount_point


def parse_cpuacct_usage(text: str) -> float:
    """``cpuacct.usage`` (nanoseconds) in seconds."""
    return int(text.strip()) / 1e9


def parse_memory_stat(text: str) -> dict[str, int]:
    """``memory.stat`` as name -> value."""
    stats = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            stats[name] = int(value)
    return stats


def working_set(usage: int, stat: Mapping[str, int]) -> int:
    """Memory the cgroup cannot give back easily: usage less the inactive page cache, as cAdvisor counts it."""
    inactive_file = stat.get("total_inactive_file", stat.get("inactive_file", 0))
    return max(usage - inactive_file, 0)


@dataclass(frozen=True)
class InterfaceCounters:
    receive_bytes: int
    receive_packets: int
    receive_errors: int
    transmit_bytes: int
    transmit_packets: int
    transmit_errors: int


def parse_net_dev(text: str) -> dict[str, InterfaceCounters]:
    """``/proc/<pid>/net/dev`` as interface -> counters, loopback left out."""
    interfaces = {}
    for line in text.splitlines():
        name, colon, rest = line.partition(":")
        values = rest.split()
        if not colon or len(values) < 11 or not values[0].isdigit():
            continue
        name = name.strip()
        if name in IGNORED_INTERFACES:
            continue
        numbers = [int(value) for value in values[:16]]
        interfaces[name] = InterfaceCounters(numbers[0], numbers[1], numbers[2], numbers[8], numbers[9], numbers[10])
    return interfaces


# --- rendering (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Identity:
    """Who a sample is about: the label values of its series."""

    id: str  # the cgroup path, "/" for the node
    name: str = ""
    image: str = ""
    namespace: str = ""
    pod: str = ""
    container: str = ""

    def labels(self) -> list[str]:
        return [self.container, self.id, self.image, self.name, self.namespace, self.pod]


@dataclass(frozen=True)
class Sample:
    """What one cgroup (and, for a sandbox or the node, one network namespace) reads now; None: unreadable."""

    identity: Identity
    cpu_seconds: float | None = None
    memory_usage: int | None = None
    memory_working_set: int | None = None
    network: Mapping[str, InterfaceCounters] = field(default_factory=dict)


NETWORK_SERIES = (
    ("container_network_receive_bytes_total", "Cumulative count of bytes received", "receive_bytes"),
    ("container_network_receive_packets_total", "Cumulative count of packets received", "receive_packets"),
    ("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving",
     "receive_errors"),
    ("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", "transmit_bytes"),
    ("container_network_transmit_packets_total", "Cumulative count of packets transmitted", "transmit_packets"),
    ("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting",
     "transmit_errors"),
)


def metric_families(samples: Iterable[Sample]) -> list[Metric]:
    """The samples as cAdvisor's metric families."""
    cpu = CounterMetricFamily("container_cpu_usage_seconds_total", "Cumulative cpu time consumed in seconds.",
                              labels=LABELS)
    usage = GaugeMetricFamily("container_memory_usage_bytes",
                              "Current memory usage in bytes, including all memory regardless of when it was accessed",
                              labels=LABELS)
    working = GaugeMetricFamily("container_memory_working_set_bytes", "Current working set in bytes.", labels=LABELS)
    network = [CounterMetricFamily(name, text, labels=NETWORK_LABELS) for name, text, _ in NETWORK_SERIES]
    for sample in samples:
        labels = sample.identity.labels()
        if sample.cpu_seconds is not None:
            cpu.add_metric(labels, sample.cpu_seconds)
        if sample.memory_usage is not None:
            usage.add_metric(labels, float(sample.memory_usage))
        if sample.memory_working_set is not None:
            working.add_metric(labels, float(sample.memory_working_set))
        for interface, counters in sorted(sample.network.items()):
            for family, (_, _, attribute) in zip(network, NETWORK_SERIES, strict=True):
                family.add_metric([*labels, interface], float(getattr(counters, attribute)))
    return [cpu, usage, working, *network]


class _Families:
    """A collector handing prometheus_client metric families made elsewhere."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render(samples: Iterable[Sample]) -> bytes:
    """The Prometheus text exposition of ``samples``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(metric_families(samples)))  # type: ignore[arg-type]
    return generate_latest(registry)


# --- reading the machine ------------------------------------------------------------------------------


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read()


@dataclass(frozen=True)
class Located:
    """Where a running container's numbers are: its cgroup directories and, for a sandbox, its network."""

    key: str  # the container's id and creation time: a new container is located afresh
    identity: Identity
    cpu_dir: str | None
    memory_dir: str | None
    net_dev: str | None  # /proc/<pid>/net/dev of a sandbox with a network of its own


def read_sample(identity: Identity, cpu_dir: str | None, memory_dir: str | None, net_dev: str | None) -> Sample:
    """Read one cgroup's counters; a file that cannot be read leaves its series out. OSError only if all fail."""
    cpu = memory = working = None
    network: dict[str, InterfaceCounters] = {}
    failures = 0
    if cpu_dir is not None:
        try:
            cpu = parse_cpuacct_usage(_read(f"{cpu_dir}/cpuacct.usage"))
        except (OSError, ValueError):
            failures += 1
    if memory_dir is not None:
        try:
            memory = int(_read(f"{memory_dir}/memory.usage_in_bytes"))
            working = working_set(memory, parse_memory_stat(_read(f"{memory_dir}/memory.stat")))
        except (OSError, ValueError):
            failures += 1
    if net_dev is not None:
        try:
            network = parse_net_dev(_read(net_dev))
        except OSError:
            failures += 1
    if failures and failures == sum(place is not None for place in (cpu_dir, memory_dir, net_dev)):
        raise OSError(f"no counters readable for {identity.id}")
    return Sample(identity, cpu, memory, working, network)


class ContainerMetrics:
    """Scrapes of this node's pod containers and totals; safe to call from several request threads."""

    def __init__(self, runtime: DockerRuntime, proc: str = "/proc") -> None:
        self.runtime = runtime
        self.proc = proc
        self.mounts = parse_cgroup_mounts(_read(f"{proc}/self/mountinfo"))
        self._located: dict[str, Located] = {}
        self._lock = threading.Lock()

    def scrape(self) -> bytes:
        """The text exposition of every running pod container of this node, and of the node."""
        return render(self.samples())

    def samples(self) -> list[Sample]:
        samples = [self._node_sample()]
        for located in self._running():
            try:
                samples.append(read_sample(located.identity, located.cpu_dir, located.memory_dir, located.net_dev))
            except OSError as error:
                log.debug("%s/%s: container %s gone while read: %s", located.identity.namespace,
                          located.identity.pod, located.identity.container, error)
                with self._lock:
                    self._located.pop(located.key, None)
        return samples

    def _node_sample(self) -> Sample:
        cpu_dir = cgroup_directory(self.mounts, CPU_CONTROLLER, "/")
        memory_dir = cgroup_directory(self.mounts, MEMORY_CONTROLLER, "/")
        return read_sample(Identity("/"), cpu_dir, memory_dir, f"{self.proc}/self/net/dev")

    def _running(self) -> list[Located]:
        """The node's running pod containers, from one listing; new ones are located once and remembered."""
        try:
            summaries = self.runtime.client.api.containers(
                filters={"label": [f"{LABEL_NODE}={self.runtime.node_name}"], "status": "running"})
        except DOCKER_ERRORS as error:
            log.warning("cannot list the pods' containers for metrics: %s", error)
            return []
        found = []
        with self._lock:
            known = dict(self._located)
        current: dict[str, Located] = {}
        for summary in summaries:
            key = f"{summary['Id']}:{summary.get('Created', '')}"
            located = known.get(key) or self._locate(key, summary)
            if located is not None:
                current[key] = located
                found.append(located)
        with self._lock:
            self._located = current
        return found

    def _locate(self, key: str, summary: Mapping[str, Any]) -> Located | None:
        """Ask Docker for the container's process once, and read where its cgroups and network are."""
        labels = summary.get("Labels") or {}
        try:
            attrs = self.runtime.client.api.inspect_container(summary["Id"])
        except docker.errors.NotFound:
            return None
        except DOCKER_ERRORS as error:
            log.warning("%s/%s: cannot inspect container %s for metrics: %s", labels.get(LABEL_POD_NAMESPACE),
                        labels.get(LABEL_POD_NAME), summary["Id"][:12], error)
            return None
        pid = int((attrs.get("State") or {}).get("Pid") or 0)
        if pid <= 0:
            return None
        try:
            cgroups = parse_proc_cgroup(_read(f"{self.proc}/{pid}/cgroup"))
        except OSError:
            return None  # exited since the listing
        pause = labels.get(LABEL_CONTAINER_KIND) == KIND_PAUSE
        own_network = (attrs.get("HostConfig") or {}).get("NetworkMode") != "host"
        cgroup_id = cgroups.get(CPU_CONTROLLER) or cgroups.get(MEMORY_CONTROLLER) or ""
        identity = Identity(
            id=cgroup_id, name=str(attrs.get("Name") or "").lstrip("/"),
            image=str((attrs.get("Config") or {}).get("Image") or summary.get("Image") or ""),
            namespace=labels.get(LABEL_POD_NAMESPACE, ""), pod=labels.get(LABEL_POD_NAME, ""),
            container=POD_CONTAINER_NAME if pause else labels.get(LABEL_CONTAINER_NAME, ""))
        return Located(
            key, identity,
            cpu_dir=cgroup_directory(self.mounts, CPU_CONTROLLER, cgroups[CPU_CONTROLLER])
            if CPU_CONTROLLER in cgroups else None,
            memory_dir=cgroup_directory(self.mounts, MEMORY_CONTROLLER, cgroups[MEMORY_CONTROLLER])
            if MEMORY_CONTROLLER in cgroups else None,
            net_dev=os.path.join(self.proc, str(pid), "net", "dev") if pause and own_network else None)
