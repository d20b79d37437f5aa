"""This node's Node object: registration from the node config, and the heartbeat.

The object and its status are built by pure functions from a ``HostInfo``
snapshot; a ``NodeRegistration`` creates or updates the Node once, then beats:
it renews the node's Lease (``kube-node-lease/<node>``) and posts the status
through ``nodes/<name>/status`` only when it changed or once every report
interval, as Kubernetes' kubelet does since node leases. ``NodeReporter`` beats
every ``--status-interval`` (the hollow kubelet runs many registrations). The
pod CIDR is spec, not status: it comes from the overlay's subnet file and is
patched onto the Node at registration and whenever the file says otherwise.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from daemons.api.client import ApiClient
from daemons.api.errors import AlreadyExists, APIError, Conflict, ConnectionFailed, NotFound
from daemons.api.resources import NODE_LEASE_NAMESPACE, by_kind
from daemons.kubelet.settings import DEFAULT_POD_CIDR_FILE, NodeConfig
from daemons.kubelet.status import rfc3339

log = logging.getLogger(__name__)

NODES = by_kind("v1", "Node")
LEASES = by_kind("coordination.k8s.io/v1", "Lease")
KUBELET_VERSION = "v1.30.0-minik8s"
MAX_PODS = 110
ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386", "ppc64le": "ppc64le",
                 "s390x": "s390x"}


@dataclass(frozen=True)
class HostInfo:
    """What the node reports about the machine it runs on."""

    hostname: str
    cpus: int
    memory_kib: int
    os_image: str
    kernel_version: str
    architecture: str
    machine_id: str = ""
    boot_id: str = ""


def parse_meminfo(text: str) -> int:
    """MemTotal in KiB from /proc/meminfo."""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise ValueError("no MemTotal in /proc/meminfo")


def parse_os_release(text: str) -> str:
    """PRETTY_NAME from /etc/os-release."""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PRETTY_NAME":
            return value.strip().strip('"')
    return "Linux"


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def parse_subnet_env(text: str) -> str | None:
    """The pod CIDR in flannel's subnet.env: ``FLANNEL_SUBNET=10.244.3.1/24`` (the bridge's address) is
    ``10.244.3.0/24``; None when the line is missing or unreadable."""
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "FLANNEL_SUBNET":
            try:
                return str(ipaddress.ip_interface(value.strip().strip('"')).network)
            except ValueError:
                return None
    return None


def pod_cidr_spec(spec: Mapping[str, Any], pod_cidr: str | None) -> dict[str, Any]:
    """The spec fields to patch so the node carries ``pod_cidr``: empty when it already does or there is none."""
    if pod_cidr is None or (spec.get("podCIDR") == pod_cidr and spec.get("podCIDRs") == [pod_cidr]):
        return {}
    return {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]}


def host_info() -> HostInfo:
    """Read the machine's CPUs, memory, OS and kernel."""
    return HostInfo(
        hostname=socket.gethostname(),
        cpus=os.cpu_count() or 1,
        memory_kib=parse_meminfo(_read("/proc/meminfo")),
        os_image=parse_os_release(_read("/etc/os-release")),
        kernel_version=platform.release(),
        architecture=ARCHITECTURES.get(platform.machine(), platform.machine()),
        machine_id=_read("/etc/machine-id").strip(),
        boot_id=_read("/proc/sys/kernel/random/boot_id").strip(),
    )


def node_labels(config: NodeConfig, info: HostInfo) -> dict[str, str]:
    return {"kubernetes.io/hostname": config.name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": info.architecture, **config.node_labels()}


def node_object(config: NodeConfig, info: HostInfo, pod_cidr: str | None = None) -> dict[str, Any]:
    """The Node to create: name, labels and taints from the config, and the pod CIDR when the overlay has one."""
    spec = {"taints": config.taints_json()} if config.taints else {}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": config.name, "labels": node_labels(config, info)},
            "spec": {**spec, **pod_cidr_spec({}, pod_cidr)}}


def merged_taints(current: list[dict[str, Any]] | None, wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The node's taints plus the configured ones it lacks (by key and effect); taints others added stay."""
    result = list(current or [])
    present = {(taint.get("key"), taint.get("effect")) for taint in result}
    result += [taint for taint in wanted if (taint.get("key"), taint.get("effect")) not in present]
    return result


def ready_condition(ready: bool, message: str, now: datetime,
                    previous: Mapping[str, Any] | None) -> dict[str, Any]:
    """The Ready condition, keeping its lastTransitionTime while its status stays the same."""
    status = "True" if ready else "False"
    stamp = rfc3339(now)
    since = (previous or {}).get("lastTransitionTime") if (previous or {}).get("status") == status else None
    return {"type": "Ready", "status": status, "reason": "KubeletReady" if ready else "KubeletNotReady",
            "message": message, "lastHeartbeatTime": stamp, "lastTransitionTime": since or stamp}


def node_status(info: HostInfo, address: str, port: int, runtime_version: str, ready: bool, message: str,
                now: datetime, previous_ready: Mapping[str, Any] | None = None, *, runtime_name: str = "docker",
                max_pods: int = MAX_PODS) -> dict[str, Any]:
    """The status the kubelet posts: capacity, addresses, node info, endpoint and the Ready condition."""
    capacity = {"cpu": str(info.cpus), "memory": f"{info.memory_kib}Ki", "pods": str(max_pods)}
    return {
        "capacity": capacity,
        "allocatable": dict(capacity),
        "conditions": [ready_condition(ready, message, now, previous_ready)],
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": info.hostname}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": info.machine_id, "systemUUID": info.machine_id, "bootID": info.boot_id,
            "kernelVersion": info.kernel_version, "osImage": info.os_image,
            "containerRuntimeVersion": f"{runtime_name}://{runtime_version}", "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION, "operatingSystem": "linux", "architecture": info.architecture,
        },
    }


def micro_time(moment: datetime) -> str:
    """Kubernetes' MicroTime: RFC 3339 with microseconds, as a Lease's times are written."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_lease(name: str, node_uid: str | None, duration: int, now: datetime) -> dict[str, Any]:
    """The node's Lease as first created: held by the node, owned by its Node (it goes when the Node goes)."""
    owner = [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}] if node_uid else []
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": owner},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": micro_time(now)}}


def renewed_lease(lease: dict[str, Any], name: str, duration: int, now: datetime) -> dict[str, Any]:
    return {**lease, "spec": {**(lease.get("spec") or {}), "holderIdentity": name, "leaseDurationSeconds": duration,
                              "renewTime": micro_time(now)}}


def _without_heartbeats(conditions: Any) -> Any:
    if not isinstance(conditions, list):
        return conditions
    return [{key: value for key, value in condition.items() if key != "lastHeartbeatTime"}
            for condition in conditions if isinstance(condition, dict)]


def status_differs(stored: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether posting ``desired`` would change the stored status in more than its heartbeat times."""
    return any(_without_heartbeats(stored.get(key)) != _without_heartbeats(value) if key == "conditions"
               else stored.get(key) != value for key, value in desired.items())


class NodeRegistration:
    """One Node's registration and heartbeat, without a thread of its own.

    The kubelet's ``NodeReporter`` drives one on a timer; the hollow kubelet drives
    thousands from one work queue. ``pod_cidr_file`` None means no overlay names
    the pod CIDR, so registration never patches it.
    """

    def __init__(self, client: ApiClient, config: NodeConfig, address: str, port: int,
                 runtime_version: Callable[[], str | None], pod_cidr_file: str | None = DEFAULT_POD_CIDR_FILE, *,
                 info: HostInfo | None = None, runtime_name: str = "docker", max_pods: int = MAX_PODS,
                 lease_duration: int = 40, report_frequency: float = 300.0) -> None:
        assert NODES is not None
        self.client = client
        self.config = config
        self.address = address
        self.port = port
        self.runtime_version = runtime_version
        self.pod_cidr_file = pod_cidr_file
        self.info = info or host_info()
        self.runtime_name = runtime_name
        self.max_pods = max_pods
        self.lease_duration = lease_duration
        self.report_frequency = report_frequency
        self._previous_ready: dict[str, Any] | None = None
        self._reported_at: float | None = None  # monotonic time of the last status posted
        self._lease: dict[str, Any] | None = None
        self.uid: str | None = None
        self.spec: dict[str, Any] = {}

    def pod_cidr(self) -> str | None:
        """The overlay's subnet for this node; None while the file is missing (the overlay has not leased one)."""
        return parse_subnet_env(_read(self.pod_cidr_file)) if self.pod_cidr_file else None

    def register(self) -> None:
        """Create the Node, or bring an existing one's labels, taints and pod CIDR in line with this node."""
        assert NODES is not None
        pod_cidr = self.pod_cidr()
        wanted = node_object(self.config, self.info, pod_cidr)
        try:
            created = self.client.create(NODES, wanted)
            self.spec, self.uid = created.get("spec") or {}, created["metadata"].get("uid")
            log.info("registered node %s (pod CIDR %s)", self.config.name, pod_cidr or "none yet")
            return
        except AlreadyExists:
            pass
        current = self.client.get(NODES, self.config.name)
        self.uid = current["metadata"].get("uid")
        spec = current.get("spec") or {}
        patch: dict[str, Any] = {"metadata": {"labels": wanted["metadata"]["labels"]}}
        taints = merged_taints(spec.get("taints"), self.config.taints_json())
        changes = {**({"taints": taints} if taints else {}), **pod_cidr_spec(spec, pod_cidr)}
        if changes:
            patch["spec"] = changes
        self.spec = self.client.patch(NODES, self.config.name, patch).get("spec") or {}
        ready = [c for c in (current.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
        self._previous_ready = ready[0] if ready else None
        log.info("updated existing node %s", self.config.name)

    def update_pod_cidr(self) -> None:
        """Patch the node's spec when the overlay's subnet file names another pod CIDR than the node has."""
        assert NODES is not None
        pod_cidr = self.pod_cidr()
        changes = pod_cidr_spec(self.spec, pod_cidr)
        if changes:
            self.spec = self.client.patch(NODES, self.config.name, {"spec": changes}).get("spec") or {}
            log.info("node %s: pod CIDR is now %s", self.config.name, pod_cidr)

    def beat(self) -> None:
        """One heartbeat: renew the Lease; post the status only when it differs from the stored one (say, a
        Ready=Unknown the node lifecycle controller wrote) or once every ``report_frequency``.

        The Node is read from the apiserver's cache (resourceVersion=0), as Kubernetes' kubelet does: a
        heartbeat that rewrote the Node would send the whole object to every watcher of nodes each time.
        """
        self.renew_lease()
        node = self.client.get(NODES, self.config.name, resource_version="0")
        self.spec = node.get("spec") or {}
        stored = node.get("status") or {}
        self._previous_ready = next((condition for condition in stored.get("conditions") or []
                                     if condition.get("type") == "Ready"), self._previous_ready)
        status = self._status()
        due = self._reported_at is None or time.monotonic() - self._reported_at >= self.report_frequency
        if due or status_differs(stored, status):
            self._post(status)

    def renew_lease(self) -> None:
        """Create the node's Lease, or move its renewTime to now."""
        assert LEASES is not None
        now = datetime.now(UTC)
        if self._lease is None:
            try:
                self._lease = self.client.create(LEASES, node_lease(self.config.name, self.uid, self.lease_duration,
                                                                    now), NODE_LEASE_NAMESPACE)
                return
            except AlreadyExists:
                self._lease = self.client.get(LEASES, self.config.name, NODE_LEASE_NAMESPACE)
        try:
            self._lease = self.client.replace(
                LEASES, renewed_lease(self._lease, self.config.name, self.lease_duration, now), NODE_LEASE_NAMESPACE)
        except (Conflict, NotFound):
            self._lease = None  # changed or removed by someone else: the next beat starts from what is stored
            raise

    def _status(self) -> dict[str, Any]:
        """The whole status: Ready unless the container runtime does not answer."""
        version = self.runtime_version()
        ready = version is not None
        message = "kubelet is posting ready status" if ready else "container runtime is down"
        return node_status(self.info, self.address, self.port, version or "unknown", ready, message,
                           datetime.now(UTC), self._previous_ready, runtime_name=self.runtime_name,
                           max_pods=self.max_pods)

    def _post(self, status: dict[str, Any]) -> None:
        assert NODES is not None
        node = self.client.patch(NODES, self.config.name, {"status": status}, subresource="status")
        self._previous_ready = status["conditions"][0]
        self._reported_at = time.monotonic()
        self.spec = node.get("spec") or {}


class NodeReporter(NodeRegistration):
    """Registers the Node and keeps posting its status every ``interval`` from a thread of its own until stopped."""

    def __init__(self, client: ApiClient, config: NodeConfig, address: str, port: int, interval: float,
                 runtime_version: Callable[[], str | None], pod_cidr_file: str = DEFAULT_POD_CIDR_FILE, *,
                 lease_duration: int = 40, report_frequency: float = 300.0) -> None:
        super().__init__(client, config, address, port, runtime_version, pod_cidr_file,
                         lease_duration=lease_duration, report_frequency=report_frequency)
        self.interval = interval
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="node-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _loop(self) -> None:
        registered = False
        while True:
            try:
                if not registered:
                    self.register()
                    registered = True
                else:
                    self.update_pod_cidr()
                self.beat()
            except (APIError, ConnectionFailed) as error:
                log.warning("node %s: heartbeat failed: %s", self.config.name, error)
            except Exception:
                log.exception("node %s: heartbeat failed", self.config.name)
            if self._stopping.wait(self.interval):
                return
