"""What Docker is asked to create for a pod: names, labels, volumes and container arguments (no I/O here).

A pod is one pause container that owns the network and IPC namespaces plus one
Docker container per spec container joined to them. Every container carries
labels naming its pod and node, so a restarted kubelet finds (and adopts) what
runs without any local state, and a hash of its spec, so that a container
whose spec changed is replaced rather than adopted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from daemons.api.quantity import cpu_millis, memory_bytes

LABEL_POD_UID = "io.minik8s.pod.uid"
LABEL_POD_NAMESPACE = "io.minik8s.pod.namespace"
LABEL_POD_NAME = "io.minik8s.pod.name"
LABEL_CONTAINER_NAME = "io.minik8s.container.name"
LABEL_CONTAINER_KIND = "io.minik8s.container.kind"
LABEL_NODE = "io.minik8s.node"
LABEL_RESTART_COUNT = "io.minik8s.restart-count"
LABEL_HASH = "io.minik8s.container.hash"
LABEL_BACKOFF = "io.minik8s.backoff"
LABEL_GRACE = "io.minik8s.pod.termination-grace-period"

KIND_PAUSE = "pause"
KIND_APP = "app"
POD_CONTAINER_NAME = "POD"


class ConfigError(ValueError):
    """The pod asks for something this kubelet cannot set up (waiting reason CreateContainerConfigError)."""


def short_uid(pod: Mapping[str, Any]) -> str:
    return str(pod["metadata"].get("uid") or "").replace("-", "")[:8]


def pause_name(pod: Mapping[str, Any]) -> str:
    metadata = pod["metadata"]
    return f"k8s_{POD_CONTAINER_NAME}_{metadata['name']}_{metadata['namespace']}_{short_uid(pod)}"


def container_name(pod: Mapping[str, Any], container: Mapping[str, Any], restart_count: int) -> str:
    metadata = pod["metadata"]
    return f"k8s_{container['name']}_{metadata['name']}_{metadata['namespace']}_{short_uid(pod)}_{restart_count}"


def container_hash(container: Mapping[str, Any]) -> str:
    """A stable digest of a container's spec: equal hashes mean a running container can be adopted."""
    canonical = json.dumps(container, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def pod_labels(pod: Mapping[str, Any], node_name: str, kind: str, name: str) -> dict[str, str]:
    metadata = pod["metadata"]
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
    return {
        LABEL_POD_UID: str(metadata.get("uid") or ""),
        LABEL_POD_NAMESPACE: metadata["namespace"],
        LABEL_POD_NAME: metadata["name"],
        LABEL_CONTAINER_NAME: name,
        LABEL_CONTAINER_KIND: kind,
        LABEL_NODE: node_name,
        LABEL_GRACE: str(grace),
    }


# --- volumes ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VolumeSource:
    """Where a pod volume lives on the host and what must exist there before a container mounts it."""

    name: str
    host_path: str
    create: Literal["directory", "file", "none"]
    empty_dir: bool = False


def pod_dir(root_dir: str, pod: Mapping[str, Any]) -> str:
    return os.path.join(root_dir, "pods", str(pod["metadata"]["uid"]))


def volume_sources(pod: Mapping[str, Any], root_dir: str) -> dict[str, VolumeSource]:
    """The host side of every volume: emptyDir under the pod's folder, hostPath where it says."""
    sources: dict[str, VolumeSource] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume["name"]
        if volume.get("emptyDir") is not None:
            path = os.path.join(pod_dir(root_dir, pod), "volumes", name)
            sources[name] = VolumeSource(name, path, "directory", empty_dir=True)
        elif volume.get("hostPath") is not None:
            host_path = volume["hostPath"]
            kind = host_path.get("type") or ""
            create = {"DirectoryOrCreate": "directory", "FileOrCreate": "file"}.get(kind, "none")
            sources[name] = VolumeSource(name, host_path["path"], create)  # type: ignore[arg-type]
        else:
            kinds = sorted(key for key in volume if key != "name")
            raise ConfigError(f"volume {name!r}: unsupported volume type {', '.join(kinds) or '(none)'}")
    return sources


def binds(container: Mapping[str, Any], volumes: Mapping[str, str]) -> list[str]:
    """Docker bind specs (``host:container:ro|rw``) for a container's volumeMounts."""
    result = []
    for mount in container.get("volumeMounts") or []:
        host = volumes.get(mount["name"])
        if host is None:
            raise ConfigError(f"volumeMount {mount['name']!r}: no such volume in the pod")
        if mount.get("subPath"):
            host = os.path.join(host, mount["subPath"])
        result.append(f"{host}:{mount['mountPath']}:{'ro' if mount.get('readOnly') else 'rw'}")
    return result


# --- environment --------------------------------------------------------------------------------------

_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def field_ref(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    """The value of a downward-API ``fieldRef`` (what Kubernetes allows in env)."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": metadata.get("name"), "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"), "status.podIP": pod_ip, "status.hostIP": host_ip,
    }
    if path in simple:
        return str(simple[path] or "")
    match = _SUBSCRIPT.match(path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef {path!r}")


def _service_variables(service: Mapping[str, Any]) -> dict[str, str]:
    """One Service's variables as Kubernetes names them: ``WEB_SERVICE_HOST``, ``WEB_PORT_80_TCP_ADDR``..."""
    spec = service.get("spec") or {}
    host, ports = spec.get("clusterIP"), spec.get("ports") or []
    if not host or host == "None" or not ports:
        return {}
    prefix = service["metadata"]["name"].upper().replace("-", "_")
    first = ports[0]
    variables = {f"{prefix}_SERVICE_HOST": host, f"{prefix}_SERVICE_PORT": str(first["port"]),
                 f"{prefix}_PORT": f"{(first.get('protocol') or 'TCP').lower()}://{host}:{first['port']}"}
    for port in ports:
        protocol = port.get("protocol") or "TCP"
        if port.get("name"):
            variables[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
        base = f"{prefix}_PORT_{port['port']}_{protocol}"
        variables.update({base: f"{protocol.lower()}://{host}:{port['port']}", f"{base}_PROTO": protocol.lower(),
                          f"{base}_PORT": str(port["port"]), f"{base}_ADDR": host})
    return variables


def service_environment(pod: Mapping[str, Any], services: list[Mapping[str, Any]]) -> dict[str, str]:
    """The variables through which a pod finds Services without DNS, as the kubelet sets them.

    ``services`` are those of the pod's namespace plus ``default/kubernetes``: the
    latter is always included, the former only while ``enableServiceLinks`` is not false.
    """
    namespace = (pod.get("metadata") or {}).get("namespace")
    links = (pod.get("spec") or {}).get("enableServiceLinks", True) is not False
    variables: dict[str, str] = {}
    for service in sorted(services, key=lambda item: item["metadata"]["namespace"] != "default"):
        metadata = service["metadata"]
        master = metadata["namespace"] == "default" and metadata["name"] == "kubernetes"
        if master or (links and metadata["namespace"] == namespace):
            variables.update(_service_variables(service))
    return variables


def environment(pod: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str, host_ip: str,
                services: Mapping[str, str] | None = None) -> list[str]:
    """``NAME=value`` lines: the Services' variables, then the container's own in spec order (fieldRef values
    resolved), which win over a Service variable of the same name."""
    own = {variable["name"] for variable in container.get("env") or []}
    result = [f"{name}={value}" for name, value in (services or {}).items() if name not in own]
    for variable in container.get("env") or []:
        source = variable.get("valueFrom")
        if source is None:
            value = str(variable.get("value") or "")
        elif "fieldRef" in source:
            value = field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
        else:
            raise ConfigError(f"env {variable['name']!r}: unsupported valueFrom {', '.join(sorted(source))}")
        result.append(f"{variable['name']}={value}")
    return result


# --- create arguments ---------------------------------------------------------------------------------


def security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str | None, list[str]]:
    """Docker ``user`` (uid[:gid]) and ``group_add``; the container's securityContext wins over the pod's."""
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    own = container.get("securityContext") or {}
    uid = own.get("runAsUser", pod_context.get("runAsUser"))
    gid = own.get("runAsGroup", pod_context.get("runAsGroup"))
    user = None
    if gid is not None:
        user = f"{uid if uid is not None else 0}:{gid}"
    elif uid is not None:
        user = str(uid)
    groups = [pod_context["fsGroup"]] if pod_context.get("fsGroup") is not None else []
    groups += [group for group in pod_context.get("supplementalGroups") or [] if group not in groups]
    return user, [str(group) for group in groups]


def limits(container: Mapping[str, Any]) -> dict[str, int]:
    """Docker CPU and memory limits from ``resources.limits`` (requests only matter to the scheduler)."""
    wanted = (container.get("resources") or {}).get("limits") or {}
    result = {}
    if wanted.get("cpu") is not None:
        result["nano_cpus"] = cpu_millis(wanted["cpu"]) * 1_000_000
    if wanted.get("memory") is not None:
        result["mem_limit"] = memory_bytes(wanted["memory"])
        result["memswap_limit"] = result["mem_limit"]  # no swap beyond the limit, as Kubernetes sets it
    return result


def dns_search(namespace: str, cluster_domain: str | None) -> list[str]:
    if not cluster_domain:
        return []
    return [f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]


def pause_create_args(pod: Mapping[str, Any], image: str, node_name: str, cluster_dns: list[str],
                      cluster_domain: str | None) -> dict[str, Any]:
    """``containers.create`` arguments of the pod's pause container (its network and IPC namespaces)."""
    metadata, spec = pod["metadata"], pod.get("spec") or {}
    args: dict[str, Any] = {
        "image": image,
        "name": pause_name(pod),
        "labels": pod_labels(pod, node_name, KIND_PAUSE, POD_CONTAINER_NAME),
        "ipc_mode": "shareable",
        "detach": True,
    }
    if spec.get("hostNetwork"):
        args["network_mode"] = "host"
    else:
        args["hostname"] = metadata["name"][:63]
        if spec.get("dnsPolicy", "ClusterFirst") == "ClusterFirst" and cluster_dns:
            args["dns"] = list(cluster_dns)
            args["dns_search"] = dns_search(metadata["namespace"], cluster_domain)
            args["dns_opt"] = ["ndots:5"]
    return args


def container_create_args(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    pause_id: str,
    volumes: Mapping[str, str],
    *,
    node_name: str,
    restart_count: int = 0,
    backoff: int = 0,
    pod_ip: str = "",
    host_ip: str = "",
    services: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``containers.create`` arguments of one app container, joined to the pause container ``pause_id``.

    ``volumes`` maps the pod's volume names to host paths; ``services`` are the
    variables of :func:`service_environment`; ``backoff`` is the
    number of quick restarts before this one, carried in a label so that the
    back-off survives a kubelet restart.
    """
    user, group_add = security(pod, container)
    labels = pod_labels(pod, node_name, KIND_APP, container["name"])
    labels.update({LABEL_RESTART_COUNT: str(restart_count), LABEL_HASH: container_hash(container),
                   LABEL_BACKOFF: str(backoff)})
    args: dict[str, Any] = {
        "image": container["image"],
        "name": container_name(pod, container, restart_count),
        "labels": labels,
        "network_mode": f"container:{pause_id}",
        "ipc_mode": f"container:{pause_id}",
        "environment": environment(pod, container, pod_ip, host_ip, services),
        "volumes": binds(container, volumes),
        "detach": True,
        **limits(container),
    }
    if container.get("command"):
        args["entrypoint"] = list(container["command"])
    if container.get("args"):
        args["command"] = list(container["args"])
    if container.get("workingDir"):
        args["working_dir"] = container["workingDir"]
    if user is not None:
        args["user"] = user
    if group_add:
        args["group_add"] = group_add
    return args
