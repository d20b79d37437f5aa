"""Upstream's defaulting (``SetDefaults_*`` of core, apps, batch, autoscaling, discovery) on wire dicts.

Each function fills, in place, the fields a Kubernetes apiserver fills before validation, so that what is
stored and read back looks as it does upstream (kubectl and client libraries rely on some of these fields
being present, e.g. ``kubectl debug`` dereferences the pod's ``securityContext``). None of them overwrites a
field the user set, except where upstream does (a namespace's ``kubernetes.io/metadata.name`` label), and
applying one twice gives what applying it once gives. Validation is elsewhere: these functions only fill.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

# An octal 0644: configMap, secret, downwardAPI and projected volumes' file mode.
DEFAULT_FILE_MODE = 0o644
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
# The volume sources the API knows; a volume naming none of them is an emptyDir.
MODED_VOLUME_SOURCES = ("configMap", "secret", "downwardAPI", "projected")
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def _child(obj: Obj, key: str) -> Obj:
    """``obj[key]`` as a dict, created empty when absent (Go's zero-valued struct field)."""
    value = obj.get(key)
    if not isinstance(value, dict):
        value = obj[key] = {}
    return value


def _dicts(value: Any) -> list[Obj]:
    """The dict items of a list field, skipping anything malformed (validation reports it)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


# --- pods ------------------------------------------------------------------------------------------


def _image_tag(image: str) -> str:
    """The tag of an image reference ("" when it has none; a digest counts as a tag)."""
    if "@" in image:
        return image.rsplit("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


def _default_http_get(action: Any) -> None:
    if isinstance(action, dict):
        action.setdefault("path", "/")
        action.setdefault("scheme", "HTTP")


def _default_probe(probe: Obj) -> None:
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    _default_http_get(probe.get("httpGet"))


def _default_field_ref(source: Any) -> None:
    if isinstance(source, dict) and isinstance(source.get("fieldRef"), dict):
        source["fieldRef"].setdefault("apiVersion", "v1")


def _default_container(container: Obj) -> None:
    """SetDefaults_Container, _ContainerPort, _Probe, _HTTPGetAction and _ObjectFieldSelector of one container."""
    if "imagePullPolicy" not in container:
        tag = _image_tag(str(container.get("image") or ""))
        container["imagePullPolicy"] = "Always" if tag in ("", "latest") else "IfNotPresent"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    for port in _dicts(container.get("ports")):
        port.setdefault("protocol", "TCP")
    for probe in PROBES:
        if isinstance(container.get(probe), dict):
            _default_probe(container[probe])
    lifecycle = container.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in ("postStart", "preStop"):
            if isinstance(lifecycle.get(hook), dict):
                _default_http_get(lifecycle[hook].get("httpGet"))
    for env in _dicts(container.get("env")):
        _default_field_ref(env.get("valueFrom"))


def _default_volume(volume: Obj) -> None:
    """SetDefaults_Volume and its sources: no source means an emptyDir; mounted files get mode 0644."""
    if not set(volume) - {"name"}:
        volume["emptyDir"] = {}
    for source in MODED_VOLUME_SOURCES:
        if isinstance(volume.get(source), dict):
            volume[source].setdefault("defaultMode", DEFAULT_FILE_MODE)
    if isinstance(volume.get("hostPath"), dict):
        volume["hostPath"].setdefault("type", "")
    if isinstance(volume.get("downwardAPI"), dict):
        for item in _dicts(volume["downwardAPI"].get("items")):
            _default_field_ref(item)


def _default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and what it reaches: what a pod and every pod template get."""
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    if not isinstance(spec.get("securityContext"), dict):
        spec["securityContext"] = {}
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for container in _dicts(spec.get(field)):
            _default_container(container)
    for volume in _dicts(spec.get("volumes")):
        _default_volume(volume)


def default_pod_template(template: Any) -> None:
    """A workload's ``spec.template``: its pod spec defaulted as a pod's is, less the pod-only defaults."""
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        _default_pod_spec(template["spec"])


def default_pod(obj: Obj) -> None:
    """SetDefaults_Pod: the pod spec's defaults, service links on, requests taken from limits, host ports."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    for container in [*_dicts(spec.get("containers")), *_dicts(spec.get("initContainers"))]:
        resources = container.get("resources")
        if isinstance(resources, dict) and isinstance(resources.get("limits"), dict) and resources["limits"]:
            requests = _child(resources, "requests")
            for name, limit in resources["limits"].items():
                requests.setdefault(name, limit)
        if spec.get("hostNetwork"):
            for port in _dicts(container.get("ports")):
                port.setdefault("hostPort", port.get("containerPort"))


# --- services and endpoints ----------------------------------------------------------------------


def default_service(obj: Obj) -> None:
    """SetDefaults_Service, plus the IP family fields the service registry sets on create (one IPv4 family)."""
    spec = _child(obj, "spec")
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["sessionAffinity"] == "ClientIP":
        client_ip = _child(_child(spec, "sessionAffinityConfig"), "clientIP")
        client_ip.setdefault("timeoutSeconds", 10800)
    for port in _dicts(spec.get("ports")):
        port.setdefault("protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])


def default_endpoints(obj: Obj) -> None:
    """SetDefaults_EndpointPort of every subset."""
    for subset in _dicts(obj.get("subsets")):
        for port in _dicts(subset.get("ports")):
            port.setdefault("protocol", "TCP")


def default_endpoint_slice(obj: Obj) -> None:
    """discovery/v1 SetDefaults_EndpointPort: an unnamed port is named "", the protocol is TCP."""
    for port in _dicts(obj.get("ports")):
        port.setdefault("name", "")
        port.setdefault("protocol", "TCP")


# --- core kinds without a pod template ---------------------------------------------------------


def default_namespace(obj: Obj) -> None:
    """SetDefaults_Namespace (the name label, always the name) and the ``kubernetes`` finalizer upstream's
    strategy adds on create, which the namespace controller removes once the namespace is empty."""
    metadata = _child(obj, "metadata")
    if metadata.get("name"):
        _child(metadata, "labels")[NAMESPACE_NAME_LABEL] = metadata["name"]
    _child(obj, "spec").setdefault("finalizers", ["kubernetes"])


def default_secret(obj: Obj) -> None:
    obj.setdefault("type", "Opaque")


# --- workloads -----------------------------------------------------------------------------------


def default_replica_set(obj: Obj) -> None:
    """apps/v1 SetDefaults_ReplicaSet: one replica (apps/v1 defaults neither selector nor labels)."""
    spec = _child(obj, "spec")
    spec.setdefault("replicas", 1)
    default_pod_template(spec.get("template"))


def default_replication_controller(obj: Obj) -> None:
    """core/v1 SetDefaults_ReplicationController: one replica; selector and labels from the template's labels."""
    spec = _child(obj, "spec")
    template = spec.get("template")
    labels = (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    if labels:
        if not spec.get("selector"):
            spec["selector"] = dict(labels)
        metadata = _child(obj, "metadata")
        if not metadata.get("labels"):
            metadata["labels"] = dict(labels)
    spec.setdefault("replicas", 1)
    default_pod_template(template)


def default_deployment(obj: Obj) -> None:
    """apps/v1 SetDefaults_Deployment: one replica, rolling updates of 25%/25%, 10 revisions, 600s deadline."""
    spec = _child(obj, "spec")
    spec.setdefault("replicas", 1)
    strategy = _child(spec, "strategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = _child(strategy, "rollingUpdate")
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    default_pod_template(spec.get("template"))


def default_daemon_set(obj: Obj) -> None:
    """apps/v1 SetDefaults_DaemonSet: rolling updates of one node at a time, no surge; 10 revisions."""
    spec = _child(obj, "spec")
    strategy = _child(spec, "updateStrategy")
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        rolling = _child(strategy, "rollingUpdate")
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    default_pod_template(spec.get("template"))


def _default_job_spec(spec: Obj) -> None:
    """SetDefaults_Job's spec part. The template's restartPolicy defaults to Always like any pod template's,
    which a Job refuses: its author must say OnFailure or Never."""
    if "completions" not in spec and "parallelism" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 2147483647 if "backoffLimitPerIndex" in spec else 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "Failed" if "podFailurePolicy" in spec else "TerminatingOrFailed")
    default_pod_template(spec.get("template"))


def default_job(obj: Obj) -> None:
    """batch/v1 SetDefaults_Job: one pod to completion, 6 retries; the Job's labels default to the template's."""
    spec = _child(obj, "spec")
    _default_job_spec(spec)
    template = spec.get("template")
    labels = (template.get("metadata") or {}).get("labels") if isinstance(template, dict) else None
    metadata = _child(obj, "metadata")
    if labels and not metadata.get("labels"):
        metadata["labels"] = dict(labels)


def default_cron_job(obj: Obj) -> None:
    """batch/v1 SetDefaults_CronJob: concurrent runs allowed, not suspended, 3 successful and 1 failed job kept;
    the job template's pod template is defaulted as any other."""
    spec = _child(obj, "spec")
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    job_template = spec.get("jobTemplate")
    if isinstance(job_template, dict) and isinstance(job_template.get("spec"), dict):
        default_pod_template(job_template["spec"].get("template"))


# --- autoscaling -----------------------------------------------------------------------------------


def _scale_up_policies() -> list[Obj]:
    return [{"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]


def default_horizontal_pod_autoscaler(obj: Obj) -> None:
    """autoscaling/v2 SetDefaults_HorizontalPodAutoscaler: at least one replica, 80% CPU when no metric is
    given, and a given behavior completed with upstream's rules (scale-down stabilization stays unset: the
    controller's flag decides it)."""
    spec = _child(obj, "spec")
    spec.setdefault("minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    behavior = spec.get("behavior")
    if not isinstance(behavior, dict):
        return
    scale_up = _child(behavior, "scaleUp")
    scale_up.setdefault("stabilizationWindowSeconds", 0)
    scale_up.setdefault("selectPolicy", "Max")
    scale_up.setdefault("policies", _scale_up_policies())
    scale_down = _child(behavior, "scaleDown")
    scale_down.setdefault("selectPolicy", "Max")
    scale_down.setdefault("policies", [{"type": "Percent", "value": 100, "periodSeconds": 15}])
