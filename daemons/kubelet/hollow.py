"""The hollow kubelet: one process simulating many nodes, for scale tests of the control plane (kubemark's idea).

Each hollow node registers and heartbeats through the same ``NodeRegistration``
as a real kubelet, so the Node objects look like real ones (labels, taints,
roles from the node config; capacity from the --hollow-* flags). No container
runs: a pod bound to a hollow node is reported Running at once with made-up
container ids, and a pod being deleted is finished with a zero grace period.

One pod informer serves every node of the process (all pods, kept only when
bound to one of ours); one controller syncs pods and another, fed by delayed
adds, spreads the heartbeats evenly over ``--status-interval``. No thread is
started per node.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import threading
import uuid
import zlib
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, ConnectionFailed, NotFound
from daemons.api.resources import by_kind
from daemons.kubelet.node import HostInfo, NodeRegistration, host_info
from daemons.kubelet.settings import KubeletSettings, NodeConfig, primary_ipv4
from daemons.kubelet.status import TERMINAL_PHASES, build_pod_status, rfc3339, status_patch
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.informer import Informer
from daemons.machinery.keys import key_of, resource_version, split_key

log = logging.getLogger(__name__)

PODS = by_kind("v1", "Pod")
RUNTIME_NAME = "hollow"
RUNTIME_VERSION = "0.1.0"
INDEX_DIGITS = 4
# Pod addresses of nodes without a spec.podCIDR: a /24 per node out of the shared address space (RFC 6598),
# chosen by the node's name, so that it stays the same across restarts.
HOLLOW_POD_RANGE = ipaddress.ip_network("100.64.0.0/10")
NODE_PREFIX = 24


# --- pure pieces ------------------------------------------------------------------------------------


def hollow_node_names(base: str, count: int) -> list[str]:
    """``<base>-0000`` ... : the index zero-padded to at least four digits, more when the count needs them."""
    width = max(INDEX_DIGITS, len(str(count - 1)))
    return [f"{base}-{index:0{width}d}" for index in range(count)]


def hollow_host_info(name: str, cpus: int, memory_kib: int, machine: HostInfo) -> HostInfo:
    """What a hollow node reports: the configured capacity, its own name and machine id, the host's OS."""
    machine_id = uuid.uuid5(uuid.NAMESPACE_DNS, name).hex
    return dataclasses.replace(machine, hostname=name, cpus=cpus, memory_kib=memory_kib, machine_id=machine_id)


def hollow_pod_cidr(node_name: str) -> str:
    """The node's made-up pod range: a /24 of ``HOLLOW_POD_RANGE`` picked by a hash of its name."""
    subnets = 2 ** (NODE_PREFIX - HOLLOW_POD_RANGE.prefixlen)
    offset = (zlib.crc32(node_name.encode()) % subnets) << (32 - NODE_PREFIX)
    return str(ipaddress.ip_network((int(HOLLOW_POD_RANGE.network_address) + offset, NODE_PREFIX)))


def pick_pod_ip(cidr: str, used: Iterable[str]) -> str:
    """The lowest host address of ``cidr`` not in ``used`` (the first one is the node's bridge, as with Docker)."""
    taken = set(used)
    hosts = ipaddress.ip_network(cidr).hosts()
    next(hosts, None)
    for address in hosts:
        if str(address) not in taken:
            return str(address)
    raise ValueError(f"no free pod address left in {cidr}")


def hollow_container_status(container: Mapping[str, Any], pod_uid: str, started_at: str) -> dict[str, Any]:
    """A container that has been running since ``started_at``, ready, with the id ``hollow://<uid>/<name>``."""
    return {"name": container["name"], "image": container["image"], "imageID": "",
            "containerID": f"{RUNTIME_NAME}://{pod_uid}/{container['name']}", "ready": True, "started": True,
            "restartCount": 0, "state": {"running": {"startedAt": started_at}}, "lastState": {}}


def hollow_pod_status(pod: Mapping[str, Any], host_ip: str, pod_ip: str, now: datetime) -> dict[str, Any]:
    """The pod's status with every container running since the pod's start time (now, the first time), so that
    the status of a pod already reported Running comes out the same and costs no write."""
    started = (pod.get("status") or {}).get("startTime") or rfc3339(now) or ""
    uid = pod["metadata"].get("uid", "")
    statuses = [hollow_container_status(container, uid, started) for container in pod["spec"]["containers"]]
    return build_pod_status(pod, statuses, host_ip=host_ip, pod_ip=pod_ip, now=now)


def node_of(pod: Mapping[str, Any]) -> str | None:
    return (pod.get("spec") or {}).get("nodeName")


# --- the process ------------------------------------------------------------------------------------


class HollowKubelet:
    """Many hollow nodes behind one informer and two controllers; ``run`` and ``stop`` like ``Kubelet``'s."""

    def __init__(self, settings: KubeletSettings, config: NodeConfig) -> None:
        assert PODS is not None
        self.settings = settings
        self.config = config
        self.address = config.address or primary_ipv4()
        self.client = ApiClient.from_config(settings.kubeconfig, user_agent=f"minik8s-kubelet/{config.name}-hollow")
        machine = host_info()
        memory_kib = settings.hollow_memory_kib()
        self.nodes: dict[str, NodeRegistration] = {}
        for name in hollow_node_names(config.name, settings.hollow_nodes):
            self.nodes[name] = NodeRegistration(
                self.client, config.model_copy(update={"name": name}), self.address, settings.port,
                lambda: RUNTIME_VERSION, pod_cidr_file=None, runtime_name=RUNTIME_NAME,
                max_pods=settings.hollow_max_pods, lease_duration=settings.node_lease_duration_seconds,
                report_frequency=settings.node_status_report_frequency,
                info=hollow_host_info(name, settings.hollow_cpu, memory_kib, machine))
        self._registered: set[str] = set()
        self._lock = threading.Lock()
        self._pod_ips: dict[str, tuple[str, str]] = {}  # pod key -> its node and address
        self._node_ips: dict[str, set[str]] = {}  # node -> the addresses its pods hold
        self._written: dict[str, tuple[str, int]] = {}  # pod key -> uid and resourceVersion of our last write
        self.informer = Informer(self.client, PODS, amqp_url=settings.amqp_url,
                                 queue_name=f"kubelet.{config.name}.pods", resync_seconds=settings.resync_seconds)
        self.pods = Controller(f"kubelet-{config.name}", self._sync_pod, workers=settings.workers,
                               base_delay=1.0, max_delay=60.0)
        self.heartbeats = Controller(f"kubelet-{config.name}-nodes", self._sync_node, workers=settings.workers,
                                     base_delay=1.0, max_delay=max(1.0, settings.status_interval))
        self.informer.add_handlers(on_add=self._observe, on_update=lambda _old, new: self._observe(new),
                                   on_delete=self._observe)
        self._stopping = threading.Event()

    # --- informer handler -------------------------------------------------------------------------

    def _observe(self, pod: dict[str, Any]) -> None:
        """Keep the address of every pod on our nodes (a restart must not hand one out twice); queue the pod."""
        node = node_of(pod)
        if node not in self.nodes:
            return
        ip = (pod.get("status") or {}).get("podIP")
        if ip:
            with self._lock:
                self._hold(key_of(pod), node, ip)
        self.pods.enqueue_object(pod)

    # --- heartbeats -------------------------------------------------------------------------------

    def _sync_node(self, name: str) -> None:
        """Register the node the first time, then beat (Lease, and status when due); the next is one interval away."""
        registration = self.nodes[name]
        try:
            if name not in self._registered:
                registration.register()
                self._registered.add(name)
            registration.beat()
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"node {name}: heartbeat failed: {error}") from None
        self.heartbeats.enqueue_after(name, self.settings.status_interval)

    # --- pods -------------------------------------------------------------------------------------

    def _sync_pod(self, key: str) -> None:
        """Report the pod Running once, or finish it when it is being deleted."""
        assert PODS is not None
        pod = self.informer.store.get_by_key(key)
        node = node_of(pod) if pod is not None else None
        if pod is None or node not in self.nodes:
            self._forget(key)
            return
        metadata = pod["metadata"]
        with self._lock:
            written = self._written.get(key)
        if written is not None and written[0] == metadata.get("uid") and written[1] > resource_version(pod):
            return  # the cache is behind our own write; its event brings the key back
        namespace, name = split_key(key)
        try:
            if metadata.get("deletionTimestamp"):
                try:
                    self.client.delete(PODS, name, namespace, grace_period_seconds=0)
                    log.info("%s: deleted from hollow node %s", key, node)
                except NotFound:
                    pass
                self._forget(key)
                return
            if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                return
            status = hollow_pod_status(pod, self.address, self._pod_ip(key, pod, node), datetime.now(UTC))
            patch = status_patch(pod.get("status"), status)
            if patch is None:
                return
            try:
                result = self.client.patch(PODS, name, {"status": patch}, namespace, subresource="status")
            except NotFound:
                return  # deleted meanwhile; its DELETED event brings the key back
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"apiserver: {error}") from None
        with self._lock:
            self._written[key] = (result["metadata"].get("uid", ""), resource_version(result))
        log.info("%s: status %s on hollow node %s", key, status["phase"], node)

    def _pod_ip(self, key: str, pod: Mapping[str, Any], node: str) -> str:
        """The address the pod has, else the lowest free one of its node's pod CIDR."""
        with self._lock:
            held = self._pod_ips.get(key)
            ip = (pod.get("status") or {}).get("podIP") or (held[1] if held else None)
            if not ip:
                cidr = self.nodes[node].spec.get("podCIDR") or hollow_pod_cidr(node)
                ip = pick_pod_ip(cidr, self._node_ips.get(node, ()))
            self._hold(key, node, ip)
            return ip

    def _hold(self, key: str, node: str, ip: str) -> None:
        """Record the pod's address (under the lock)."""
        self._release(key)
        self._pod_ips[key] = (node, ip)
        self._node_ips.setdefault(node, set()).add(ip)

    def _release(self, key: str) -> None:
        held = self._pod_ips.pop(key, None)
        if held is not None:
            self._node_ips[held[0]].discard(held[1])

    def _forget(self, key: str) -> None:
        with self._lock:
            self._written.pop(key, None)
            self._release(key)

    # --- lifecycle --------------------------------------------------------------------------------

    def run(self) -> None:
        """Start the heartbeats (spread over one interval), then the pods once the cache is filled; block."""
        interval = self.settings.status_interval
        self.heartbeats.start()
        for index, name in enumerate(self.nodes):
            self.heartbeats.enqueue_after(name, index * interval / len(self.nodes))
        self.informer.start()
        log.info("hollow kubelet %s: %d nodes (%s ...) started", self.config.name, len(self.nodes),
                 next(iter(self.nodes)))
        while not self.informer.wait_synced(1.0):
            if self._stopping.is_set():
                return
        self.pods.start()
        self._stopping.wait()

    def stop(self) -> None:
        self._stopping.set()
        self.pods.stop(5.0)
        self.heartbeats.stop(5.0)
        self.informer.stop(1.0)
        log.info("hollow kubelet %s stopped", self.config.name)
