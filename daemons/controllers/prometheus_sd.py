"""The prometheus-sd controller: Prometheus' scrape targets follow the nodes as they register and go.

Prometheus on the control plane reads its kubelet and proxy targets from file_sd
files; this controller writes them from the Node objects, so a node that joins
is scraped and one that is removed is no longer:
``<dir>/kubelets.json`` lists each node's ``<InternalIP>:<kubelet port>`` and
``<dir>/proxies.json`` its ``<InternalIP>:10249``, each labelled
``node=<name>``. A file is replaced atomically (Prometheus never reads half of
one) and only when its content changes. Without ``--prometheus-sd-dir`` the
controller does nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from daemons.api.files import write_if_changed
from daemons.api.resources import require
from daemons.controllers.context import ControllerContext
from daemons.machinery.controller import Controller, TemporaryError
from daemons.machinery.keys import resource_version

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NODES = require("v1", "Node")
KUBELET_PORT = 10250
PROXY_METRICS_PORT = 10249
KUBELETS_FILE = "kubelets.json"
PROXIES_FILE = "proxies.json"
# The one key this controller syncs: every sync writes both files from all nodes.
TARGETS_KEY = "targets"

# --- the files' content (pure) --------------------------------------------------------------------------


def internal_ip(node: Obj) -> str | None:
    """The node's InternalIP, where Prometheus reaches its kubelet and proxy."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP" and address.get("address"):
            return str(address["address"])
    return None


def kubelet_port(node: Obj) -> int:
    """The port the kubelet reports it serves on, 10250 when it says none."""
    endpoint = ((node.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}
    return int(endpoint.get("Port") or KUBELET_PORT)


def target_view(node: Obj) -> tuple[str, str | None, int]:
    """What a node contributes to the targets; heartbeats change none of it."""
    return (node.get("metadata") or {}).get("name") or "", internal_ip(node), kubelet_port(node)


def host_port(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def file_sd_groups(nodes: Iterable[Obj], port: int | None = None) -> list[Obj]:
    """One file_sd target group per node with an InternalIP, sorted by name: the kubelet's port, or ``port``."""
    groups = []
    for node in nodes:
        name, address, kubelet = target_view(node)
        if name and address:
            groups.append({"targets": [host_port(address, port or kubelet)], "labels": {"node": name}})
    return sorted(groups, key=lambda group: group["labels"]["node"])


def target_files(nodes: Iterable[Obj]) -> dict[str, str]:
    """File name -> content of every file_sd file."""
    nodes = list(nodes)
    return {
        KUBELETS_FILE: json.dumps(file_sd_groups(nodes), indent=2) + "\n",
        PROXIES_FILE: json.dumps(file_sd_groups(nodes, PROXY_METRICS_PORT), indent=2) + "\n",
    }


# --- the controller -------------------------------------------------------------------------------------


class PrometheusSDController:
    """Writes the file_sd targets of every node's kubelet and proxy, when ``--prometheus-sd-dir`` is set."""

    name = "prometheus-sd"

    def __init__(self, context: ControllerContext) -> None:
        self.directory = Path(context.prometheus_sd_dir) if context.prometheus_sd_dir else None
        self.controller: Controller | None = None
        if self.directory is None:
            return
        self.controller = Controller(self.name, self.sync)
        self.nodes = context.informers.informer(NODES)
        self.nodes.add_handlers(self._changed, self._updated, self._changed)

    def start(self) -> None:
        if self.controller is None:
            log.info("no --prometheus-sd-dir: no scrape targets are written")
            return
        self.controller.start()
        self.controller.enqueue(TARGETS_KEY)  # a cluster without nodes still gets its (empty) files

    def stop(self) -> None:
        if self.controller is not None:
            self.controller.stop()

    def _changed(self, _node: Obj) -> None:
        assert self.controller is not None
        self.controller.enqueue(TARGETS_KEY)

    def _updated(self, old: Obj, new: Obj) -> None:
        """A resync checks the files again (someone may have removed them); of a node's writes, only those that
        move its targets count, not its heartbeats."""
        if resource_version(old) == resource_version(new) or target_view(old) != target_view(new):
            self._changed(new)

    def sync(self, _key: str) -> None:
        """Write both files from the nodes in the cache, each only if it changed."""
        assert self.directory is not None
        nodes = self.nodes.store.list()
        try:
            for name, content in target_files(nodes).items():
                if write_if_changed(self.directory / name, content):
                    log.info("%s: %d node(s): %s", self.directory / name, len(json.loads(content)),
                             ", ".join(group["labels"]["node"] for group in json.loads(content)) or "none")
        except OSError as error:
            raise TemporaryError(f"writing scrape targets under {self.directory} failed: {error}") from error
