"""Pydantic models of the API objects, with Kubernetes field names on the wire.

Attributes are snake_case; the wire names (camelCase, and the few irregular
ones such as ``podIP``) are aliases. Unknown fields are kept (``extra="allow"``)
so that a field this project does not model yet survives a round trip, as it
does through a Kubernetes apiserver's unstructured paths.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel, to_snake

from daemons.api.quantity import parse_quantity

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _name_check(pattern: re.Pattern[str], max_length: int, rule: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if len(value) > max_length or not pattern.match(value):
            raise ValueError(f"{rule} (got {value!r})")
        return value

    return check


check_dns1123_label = _name_check(
    DNS1123_LABEL, 63, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character")
check_dns1123_subdomain = _name_check(
    DNS1123_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character")
check_dns1035_label = _name_check(
    DNS1035_LABEL, 63, "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character")


def check_label_key(key: str) -> str:
    prefix, _, name = key.rpartition("/")
    if prefix:
        check_dns1123_subdomain(prefix)
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        raise ValueError(f"label key {key!r} must be a qualified name ([prefix/]name, name of at most 63 "
                         "alphanumeric characters, '-', '_' or '.')")
    return key


def check_label_value(value: str) -> str:
    if len(value) > 63 or not LABEL_VALUE.match(value):
        raise ValueError(f"label value {value!r} must be at most 63 alphanumeric characters, '-', '_' or "
                         "'.', starting and ending with an alphanumeric character")
    return value


class KubeModel(BaseModel):
    """Base of every API structure: camelCase on the wire, unknown fields kept."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def wire(self) -> dict[str, Any]:
        """The object as the API speaks it: wire names, no null fields."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


Quantity = int | float | str
IntOrString = int | str


class OwnerReference(KubeModel):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = None


class ObjectMeta(KubeModel):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None
    finalizers: list[str] | None = None
    managed_fields: list[dict[str, Any]] | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (labels or {}).items():
            check_label_key(key)
            check_label_value(value)
        return labels


class ObjectReference(KubeModel):
    api_version: str | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class LabelSelectorRequirement(KubeModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(KubeModel):
    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class KubeObject(KubeModel):
    """A top-level object: apiVersion, kind, metadata."""

    api_version: str | None = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)


# --- Pods -------------------------------------------------------------------------------------------

class EnvVar(KubeModel):
    name: str
    value: str | None = None
    value_from: dict[str, Any] | None = None


class ContainerPort(KubeModel):
    name: str | None = None
    container_port: Annotated[int, Field(ge=1, le=65535)]
    host_port: Annotated[int, Field(ge=1, le=65535)] | None = None
    host_ip: str | None = Field(default=None, alias="hostIP")
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class ResourceRequirements(KubeModel):
    limits: dict[str, Quantity] | None = None
    requests: dict[str, Quantity] | None = None

    @model_validator(mode="after")
    def _quantities(self) -> ResourceRequirements:
        parsed: dict[str, dict[str, Decimal]] = {}
        for field in ("limits", "requests"):
            for name, value in (getattr(self, field) or {}).items():
                try:
                    amount = parse_quantity(value)
                except ValueError as error:
                    raise ValueError(f"{field}[{name}]: {error}") from None
                if amount < 0:
                    raise ValueError(f"{field}[{name}]: must be greater than or equal to 0 (got {value!r})")
                parsed.setdefault(field, {})[name] = amount
        for name, request in parsed.get("requests", {}).items():
            limit = parsed.get("limits", {}).get(name)
            if limit is not None and request > limit:
                raise ValueError(f"requests[{name}]: must be less than or equal to {name} limit of {limit}")
        return self


class VolumeMount(KubeModel):
    name: str
    mount_path: str
    read_only: bool | None = None
    sub_path: str | None = None


class HTTPGetAction(KubeModel):
    path: str | None = None
    port: IntOrString
    host: str | None = None
    scheme: Literal["HTTP", "HTTPS"] = "HTTP"


class Probe(KubeModel):
    exec: dict[str, Any] | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: dict[str, Any] | None = None
    initial_delay_seconds: Annotated[int, Field(ge=0)] | None = None
    period_seconds: Annotated[int, Field(ge=1)] | None = None
    timeout_seconds: Annotated[int, Field(ge=1)] | None = None
    success_threshold: Annotated[int, Field(ge=1)] | None = None
    failure_threshold: Annotated[int, Field(ge=1)] | None = None


class SecurityContext(KubeModel):
    run_as_user: Annotated[int, Field(ge=0)] | None = None
    run_as_group: Annotated[int, Field(ge=0)] | None = None
    run_as_non_root: bool | None = None
    privileged: bool | None = None
    read_only_root_filesystem: bool | None = None


class PodSecurityContext(SecurityContext):
    fs_group: Annotated[int, Field(ge=0)] | None = None
    supplemental_groups: list[Annotated[int, Field(ge=0)]] | None = None
    supplemental_groups_policy: Literal["Merge", "Strict"] | None = None


class Container(KubeModel):
    name: str
    image: str
    command: list[str] | None = None
    args: list[str] | None = None
    working_dir: str | None = None
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements | None = None
    volume_mounts: list[VolumeMount] | None = None
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    security_context: SecurityContext | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    termination_message_path: str | None = None
    termination_message_policy: Literal["File", "FallbackToLogsOnError"] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_dns1123_label(name)

    @field_validator("image")
    @classmethod
    def _image(cls, image: str) -> str:
        if not image.strip():
            raise ValueError("image must not be empty")
        return image


class Volume(KubeModel):
    name: str
    empty_dir: dict[str, Any] | None = None
    host_path: dict[str, Any] | None = None
    persistent_volume_claim: dict[str, Any] | None = None
    config_map: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return check_dns1123_label(name)


class Toleration(KubeModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class PodSpec(KubeModel):
    containers: Annotated[list[Container], Field(min_length=1)]
    init_containers: list[Container] | None = None
    volumes: list[Volume] | None = None
    restart_policy: Literal["Always", "OnFailure", "Never"] = "Always"
    termination_grace_period_seconds: Annotated[int, Field(ge=0)] = 30
    dns_policy: Literal["ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"] = "ClusterFirst"
    node_selector: dict[str, str] | None = None
    node_name: str | None = None
    service_account_name: str | None = None
    host_network: bool | None = None
    security_context: PodSecurityContext | None = None
    scheduler_name: str = "default-scheduler"
    enable_service_links: bool | None = None
    tolerations: list[Toleration] | None = None
    affinity: dict[str, Any] | None = None
    priority: int | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> PodSpec:
        seen: set[str] = set()
        for container in [*self.containers, *(self.init_containers or [])]:
            if container.name in seen:
                raise ValueError(f"containers: duplicate container name {container.name!r}")
            seen.add(container.name)
        volume_names = [volume.name for volume in self.volumes or []]
        if len(volume_names) != len(set(volume_names)):
            raise ValueError("volumes: duplicate volume name")
        for container in self.containers:
            for mount in container.volume_mounts or []:
                if mount.name not in volume_names:
                    raise ValueError(
                        f"containers[{container.name}].volumeMounts: volume {mount.name!r} not found"
                    )
        return self


class ContainerStatus(KubeModel):
    name: str
    ready: bool = False
    restart_count: int = 0
    image: str | None = None
    image_id: str | None = Field(default=None, alias="imageID")
    container_id: str | None = Field(default=None, alias="containerID")
    started: bool | None = None
    state: dict[str, Any] | None = None
    last_state: dict[str, Any] | None = None


class PodCondition(KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    last_probe_time: str | None = None


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]


class PodStatus(KubeModel):
    phase: PodPhase | None = None
    conditions: list[PodCondition] | None = None
    message: str | None = None
    reason: str | None = None
    host_ip: str | None = Field(default=None, alias="hostIP")
    pod_ip: str | None = Field(default=None, alias="podIP")
    pod_ips: list[dict[str, str]] | None = Field(default=None, alias="podIPs")
    start_time: str | None = None
    container_statuses: list[ContainerStatus] | None = None
    init_container_statuses: list[ContainerStatus] | None = None


class Pod(KubeObject):
    spec: PodSpec
    status: PodStatus | None = None


class PodTemplateSpec(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec


# --- Nodes and namespaces ---------------------------------------------------------------------------

class Taint(KubeModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    time_added: str | None = None


class NodeSpec(KubeModel):
    pod_cidr: str | None = Field(default=None, alias="podCIDR")
    pod_cidrs: list[str] | None = Field(default=None, alias="podCIDRs")
    unschedulable: bool | None = None
    taints: list[Taint] | None = None
    provider_id: str | None = Field(default=None, alias="providerID")


class NodeCondition(KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_heartbeat_time: str | None = None
    last_transition_time: str | None = None


class NodeAddress(KubeModel):
    type: Literal["InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS"]
    address: str


class NodeStatus(KubeModel):
    capacity: dict[str, Quantity] | None = None
    allocatable: dict[str, Quantity] | None = None
    conditions: list[NodeCondition] | None = None
    addresses: list[NodeAddress] | None = None
    node_info: dict[str, Any] | None = None
    daemon_endpoints: dict[str, Any] | None = None


class Node(KubeObject):
    spec: NodeSpec = Field(default_factory=NodeSpec)
    status: NodeStatus | None = None


class NamespaceStatus(KubeModel):
    phase: Literal["Active", "Terminating"] | None = None


class Namespace(KubeObject):
    spec: dict[str, Any] | None = None
    status: NamespaceStatus | None = None


# --- Services ---------------------------------------------------------------------------------------

ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]
# Types that expose node ports: a LoadBalancer behaves as a NodePort service here (no cloud provider).
NODE_PORT_TYPES = ("NodePort", "LoadBalancer")
HEADLESS = "None"
IANA_SVC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")


def check_ip(value: str) -> str:
    """An IP address in its canonical text form (what ``ipaddress`` prints back)."""
    try:
        if str(ipaddress.ip_address(value)) == value:
            return value
    except ValueError:
        pass
    raise ValueError(f'"{value}": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)')


class ServicePort(KubeModel):
    name: str | None = None
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    app_protocol: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)]
    target_port: IntOrString | None = None
    node_port: Annotated[int, Field(ge=0, le=65535)] | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, name: str | None) -> str | None:
        return check_dns1123_label(name) if name else None

    @model_validator(mode="after")
    def _defaults(self) -> ServicePort:
        """An unset (or zero) targetPort means the port itself; a zero nodePort means "allocate one"."""
        if self.target_port in (None, 0, ""):
            self.target_port = self.port
        elif isinstance(self.target_port, int) and not 1 <= self.target_port <= 65535:
            raise ValueError(f"targetPort: {self.target_port}: must be between 1 and 65535, inclusive")
        elif isinstance(self.target_port, str) and (not IANA_SVC_NAME.match(self.target_port)
                                                    or not re.search("[a-z]", self.target_port)
                                                    or "--" in self.target_port):
            raise ValueError(f"targetPort: {self.target_port!r}: must be a port number or an IANA_SVC_NAME "
                             "(at most 15 lower case alphanumeric characters or '-', with at least one letter)")
        if self.node_port == 0:
            self.node_port = None
        return self


class ServiceSpec(KubeModel):
    """A Service's spec, defaulted as Kubernetes does; the apiserver fills in clusterIP(s) and node ports."""

    type: ServiceType = "ClusterIP"
    selector: dict[str, str] | None = None
    ports: list[ServicePort] | None = None
    cluster_ip: str | None = Field(default=None, alias="clusterIP")
    cluster_ips: list[str] | None = Field(default=None, alias="clusterIPs")
    ip_families: list[Literal["IPv4", "IPv6"]] | None = None
    ip_family_policy: Literal["SingleStack", "PreferDualStack", "RequireDualStack"] | None = None
    external_name: str | None = None
    external_ips: list[str] | None = Field(default=None, alias="externalIPs")
    load_balancer_ip: str | None = Field(default=None, alias="loadBalancerIP")
    session_affinity: Literal["ClientIP", "None"] = "None"
    session_affinity_config: dict[str, Any] | None = None
    internal_traffic_policy: Literal["Cluster", "Local"] | None = None
    external_traffic_policy: Literal["Cluster", "Local"] | None = None
    allocate_load_balancer_node_ports: bool | None = None
    publish_not_ready_addresses: bool | None = None

    @property
    def headless(self) -> bool:
        return self.cluster_ip == HEADLESS

    @field_validator("selector")
    @classmethod
    def _selector(cls, selector: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (selector or {}).items():
            check_label_key(key)
            check_label_value(value)
        return selector

    @model_validator(mode="after")
    def _check(self) -> ServiceSpec:
        self._cluster_ips()
        if self.type == "ExternalName":
            if self.cluster_ip:
                raise ValueError("clusterIPs: Forbidden: may not be set for ExternalName services")
            if not self.external_name:
                raise ValueError("externalName: Required value")
            try:
                check_dns1123_subdomain(self.external_name.removesuffix("."))
            except ValueError as error:
                raise ValueError(f"externalName: {error}") from None
        else:
            if not self.ports and not self.headless:
                raise ValueError("ports: Required value")
            if self.headless and self.type in NODE_PORT_TYPES:
                raise ValueError(f"clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for "
                                 f"{self.type} services")
            self.ip_families = self.ip_families or ["IPv4"]
            self.ip_family_policy = self.ip_family_policy or "SingleStack"
            self.internal_traffic_policy = self.internal_traffic_policy or "Cluster"
        if self.type in NODE_PORT_TYPES:
            self.external_traffic_policy = self.external_traffic_policy or "Cluster"
        elif self.external_traffic_policy:
            raise ValueError(f"externalTrafficPolicy: Invalid value: \"{self.external_traffic_policy}\": may only "
                             "be set for externally-accessible services")
        if self.type == "LoadBalancer" and self.allocate_load_balancer_node_ports is None:
            self.allocate_load_balancer_node_ports = True
        elif self.type != "LoadBalancer" and self.allocate_load_balancer_node_ports is not None:
            raise ValueError("allocateLoadBalancerNodePorts: Forbidden: may only be used when `type` is "
                             "'LoadBalancer'")
        self._check_ports()
        return self

    def _cluster_ips(self) -> None:
        """``clusterIP`` and ``clusterIPs[0]`` agree; "" means unset; each is an IP or "None"."""
        ips = [ip for ip in self.cluster_ips or [] if ip]
        if self.cluster_ip and ips and ips[0] != self.cluster_ip:
            raise ValueError(f"clusterIPs[0]: Invalid value: \"{ips[0]}\": must match `clusterIP` "
                             f"(\"{self.cluster_ip}\")")
        self.cluster_ip = self.cluster_ip or (ips[0] if ips else None)
        self.cluster_ips = [self.cluster_ip, *ips[1:]] if self.cluster_ip else None
        for index, ip in enumerate(self.cluster_ips or []):
            if ip == HEADLESS and index == 0 and len(self.cluster_ips or []) == 1:
                continue
            try:
                check_ip(ip)
            except ValueError as error:
                raise ValueError(f"clusterIPs[{index}]: Invalid value: {error}") from None

    def _check_ports(self) -> None:
        ports = self.ports or []
        names: set[str] = set()
        endpoints: set[tuple[int, str]] = set()
        node_ports: set[tuple[int, str]] = set()
        for index, port in enumerate(ports):
            if len(ports) > 1 and not port.name:
                raise ValueError(f"ports[{index}].name: Required value")
            if port.name in names:
                raise ValueError(f"ports[{index}].name: Duplicate value: \"{port.name}\"")
            names.add(port.name or "")
            if (port.port, port.protocol) in endpoints:
                raise ValueError(f"ports[{index}]: Duplicate value: \"{port.port}/{port.protocol}\"")
            endpoints.add((port.port, port.protocol))
            if port.node_port is None:
                continue
            if self.type not in NODE_PORT_TYPES:
                raise ValueError(f"ports[{index}].nodePort: Forbidden: may not be used when `type` is "
                                 f"'{self.type}'")
            if (port.node_port, port.protocol) in node_ports:
                raise ValueError(f"ports[{index}].nodePort: Duplicate value: {port.node_port}")
            node_ports.add((port.node_port, port.protocol))


class Service(KubeObject):
    spec: ServiceSpec = Field(default_factory=ServiceSpec)
    status: dict[str, Any] | None = None


class EndpointAddress(KubeModel):
    ip: str
    hostname: str | None = None
    node_name: str | None = None
    target_ref: ObjectReference | None = None


class EndpointPort(KubeModel):
    name: str | None = None
    port: Annotated[int, Field(ge=1, le=65535)]
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class EndpointSubset(KubeModel):
    addresses: list[EndpointAddress] | None = None
    not_ready_addresses: list[EndpointAddress] | None = None
    ports: list[EndpointPort] | None = None


class Endpoints(KubeObject):
    subsets: list[EndpointSubset] | None = None


# --- Leases (coordination.k8s.io) -------------------------------------------------------------------

class LeaseSpec(KubeModel):
    holder_identity: str | None = None
    lease_duration_seconds: int | None = Field(default=None, ge=1)
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int | None = Field(default=None, ge=0)


class Lease(KubeObject):
    """A holder's claim, renewed to show it is alive: every kubelet renews ``kube-node-lease/<node>``."""

    spec: LeaseSpec = Field(default_factory=LeaseSpec)


# --- Events -----------------------------------------------------------------------------------------

class EventSource(KubeModel):
    component: str | None = None
    host: str | None = None


class Event(KubeObject):
    involved_object: ObjectReference
    reason: str | None = None
    message: str | None = None
    type: Literal["Normal", "Warning"] | None = None
    count: int | None = None
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    event_time: str | None = None
    source: EventSource | None = None
    reporting_component: str | None = None
    reporting_instance: str | None = None
    action: str | None = None


# --- Workloads --------------------------------------------------------------------------------------

class WorkloadCondition(KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_update_time: str | None = None
    last_transition_time: str | None = None


class TemplatedWorkloadSpec(KubeModel):
    """What ReplicaSet and Deployment specs share: replicas, selector, template."""

    replicas: Annotated[int, Field(ge=0)] = 1
    min_ready_seconds: Annotated[int, Field(ge=0)] | None = None
    selector: LabelSelector
    template: PodTemplateSpec

    @model_validator(mode="after")
    def _selector_matches_template(self) -> TemplatedWorkloadSpec:
        from daemons.api.selectors import LabelSelectorQuery

        if not (self.selector.match_labels or self.selector.match_expressions):
            raise ValueError("selector: empty selector is invalid for this workload")
        labels = self.template.metadata.labels or {}
        if not LabelSelectorQuery.from_label_selector(self.selector.wire()).matches(labels):
            raise ValueError("template.metadata.labels: `selector` does not match template `labels`")
        return self


class ReplicaSetSpec(TemplatedWorkloadSpec):
    pass


class ReplicaSetStatus(KubeModel):
    replicas: int = 0
    fully_labeled_replicas: int | None = None
    ready_replicas: int | None = None
    available_replicas: int | None = None
    observed_generation: int | None = None
    conditions: list[WorkloadCondition] | None = None


class ReplicaSet(KubeObject):
    spec: ReplicaSetSpec
    status: ReplicaSetStatus | None = None


class RollingUpdateDeployment(KubeModel):
    max_surge: IntOrString = "25%"
    max_unavailable: IntOrString = "25%"


class DeploymentStrategy(KubeModel):
    type: Literal["RollingUpdate", "Recreate"] = "RollingUpdate"
    rolling_update: RollingUpdateDeployment | None = None

    @model_validator(mode="after")
    def _defaults(self) -> DeploymentStrategy:
        if self.type == "RollingUpdate" and self.rolling_update is None:
            self.rolling_update = RollingUpdateDeployment()
        if self.type == "Recreate" and self.rolling_update is not None:
            raise ValueError("rollingUpdate: may not be specified when strategy `type` is 'Recreate'")
        return self


class DeploymentSpec(TemplatedWorkloadSpec):
    strategy: DeploymentStrategy = Field(default_factory=DeploymentStrategy)
    revision_history_limit: Annotated[int, Field(ge=0)] = 10
    progress_deadline_seconds: Annotated[int, Field(ge=1)] = 600
    paused: bool | None = None


class DeploymentStatus(ReplicaSetStatus):
    updated_replicas: int | None = None
    unavailable_replicas: int | None = None
    collision_count: int | None = None


class Deployment(KubeObject):
    spec: DeploymentSpec
    status: DeploymentStatus | None = None


# --- Subresource bodies -----------------------------------------------------------------------------

class ScaleSpec(KubeModel):
    replicas: Annotated[int, Field(ge=0)] = 0


class ScaleStatus(KubeModel):
    replicas: int = 0
    selector: str | None = None


class Scale(KubeObject):
    spec: ScaleSpec = Field(default_factory=ScaleSpec)
    status: ScaleStatus | None = None


class Binding(KubeObject):
    target: ObjectReference


class DeleteOptions(KubeModel):
    grace_period_seconds: Annotated[int, Field(ge=0)] | None = None
    propagation_policy: Literal["Orphan", "Background", "Foreground"] | None = None
    preconditions: dict[str, str] | None = None
    dry_run: list[str] | None = None


# --- Autoscaling ------------------------------------------------------------------------------------

class CrossVersionObjectReference(KubeModel):
    api_version: str | None = None
    kind: str
    name: str


class MetricTarget(KubeModel):
    type: Literal["Utilization", "Value", "AverageValue"]
    value: Quantity | None = None
    average_value: Quantity | None = None
    average_utilization: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _target_set(self) -> MetricTarget:
        """The field the type names is required, as upstream's validation says."""
        needed = {"Utilization": "averageUtilization", "Value": "value", "AverageValue": "averageValue"}[self.type]
        if getattr(self, to_snake(needed)) is None:
            raise ValueError(f"{needed}: Required value: must set {needed} when type is {self.type}")
        for field in ("value", "averageValue"):
            quantity = getattr(self, to_snake(field))
            if quantity is not None:
                try:
                    amount = parse_quantity(quantity)
                except ValueError as error:
                    raise ValueError(f"{field}: Invalid value: {error}") from None
                if amount <= 0:
                    raise ValueError(f"{field}: Invalid value: {quantity!r}: must be positive")
        return self


class ResourceMetricSource(KubeModel):
    name: str
    target: MetricTarget


class ContainerResourceMetricSource(ResourceMetricSource):
    container: str


class MetricSpec(KubeModel):
    """One metric of an HPA; only ``Resource`` is computed here, the other types are reported unsupported."""

    type: Literal["Resource", "Pods", "Object", "External", "ContainerResource"]
    resource: ResourceMetricSource | None = None
    container_resource: ContainerResourceMetricSource | None = None
    pods: dict[str, Any] | None = None
    object: dict[str, Any] | None = None
    external: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _source_set(self) -> MetricSpec:
        field = self.type[0].lower() + self.type[1:]
        source = getattr(self, to_snake(field))
        if source is None:
            raise ValueError(f"{field}: Required value: must populate information for the given metric source")
        if isinstance(source, ResourceMetricSource) and source.target.type == "Value":
            raise ValueError(f"{field}.target.type: Unsupported value: \"Value\": must be either Utilization or "
                             "AverageValue for resource metrics")
        return self


class HPAScalingPolicy(KubeModel):
    type: Literal["Pods", "Percent"]
    value: Annotated[int, Field(gt=0)]
    period_seconds: Annotated[int, Field(ge=1, le=1800)]


class HPAScalingRules(KubeModel):
    stabilization_window_seconds: Annotated[int, Field(ge=0, le=3600)] | None = None
    select_policy: Literal["Max", "Min", "Disabled"] | None = None
    policies: list[HPAScalingPolicy] | None = None


def default_scale_up() -> HPAScalingRules:
    """Upstream's scale-up rules: at once, by the larger of doubling and four pods every 15 seconds."""
    return HPAScalingRules(stabilization_window_seconds=0, select_policy="Max", policies=[
        HPAScalingPolicy(type="Pods", value=4, period_seconds=15),
        HPAScalingPolicy(type="Percent", value=100, period_seconds=15)])


def default_scale_down() -> HPAScalingRules:
    """Upstream's scale-down rules: the highest recommendation of 5 minutes, then down to it at once."""
    return HPAScalingRules(stabilization_window_seconds=300, select_policy="Max", policies=[
        HPAScalingPolicy(type="Percent", value=100, period_seconds=15)])


def complete_rules(rules: HPAScalingRules | None, defaults: HPAScalingRules) -> HPAScalingRules:
    """``rules`` with each unset field taken from ``defaults``, as the apiserver defaults a given behavior."""
    if rules is None:
        return defaults
    return HPAScalingRules(
        stabilization_window_seconds=(defaults.stabilization_window_seconds if rules.stabilization_window_seconds
                                      is None else rules.stabilization_window_seconds),
        select_policy=rules.select_policy or defaults.select_policy,
        policies=defaults.policies if rules.policies is None else rules.policies)


class HorizontalPodAutoscalerBehavior(KubeModel):
    scale_up: HPAScalingRules | None = None
    scale_down: HPAScalingRules | None = None

    @model_validator(mode="after")
    def _defaults(self) -> HorizontalPodAutoscalerBehavior:
        self.scale_up = complete_rules(self.scale_up, default_scale_up())
        self.scale_down = complete_rules(self.scale_down, default_scale_down())
        for field, rules in (("scaleUp", self.scale_up), ("scaleDown", self.scale_down)):
            if rules.select_policy != "Disabled" and not rules.policies:
                raise ValueError(f"{field}.policies: Required value: must specify at least one Policy")
        return self


class HorizontalPodAutoscalerSpec(KubeModel):
    scale_target_ref: CrossVersionObjectReference
    min_replicas: Annotated[int, Field(ge=1)] = 1
    max_replicas: int
    metrics: list[MetricSpec] | None = None
    behavior: HorizontalPodAutoscalerBehavior | None = None

    @model_validator(mode="after")
    def _check(self) -> HorizontalPodAutoscalerSpec:
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"maxReplicas: Invalid value: {self.max_replicas}: must be greater than or equal to "
                             "`minReplicas`")
        if not self.metrics:  # upstream's default: 80% of the requested CPU
            self.metrics = [MetricSpec(type="Resource", resource=ResourceMetricSource(
                name="cpu", target=MetricTarget(type="Utilization", average_utilization=80)))]
        return self


class HorizontalPodAutoscalerCondition(KubeModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class HorizontalPodAutoscalerStatus(KubeModel):
    observed_generation: int | None = None
    last_scale_time: str | None = None
    current_replicas: int | None = None
    desired_replicas: int = 0
    current_metrics: list[dict[str, Any]] | None = None
    conditions: list[HorizontalPodAutoscalerCondition] | None = None


class HorizontalPodAutoscaler(KubeObject):
    spec: HorizontalPodAutoscalerSpec
    status: HorizontalPodAutoscalerStatus | None = None


# --- DNS (minik8s.io/v1) ----------------------------------------------------------------------------

# Characters of an absolute URL path (RFC 3986) that cannot break out of an nginx location or a quoted
# string: no whitespace, quotes, braces, semicolons, backslashes, query or fragment.
URL_PATH = re.compile(r"^/[A-Za-z0-9\-._~!$&()*+,=:@%/]*$")


def path_prefix(path: str) -> str:
    """The path without its trailing slashes: ``/cart`` and ``/cart/`` name the same prefix."""
    return path.rstrip("/") or "/"


class DNSPath(KubeModel):
    """One route of a host: requests whose path starts with ``path`` (by whole segments) go to the Service's port."""

    path: str
    service_name: str
    service_port: Annotated[int, Field(ge=1, le=65535)]

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if len(value) > 1024 or not URL_PATH.match(value):
            raise ValueError(f"must be an absolute URL path of letters, digits and -._~!$&()*+,=:@%/ (got {value!r})")
        return value

    @field_validator("service_name")
    @classmethod
    def _service(cls, value: str) -> str:
        return check_dns1035_label(value)


class DNSSpec(KubeModel):
    host: str
    paths: Annotated[list[DNSPath], Field(min_length=1)]

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_dns1123_subdomain(value)

    @model_validator(mode="after")
    def _unique(self) -> DNSSpec:
        """nginx refuses two locations of one prefix, so ``/cart`` and ``/cart/`` may not both be listed."""
        seen: dict[str, int] = {}
        for index, entry in enumerate(self.paths):
            prefix = path_prefix(entry.path)
            if prefix in seen:
                raise ValueError(f"paths[{index}].path: Duplicate value: \"{entry.path}\": the same prefix as "
                                 f"paths[{seen[prefix]}].path")
            seen[prefix] = index
        return self


class DNS(KubeObject):
    """A host name for the cluster: its paths forwarded to Services by nginx on every node, resolved by dnsmasq."""

    spec: DNSSpec
