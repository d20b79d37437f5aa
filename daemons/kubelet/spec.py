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

from daemons.api.quantity import cpu_millis, memory_bytes, parse_quantity
from daemons.kubelet.configfiles import ConfigKind, ConfigObjects, not_found, volume_dir, volume_kind

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
    config: ConfigKind | None = None  # a configMap or secret volume: the kubelet writes its files


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
        elif (config := volume_kind(volume)) is not None:
            path = volume_dir(pod_dir(root_dir, pod), config[0], name)
            sources[name] = VolumeSource(name, path, "directory", config=config[0])
        else:
            kinds = sorted(key for key in volume if key != "name")
            raise ConfigError(f"volume {name!r}: unsupported volume type {', '.join(kinds) or '(none)'}")
    return sources


def binds(container: Mapping[str, Any], volumes: Mapping[str, str],
          read_only: frozenset[str] = frozenset()) -> list[str]:
    """Docker bind specs (``host:container:ro|rw``) for a container's volumeMounts.

    ``read_only`` names the volumes that are always mounted read-only (configMap and secret, as upstream).
    """
    result = []
    for mount in container.get("volumeMounts") or []:
        host = volumes.get(mount["name"])
        if host is None:
            raise ConfigError(f"volumeMount {mount['name']!r}: no such volume in the pod")
        if mount.get("subPath"):
            host = os.path.join(host, mount["subPath"])
        mode = "ro" if mount.get("readOnly") or mount["name"] in read_only else "rw"
        result.append(f"{host}:{mount['mountPath']}:{mode}")
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


_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def expand(text: str, variables: Mapping[str, str]) -> str:
    """``$(NAME)`` replaced as upstream does: ``$$`` is a literal ``$``; an unknown or unclosed reference stays."""
    out: list[str] = []
    index = 0
    while index < len(text):
        if text[index] == "$" and index + 1 < len(text):
            following = text[index + 1]
            if following == "$":
                out.append("$")
                index += 2
                continue
            end = text.find(")", index + 2) if following == "(" else -1
            if end != -1:
                name = text[index + 2:end]
                out.append(variables[name] if name in variables else text[index:end + 1])
                index = end + 1
                continue
        out.append(text[index])
        index += 1
    return "".join(out)


def resource_field(container: Mapping[str, Any], selector: Mapping[str, Any],
                   allocatable: Mapping[str, str]) -> str:
    """A ``resourceFieldRef`` value: the container's limit or request over ``divisor``, rounded up.

    As upstream: an unset limit is the node's allocatable amount, an unset request the limit (or 0).
    """
    resource = str(selector.get("resource") or "")
    group, _, name = resource.partition(".")
    if group not in ("limits", "requests") or name not in ("cpu", "memory", "ephemeral-storage"):
        raise ConfigError(f"unsupported resourceFieldRef {resource!r}")
    resources = container.get("resources") or {}
    value = (resources.get(group) or {}).get(name)
    if value is None:
        value = (resources.get("limits") or {}).get(name) if group == "requests" else allocatable.get(name)
    try:
        divisor = parse_quantity(selector.get("divisor") or "1")
        amount = parse_quantity(value if value is not None else "0")
    except ValueError as error:
        raise ConfigError(f"resourceFieldRef {resource!r}: {error}") from None
    if divisor <= 0:
        raise ConfigError(f"resourceFieldRef {resource!r}: divisor must be positive")
    return str(int((amount / divisor).to_integral_value(rounding="ROUND_CEILING")))


def _key_ref(kind: ConfigKind, selector: Mapping[str, Any], namespace: str,
             objects: ConfigObjects) -> str | None:
    """A configMapKeyRef or secretKeyRef value; None when it is optional and missing."""
    name, key = str(selector.get("name") or ""), str(selector.get("key") or "")
    data = objects.get((kind, name))
    if data is None or key not in data:
        if selector.get("optional"):
            return None
        if data is None:
            raise ConfigError(not_found(kind, name))
        raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key].decode(errors="replace")


def _from_sources(container: Mapping[str, Any], objects: ConfigObjects) -> dict[str, str]:
    """The variables of ``envFrom``: every key of each ConfigMap or Secret, with its prefix, later ones winning."""
    variables: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind: ConfigKind = "ConfigMap" if source.get("configMapRef") else "Secret"
        selector = source.get("configMapRef") or source.get("secretRef") or {}
        data = objects.get((kind, str(selector.get("name") or "")))
        if data is None:
            if selector.get("optional"):
                continue
            raise ConfigError(not_found(kind, str(selector.get("name") or "")))
        for key, value in data.items():
            name = f"{source.get('prefix') or ''}{key}"
            if _ENV_NAME.match(name):  # upstream skips keys that are no valid variable name
                variables.pop(name, None)
                variables[name] = value.decode(errors="replace")
    return variables


def environment(pod: Mapping[str, Any], container: Mapping[str, Any], pod_ip: str, host_ip: str,
                services: Mapping[str, str] | None = None, objects: ConfigObjects | None = None,
                allocatable: Mapping[str, str] | None = None) -> dict[str, str]:
    """The container's environment in order: Service variables, then ``envFrom``, then ``env`` (later wins).

    ``objects`` holds the data of the ConfigMaps and Secrets the pod names;
    each ``env`` value has its ``$(VAR)`` references to the variables before
    it expanded. A missing non-optional reference is a ``ConfigError``.
    """
    objects = objects or {}
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    variables = dict(services or {})
    for name, value in _from_sources(container, objects).items():
        variables.pop(name, None)
        variables[name] = value
    for variable in container.get("env") or []:
        source = variable.get("valueFrom")
        found: str | None
        if source is None:
            found = expand(str(variable.get("value") or ""), variables)
        elif "fieldRef" in source:
            found = field_ref(pod, source["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "resourceFieldRef" in source:
            found = resource_field(container, source["resourceFieldRef"], allocatable or {})
        elif "configMapKeyRef" in source:
            found = _key_ref("ConfigMap", source["configMapKeyRef"], namespace, objects)
        elif "secretKeyRef" in source:
            found = _key_ref("Secret", source["secretKeyRef"], namespace, objects)
        else:
            raise ConfigError(f"env {variable['name']!r}: unsupported valueFrom {', '.join(sorted(source))}")
        if found is not None:
            variables.pop(variable["name"], None)
            variables[variable["name"]] = found
    return variables


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
        args["hostname"] = (spec.get("hostname") or metadata["name"])[:63]  # spec.hostname, as upstream
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
    objects: ConfigObjects | None = None,
    allocatable: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``containers.create`` arguments of one app container, joined to the pause container ``pause_id``.

    ``volumes`` maps the pod's volume names to host paths; ``services`` are the
    variables of :func:`service_environment`; ``objects`` the data of the
    ConfigMaps and Secrets the pod names; ``backoff`` is the
    number of quick restarts before this one, carried in a label so that the
    back-off survives a kubelet restart.
    """
    user, group_add = security(pod, container)
    variables = environment(pod, container, pod_ip, host_ip, services, objects, allocatable)
    read_only = frozenset(volume["name"] for volume in (pod.get("spec") or {}).get("volumes") or []
                          if volume_kind(volume) is not None)
    labels = pod_labels(pod, node_name, KIND_APP, container["name"])
    labels.update({LABEL_RESTART_COUNT: str(restart_count), LABEL_HASH: container_hash(container),
                   LABEL_BACKOFF: str(backoff)})
    args: dict[str, Any] = {
        "image": container["image"],
        "name": container_name(pod, container, restart_count),
        "labels": labels,
        "network_mode": f"container:{pause_id}",
        "ipc_mode": f"container:{pause_id}",
        "environment": [f"{name}={value}" for name, value in variables.items()],
        "volumes": binds(container, volumes, read_only),
        "detach": True,
        **limits(container),
    }
    if container.get("command"):
        args["entrypoint"] = [expand(part, variables) for part in container["command"]]
    if container.get("args"):
        args["command"] = [expand(part, variables) for part in container["args"]]
    if container.get("workingDir"):
        args["working_dir"] = container["workingDir"]
    if user is not None:
        args["user"] = user
    if group_add:
        args["group_add"] = group_add
    return args
