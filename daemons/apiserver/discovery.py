"""Discovery documents (``/api``, ``/apis``, ``/apis/<group>/<version>``) and ``/version``, from the resource table."""

from __future__ import annotations

import platform
from typing import Any

from daemons.api.resources import RESOURCES, groups

GIT_VERSION = "v1.30.0-minik8s"
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
SUBRESOURCE_VERBS = {"status": ["get", "patch", "update"], "scale": ["get", "patch", "update"],
                     "binding": ["create"], "log": ["get"], "exec": ["create", "get"],
                     "finalize": ["update"]}


def version_info() -> dict[str, str]:
    return {
        "major": "1",
        "minor": "30",
        "gitVersion": GIT_VERSION,
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "2026-11-22T00:00:00Z",
        "goVersion": f"python{platform.python_version()}",
        "compiler": "cpython",
        "platform": f"{platform.system().lower()}/{platform.machine()}",
    }


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{name}/{version}", "version": version} for version in versions]
    return {"name": name, "versions": listed, "preferredVersion": listed[0]}


def group_list(extra: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Every group of the resource table, then ``extra``: groups served outside it (metrics.k8s.io)."""
    served = {name: versions for name, versions in groups().items() if name} | (extra or {})
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, versions) for name, versions in served.items()],
    }


def group(name: str, extra: dict[str, list[str]] | None = None) -> dict[str, Any] | None:
    versions = (groups() | (extra or {})).get(name)
    if not name or versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def resource_list(group_name: str, version: str) -> dict[str, Any] | None:
    """The ``APIResourceList`` of one group version, subresources included, or None if it is not served."""
    entries: list[dict[str, Any]] = []
    for resource in RESOURCES:
        if (resource.group, resource.version) != (group_name, version):
            continue
        entry: dict[str, Any] = {
            "name": resource.plural,
            "singularName": resource.singular,
            "namespaced": resource.namespaced,
            "kind": resource.kind,
            "verbs": VERBS,
        }
        if resource.short_names:
            entry["shortNames"] = list(resource.short_names)
        if resource.categories:
            entry["categories"] = list(resource.categories)
        entries.append(entry)
        for subresource in resource.subresources:
            sub: dict[str, Any] = {
                "name": f"{resource.plural}/{subresource}",
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": {"scale": "Scale", "binding": "Binding", "log": "Pod",
                         "exec": "PodExecOptions"}.get(subresource, resource.kind),
                "verbs": SUBRESOURCE_VERBS[subresource],
            }
            if subresource == "scale":
                sub.update(group="autoscaling", version="v1")
            entries.append(sub)
    if not entries:
        return None
    group_version = f"{group_name}/{version}" if group_name else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": entries}
