"""The Endpoints controller: each Service with a selector gets an Endpoints object listing the pods behind it.

As Kubernetes' endpoints controller: the pods of the Service's namespace that match
its selector, have an IP, are not finished and (unless the Service publishes
not-ready addresses) not terminating, are listed Ready under ``addresses`` and
otherwise under ``notReadyAddresses``. A named targetPort resolves per pod, so pods
whose ports resolve alike share a subset. The output is sorted, so unchanged inputs
give identical subsets and the object is written only when something changed.
Selector-less Services (``default/kubernetes``, or endpoints a user manages) are
left alone; an Endpoints object this controller wrote goes when its Service does.

Beside the Endpoints, each selecting Service gets one discovery.k8s.io EndpointSlice
(named ``<service>-<random>``, labelled with the Service's name, owned by the Service),
as kubectl describe and newer clients read endpoints from slices. Unlike Endpoints, a
slice also lists terminating pods, with their ready/serving/terminating conditions.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from daemons.api.errors import APIError, Conflict, ConnectionFailed, NotFound
from daemons.api.models import HEADLESS
from daemons.api.phases import TERMINAL_PHASES
from daemons.api.resources import require
from daemons.api.selectors import LabelSelectorQuery
from daemons.controllers.context import ControllerContext
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.keys import key_of, resource_version, split_key

log = logging.getLogger(__name__)

Obj = dict[str, Any]

HEADLESS_LABEL = "service.kubernetes.io/headless"
# Marks the Endpoints this controller wrote, as Kubernetes does; only those are deleted with their Service.
MANAGED_BY_LABEL = "endpoints.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpoint-controller"


SERVICES = require("v1", "Service")
PODS = require("v1", "Pod")
ENDPOINTS = require("v1", "Endpoints")
ENDPOINT_SLICES = require("discovery.k8s.io/v1", "EndpointSlice")
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
SLICE_CONTROLLER_NAME = "endpointslice-controller.k8s.io"


# --- what the Endpoints should say (pure) -----------------------------------------------------------


def service_selector(service: Obj) -> dict[str, str] | None:
    """The selector whose pods back ``service``; None (also for ``{}``) when the user manages its Endpoints."""
    return ((service.get("spec") or {}).get("selector")) or None


def is_headless(service: Obj) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == HEADLESS


def pod_ready(pod: Obj) -> bool:
    """The pod's Ready condition is True."""
    return any(condition.get("type") == "Ready" and condition.get("status") == "True"
               for condition in (pod.get("status") or {}).get("conditions") or [])


def pod_ip(pod: Obj) -> str | None:
    status = pod.get("status") or {}
    return status.get("podIP") or next((item.get("ip") for item in status.get("podIPs") or []), None)


def pod_in_endpoints(pod: Obj, include_terminating: bool) -> bool:
    """Whether the pod can be listed at all: it has an IP, has not finished, and is not terminating (unless allowed)."""
    if not pod_ip(pod) or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return False
    return include_terminating or not (pod.get("metadata") or {}).get("deletionTimestamp")


def resolve_target_port(pod: Obj, service_port: Obj) -> int | None:
    """The pod's port for ``service_port``: a number as it is, a name looked up in the pod's container ports."""
    target = service_port.get("targetPort", service_port.get("port"))
    if not isinstance(target, str):
        return target
    protocol = service_port.get("protocol") or "TCP"
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                return port.get("containerPort")
    return None


def endpoint_port(service_port: Obj, number: int) -> Obj:
    port: Obj = {"port": number, "protocol": service_port.get("protocol") or "TCP"}
    if service_port.get("name"):
        port["name"] = service_port["name"]
    if service_port.get("appProtocol"):
        port["appProtocol"] = service_port["appProtocol"]
    return port


def endpoint_address(pod: Obj, service: Obj) -> Obj:
    """The pod as an EndpointAddress; the pod's resourceVersion is left out so that unrelated pod writes change
    nothing."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    reference = {"kind": "Pod", "namespace": metadata.get("namespace"), "name": metadata.get("name"),
                 "uid": metadata.get("uid")}
    address: Obj = {"ip": pod_ip(pod), "targetRef": {key: value for key, value in reference.items() if value}}
    if spec.get("nodeName"):
        address["nodeName"] = spec["nodeName"]
    service_metadata = service.get("metadata") or {}
    if spec.get("hostname") and spec.get("subdomain") == service_metadata.get("name"):
        address["hostname"] = spec["hostname"]
    return address


def _port_key(port: Obj) -> tuple[str, int, str, str]:
    return port.get("name") or "", port["port"], port["protocol"], port.get("appProtocol") or ""


def _address_key(address: Obj) -> tuple[str, str, str]:
    reference = address.get("targetRef") or {}
    return address["ip"], reference.get("namespace") or "", reference.get("name") or ""


def endpoint_subsets(service: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The subsets of ``service``'s Endpoints given ``pods`` (any pods: those of other namespaces or not selected
    are skipped).

    Addresses are grouped by the set of ports they resolved to, one subset per set;
    ports, addresses and subsets are sorted so that the result depends only on the inputs.
    """
    selector = service_selector(service)
    if selector is None:
        return []
    namespace = (service.get("metadata") or {}).get("namespace")
    spec = service.get("spec") or {}
    publish_not_ready = bool(spec.get("publishNotReadyAddresses"))
    service_ports = spec.get("ports") or []
    query = LabelSelectorQuery.from_map(selector)
    groups: dict[tuple[tuple[str, int, str, str], ...], tuple[list[Obj], list[Obj], list[Obj]]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") != namespace or not query.matches(metadata.get("labels")):
            continue
        if not pod_in_endpoints(pod, include_terminating=publish_not_ready):
            continue
        if service_ports:
            ports = [endpoint_port(port, number) for port in service_ports
                     if (number := resolve_target_port(pod, port)) is not None]
            if not ports:
                continue
        elif is_headless(service):
            ports = []  # a headless Service without ports still lists its pods, for DNS
        else:
            continue
        ports.sort(key=_port_key)
        key = tuple(_port_key(port) for port in ports)
        ready, not_ready, _ = groups.setdefault(key, ([], [], ports))
        (ready if publish_not_ready or pod_ready(pod) else not_ready).append(endpoint_address(pod, service))
    subsets = []
    for key in sorted(groups):
        ready, not_ready, ports = groups[key]
        subset: Obj = {}
        if ready:
            subset["addresses"] = sorted(ready, key=_address_key)
        if not_ready:
            subset["notReadyAddresses"] = sorted(not_ready, key=_address_key)
        if ports:
            subset["ports"] = ports
        subsets.append(subset)
    return subsets


def endpoints_labels(service: Obj) -> dict[str, str]:
    """The Service's labels, the headless mark when it has no cluster IP, and this controller's mark."""
    labels = dict((service.get("metadata") or {}).get("labels") or {})
    labels.pop(HEADLESS_LABEL, None)
    if is_headless(service):
        labels[HEADLESS_LABEL] = ""
    labels[MANAGED_BY_LABEL] = CONTROLLER_NAME
    return labels


def is_managed(endpoints: Obj) -> bool:
    """Whether this controller wrote ``endpoints`` (so it may delete them)."""
    return ((endpoints.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == CONTROLLER_NAME


def desired_endpoints(service: Obj, pods: Iterable[Obj], current: Obj | None) -> Obj | None:
    """The Endpoints to write for ``service``, or None when ``current`` already says it (or there is no selector).

    An existing object keeps its other metadata (annotations, resourceVersion for the
    compare-and-swap); only the labels and subsets are ours.
    """
    if service_selector(service) is None:
        return None
    subsets = endpoint_subsets(service, pods)
    labels = endpoints_labels(service)
    if current is not None:
        current_labels = (current.get("metadata") or {}).get("labels") or {}
        if (current.get("subsets") or []) == subsets and current_labels == labels:
            return None
        updated = copy.deepcopy(current)
        updated["metadata"]["labels"] = labels
        updated["subsets"] = subsets
        return updated
    metadata = service.get("metadata") or {}
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace"), "labels": labels},
            "subsets": subsets}


def slice_endpoint(pod: Obj, service: Obj) -> Obj:
    """The pod as a slice's Endpoint: ready when serving and not terminating (or the Service publishes all)."""
    address = endpoint_address(pod, service)
    serving = pod_ready(pod)
    terminating = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    endpoint: Obj = {"addresses": [address["ip"]],
                     "conditions": {"ready": publish or (serving and not terminating), "serving": serving,
                                    "terminating": terminating},
                     "targetRef": address["targetRef"]}
    for field in ("hostname", "nodeName"):
        if field in address:
            endpoint[field] = address[field]
    return endpoint


def slice_contents(service: Obj, pods: Iterable[Obj]) -> tuple[list[Obj], list[Obj]]:
    """The endpoints and ports of ``service``'s one slice.

    Pods whose named target ports resolve differently would each need a slice of their
    own upstream; here the slice carries the port set most pods resolved to, and those pods.
    """
    selector = service_selector(service)
    if selector is None:
        return [], []
    namespace = (service.get("metadata") or {}).get("namespace")
    service_ports = (service.get("spec") or {}).get("ports") or []
    query = LabelSelectorQuery.from_map(selector)
    groups: dict[tuple[tuple[str, int, str, str], ...], tuple[list[Obj], list[Obj]]] = {}
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") != namespace or not query.matches(metadata.get("labels")):
            continue
        if not pod_in_endpoints(pod, include_terminating=True):
            continue
        ports = sorted((endpoint_port(port, number) for port in service_ports
                        if (number := resolve_target_port(pod, port)) is not None), key=_port_key)
        if (service_ports and not ports) or (not service_ports and not is_headless(service)):
            continue
        groups.setdefault(tuple(_port_key(port) for port in ports), ([], ports))[0].append(
            slice_endpoint(pod, service))
    if not groups:
        return [], []
    endpoints, ports = max(groups.values(), key=lambda group: len(group[0]))
    endpoints.sort(key=lambda endpoint: (endpoint["addresses"][0], endpoint["targetRef"].get("name") or ""))
    return endpoints, [{"name": port.get("name") or "", **{k: v for k, v in port.items() if k != "name"}}
                       for port in ports]


def slice_labels(service: Obj) -> dict[str, str]:
    """The Service's labels, the headless mark, the Service's name and the slice controller's mark."""
    labels = endpoints_labels(service)
    labels.pop(MANAGED_BY_LABEL, None)
    labels[SERVICE_NAME_LABEL] = (service.get("metadata") or {}).get("name") or ""
    labels[SLICE_MANAGED_BY_LABEL] = SLICE_CONTROLLER_NAME
    return labels


def is_managed_slice(endpoint_slice: Obj) -> bool:
    return ((endpoint_slice.get("metadata") or {}).get("labels") or {}).get(SLICE_MANAGED_BY_LABEL) \
        == SLICE_CONTROLLER_NAME


def sliced_service(endpoint_slice: Obj) -> str | None:
    """The key of the Service a slice of ours serves; None for a slice someone else manages."""
    if not is_managed_slice(endpoint_slice):
        return None
    metadata = endpoint_slice.get("metadata") or {}
    name = (metadata.get("labels") or {}).get(SERVICE_NAME_LABEL)
    return f"{metadata.get('namespace')}/{name}" if name else None


def desired_slice(service: Obj, pods: Iterable[Obj], current: Obj | None) -> Obj | None:
    """The EndpointSlice to write for ``service``, or None when ``current`` already says it."""
    endpoints, ports = slice_contents(service, pods)
    labels = slice_labels(service)
    if current is not None:
        current_labels = (current.get("metadata") or {}).get("labels") or {}
        if (current.get("endpoints") or []) == endpoints and (current.get("ports") or []) == ports \
                and current_labels == labels:
            return None
        updated = copy.deepcopy(current)
        updated["metadata"]["labels"] = labels
        updated.update(endpoints=endpoints, ports=ports)
        return updated
    metadata = service.get("metadata") or {}
    owner = {"apiVersion": "v1", "kind": "Service", "name": metadata.get("name"), "uid": metadata.get("uid"),
             "controller": True, "blockOwnerDeletion": True}
    return {"apiVersion": ENDPOINT_SLICES.api_version, "kind": "EndpointSlice",
            "metadata": {"generateName": f"{metadata.get('name')}-", "namespace": metadata.get("namespace"),
                         "labels": labels, "ownerReferences": [owner]},
            "addressType": "IPv4", "endpoints": endpoints, "ports": ports}


def endpoints_view(pod: Obj) -> tuple[object, ...]:
    """The parts of a pod that its Endpoints entries depend on; heartbeats and annotations change none."""
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ports = [container.get("ports") for container in spec.get("containers") or []]
    return (metadata.get("labels"), metadata.get("uid"), bool(metadata.get("deletionTimestamp")), pod_ip(pod),
            pod_ready(pod), status.get("phase") in TERMINAL_PHASES, spec.get("nodeName"), spec.get("hostname"),
            spec.get("subdomain"), ports)


def describe(subsets: list[Obj]) -> str:
    """How many addresses the subsets list, for log lines."""
    ready = sum(len(subset.get("addresses") or []) for subset in subsets)
    not_ready = sum(len(subset.get("notReadyAddresses") or []) for subset in subsets)
    return f"{ready} ready and {not_ready} not ready addresses"


class SelectorIndex:
    """Which Services select a pod, found through the pod's labels rather than by trying every Service.

    Each Service with a selector is filed under every ``(namespace, key, value)`` pair of
    its selector; a pod's candidates are the Services filed under one of its labels,
    and those whose whole selector the pod's labels satisfy are the ones it belongs to.
    """

    def __init__(self) -> None:
        self._selectors: dict[str, tuple[str, dict[str, str]]] = {}
        self._by_label: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._lock = threading.Lock()

    def set(self, service: Obj) -> None:
        """File (or re-file) ``service`` under its current selector."""
        key = key_of(service)
        selector = service_selector(service)
        with self._lock:
            self._remove_locked(key)
            if selector is None:
                return
            namespace = (service.get("metadata") or {}).get("namespace") or ""
            self._selectors[key] = (namespace, dict(selector))
            for label in selector.items():
                self._by_label[(namespace, *label)].add(key)

    def remove(self, key: str) -> None:
        with self._lock:
            self._remove_locked(key)

    def _remove_locked(self, key: str) -> None:
        filed = self._selectors.pop(key, None)
        if filed is None:
            return
        namespace, selector = filed
        for label in selector.items():
            keys = self._by_label.get((namespace, *label))
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_label[(namespace, *label)]

    def matching(self, pod: Obj) -> set[str]:
        """The keys of the Services whose selector ``pod`` matches."""
        metadata = pod.get("metadata") or {}
        namespace, labels = metadata.get("namespace") or "", metadata.get("labels") or {}
        with self._lock:
            candidates = set().union(*(self._by_label.get((namespace, *label), ()) for label in labels.items()))
            return {key for key in candidates
                    if all(labels.get(name) == value for name, value in self._selectors[key][1].items())}


# --- the controller ---------------------------------------------------------------------------------


class EndpointsController:
    """Keeps the Endpoints of every selecting Service current, syncing Service keys (``namespace/name``)."""

    name = "endpoints"

    def __init__(self, context: ControllerContext) -> None:
        self.client = context.client
        self.controller = Controller(self.name, self.sync, context.workers)
        self.index = SelectorIndex()
        # Our last write per key until the cache shows it, so a sync right after a write compares with it.
        self._written: dict[str, Obj] = {}
        self._written_lock = threading.Lock()
        self.services = context.informers.informer(SERVICES)
        self.pods = context.informers.informer(PODS)
        self.endpoints = context.informers.informer(ENDPOINTS)
        self.slices = context.informers.informer(ENDPOINT_SLICES)
        # Our last slice write per Service key until the cache shows it: a create's name is the server's choice.
        self._slices_written: dict[str, Obj] = {}
        self.services.add_handlers(self._service_added, self._service_updated, self._service_deleted)
        self.pods.add_handlers(self._pod_added, self._pod_updated, self._pod_deleted)
        self.endpoints.add_handlers(self._endpoints_added, on_delete=self._endpoints_deleted)
        self.slices.add_handlers(self._slice_changed, lambda _old, new: self._slice_changed(new), self._slice_deleted)

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()

    # --- informer handlers --------------------------------------------------------------------------

    def _service_added(self, service: Obj) -> None:
        self.index.set(service)
        self.controller.enqueue_object(service)

    def _service_updated(self, _old: Obj, new: Obj) -> None:
        self.index.set(new)
        self.controller.enqueue_object(new)

    def _service_deleted(self, service: Obj) -> None:
        self.index.remove(key_of(service))
        self.controller.enqueue_object(service)

    def _pod_added(self, pod: Obj) -> None:
        self._enqueue_services_of(pod)

    def _pod_updated(self, old: Obj, new: Obj) -> None:
        if resource_version(old) == resource_version(new) or endpoints_view(old) == endpoints_view(new):
            return  # a resync, or a change no Endpoints shows; the Services' own resync covers the rest
        for key in self.index.matching(old) | self.index.matching(new):  # left the old Services, joined the new
            self.controller.enqueue(key)

    def _pod_deleted(self, pod: Obj) -> None:
        self._enqueue_services_of(pod)

    def _enqueue_services_of(self, pod: Obj) -> None:
        for key in self.index.matching(pod):
            self.controller.enqueue(key)

    def _endpoints_added(self, endpoints: Obj) -> None:
        # Seen at start-up: ours whose Service went while the daemon was down are deleted by the sync.
        if is_managed(endpoints):
            self.controller.enqueue_object(endpoints)

    def _endpoints_deleted(self, endpoints: Obj) -> None:
        key = key_of(endpoints)
        with self._written_lock:
            self._written.pop(key, None)
        self.controller.enqueue(key)  # recreated if its Service still selects pods

    def _slice_changed(self, endpoint_slice: Obj) -> None:
        key = sliced_service(endpoint_slice)
        if key is not None:
            self.controller.enqueue(key)

    def _slice_deleted(self, endpoint_slice: Obj) -> None:
        key = sliced_service(endpoint_slice)
        if key is not None:
            with self._written_lock:
                self._slices_written.pop(key, None)
            self.controller.enqueue(key)  # recreated if its Service still selects pods

    # --- syncing one Service ------------------------------------------------------------------------

    def _current(self, key: str) -> Obj | None:
        """The stored Endpoints: the cached object, or our own later write the cache has not caught up with."""
        cached = self.endpoints.store.get_by_key(key)
        with self._written_lock:
            written = self._written.get(key)
            if written is None or resource_version(written) <= resource_version(cached):
                self._written.pop(key, None)
                return cached
            return written

    def _remember(self, key: str, written: Obj | None) -> None:
        with self._written_lock:
            if written is None:
                self._written.pop(key, None)
            else:
                self._written[key] = written

    def _slices_of(self, key: str) -> list[Obj]:
        """Our cached slices of the Service ``key``, oldest name first, or our later write of one."""
        namespace, _name = split_key(key)
        cached = sorted((item for item in self.slices.store.list(namespace) if sliced_service(item) == key),
                        key=lambda item: (item.get("metadata") or {}).get("name") or "")
        with self._written_lock:
            written = self._slices_written.get(key)
            if written is None:
                return cached
            same = next((item for item in cached if (item.get("metadata") or {}).get("name")
                         == written["metadata"]["name"]), None)
            if same is not None and resource_version(same) >= resource_version(written):
                self._slices_written.pop(key, None)
                return cached
            return [written, *(item for item in cached if item is not same)]

    def _sync_slice(self, key: str, service: Obj | None, pods: list[Obj]) -> None:
        """Converge the Service's one EndpointSlice; extra or orphaned slices of ours are deleted."""
        namespace, _name = split_key(key)
        slices = self._slices_of(key)
        keep = slices[0] if slices and service is not None and service_selector(service) is not None else None
        for extra in slices[1 if keep is not None else 0:]:
            with contextlib.suppress(NotFound):
                self.client.delete(ENDPOINT_SLICES, extra["metadata"]["name"], namespace)
            log.info("%s: deleted EndpointSlice %s", key, extra["metadata"]["name"])
        if service is None or service_selector(service) is None:
            return
        desired = desired_slice(service, pods, keep)
        if desired is None:
            return
        if keep is None:
            written = self.client.create(ENDPOINT_SLICES, desired, namespace)
        else:
            written = self.client.replace(ENDPOINT_SLICES, desired, namespace)
        with self._written_lock:
            self._slices_written[key] = written
        log.info("%s: wrote EndpointSlice %s with %d endpoints", key, written["metadata"]["name"],
                 len(desired["endpoints"]))

    def sync(self, key: str) -> None:
        """Converge the Endpoints and the EndpointSlice of the Service ``key``."""
        namespace, _name = split_key(key)
        service = self.services.store.get_by_key(key)
        pods = self.pods.store.list(namespace) if service is not None and service_selector(service) else []
        try:
            self._sync_endpoints(key, service, pods)
            self._sync_slice(key, service, pods)
        except Conflict:
            self._remember(key, None)
            with self._written_lock:
                self._slices_written.pop(key, None)
            raise  # the controller retries at once: the cache is about to show the newer object
        except NotFound as error:
            self._remember(key, None)
            raise TemporaryError(f"{key}: Endpoints or EndpointSlice vanished while syncing: {error}") from error
        except (APIError, ConnectionFailed) as error:
            raise TemporaryError(f"{key}: writing Endpoints or EndpointSlice failed: {error}") from error

    def _sync_endpoints(self, key: str, service: Obj | None, pods: list[Obj]) -> None:
        """Create, update or delete the Endpoints of the Service ``key``, or leave them as they are."""
        namespace, name = split_key(key)
        current = self._current(key)
        if service is None:
            if current is not None and is_managed(current):
                self._delete(key, namespace, name)
            return
        if service_selector(service) is None:
            return  # the user writes these Endpoints: no need to look at the namespace's pods
        desired = desired_endpoints(service, pods, current)
        if desired is None:
            return
        if current is None:
            self._remember(key, self.client.create(ENDPOINTS, desired, namespace))
            log.info("%s: created Endpoints with %s", key, describe(desired["subsets"]))
        else:
            self._remember(key, self.client.replace(ENDPOINTS, desired, namespace))
            log.info("%s: updated Endpoints to %s", key, describe(desired["subsets"]))

    def _delete(self, key: str, namespace: str | None, name: str) -> None:
        with contextlib.suppress(NotFound):
            self.client.delete(ENDPOINTS, name, namespace)
        self._remember(key, None)
        log.info("%s: Service gone, deleted its Endpoints", key)
