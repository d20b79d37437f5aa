"""Decode Kubernetes protobuf request bodies into the dict their JSON would have been.

kubectl 1.33's typed clients (``kubectl create namespace|deployment|service ...``) POST built-in kinds as
``application/vnd.kubernetes.protobuf``: the magic ``k8s\\x00``, then a ``runtime.Unknown`` message whose ``raw``
holds the object's proto2 encoding. ``decode_object`` reads that with the schema table below and yields the object
under its Kubernetes JSON field names, so the rest of the apiserver never sees protobuf.

The table holds field numbers and JSON names from upstream's ``generated.proto`` (k8s.io/api core/v1 and apps/v1,
k8s.io/apimachinery meta/v1). Unknown field numbers are skipped, so fields newer than the table do no harm.

Protobuf and JSON disagree on zero values: Go's generated marshallers write every non-pointer scalar, so an unset
``generateName`` arrives as ``""`` and an unset ``paused`` as ``false``, where JSON's ``omitempty`` drops them. So a
zero scalar is dropped unless its kind starts with ``*``: a Go pointer (sent only when set, so ``replicas: 0`` is
meant) or a field JSON writes even at zero (no ``omitempty``, e.g. a container's ``name``). Nested messages that
are present stay, as ``{}`` when empty, as JSON keeps structs (``"status": {}``); a zero ``metav1.Time`` is
``None``, as JSON writes ``null``; a zero non-pointer IntOrString is dropped (Kubernetes treats it as unset).

Kinds: ``string``, ``int`` (int32/int64, two's complement), ``bool``, ``quantity`` (resource.Quantity),
``intstr`` (IntOrString), ``time`` (metav1.Time), ``microtime`` (metav1.MicroTime), ``fields`` (FieldsV1, raw
JSON), ``map`` (map<string, string>), ``quantities`` (map<string, Quantity>), ``bytes`` (only the envelope's raw),
or a message name from ``SCHEMA``. Prefixes: ``*`` keep zero values, ``[]`` repeated, ``...`` an embedded Go struct
whose fields JSON inlines into the parent (``Probe.handler``, ``Volume.volumeSource``).
"""

from __future__ import annotations

import base64
import datetime
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MAGIC = b"k8s\x00"

Schema = dict[int, tuple[str, str]]

_OBJECT = {1: ("metadata", "ObjectMeta")}


def _object(spec: str | None, status: str | None) -> Schema:
    fields = dict(_OBJECT)
    if spec:
        fields[2] = ("spec", spec)
    if status:
        fields[3] = ("status", status)
    return fields


SCHEMA: dict[str, Schema] = {
    # --- envelope (k8s.io/apimachinery/pkg/runtime) ---------------------------------------------------------
    "runtime.Unknown": {1: ("typeMeta", "runtime.TypeMeta"), 2: ("raw", "bytes"), 3: ("contentEncoding", "string"),
                        4: ("contentType", "string")},
    "runtime.TypeMeta": {1: ("apiVersion", "string"), 2: ("kind", "string")},
    # --- meta/v1 ----------------------------------------------------------------------------------------------
    "ObjectMeta": {
        1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"), 4: ("selfLink", "string"),
        5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
        8: ("creationTimestamp", "time"), 9: ("deletionTimestamp", "time"),
        10: ("deletionGracePeriodSeconds", "*int"), 11: ("labels", "map"), 12: ("annotations", "map"),
        13: ("ownerReferences", "[]OwnerReference"), 14: ("finalizers", "[]string"),
        17: ("managedFields", "[]ManagedFieldsEntry"),
    },
    "OwnerReference": {5: ("apiVersion", "*string"), 1: ("kind", "*string"), 3: ("name", "*string"),
                       4: ("uid", "*string"), 6: ("controller", "*bool"), 7: ("blockOwnerDeletion", "*bool")},
    "ManagedFieldsEntry": {1: ("manager", "string"), 2: ("operation", "string"), 3: ("apiVersion", "string"),
                           4: ("time", "time"), 6: ("fieldsType", "string"), 7: ("fieldsV1", "fields"),
                           8: ("subresource", "string")},
    "LabelSelector": {1: ("matchLabels", "map"), 2: ("matchExpressions", "[]LabelSelectorRequirement")},
    "LabelSelectorRequirement": {1: ("key", "*string"), 2: ("operator", "*string"), 3: ("values", "[]string")},
    "Condition": {1: ("type", "*string"), 2: ("status", "*string"), 3: ("observedGeneration", "int"),
                  4: ("lastTransitionTime", "time"), 5: ("reason", "*string"), 6: ("message", "*string")},
    "DeleteOptions": {1: ("gracePeriodSeconds", "*int"), 2: ("preconditions", "Preconditions"),
                      3: ("orphanDependents", "*bool"), 4: ("propagationPolicy", "*string"),
                      5: ("dryRun", "[]string"), 6: ("ignoreStoreReadErrorWithClusterBreakingPotential", "*bool")},
    "Preconditions": {1: ("uid", "*string"), 2: ("resourceVersion", "*string")},
    # --- core/v1: the kinds ---------------------------------------------------------------------------------
    "Namespace": _object("NamespaceSpec", "NamespaceStatus"),
    "Pod": _object("PodSpec", "PodStatus"),
    "Node": _object("NodeSpec", "NodeStatus"),
    "Service": _object("ServiceSpec", "ServiceStatus"),
    "Endpoints": {**_OBJECT, 2: ("subsets", "[]EndpointSubset")},
    "Event": {
        **_OBJECT, 2: ("involvedObject", "ObjectReference"), 3: ("reason", "string"), 4: ("message", "string"),
        5: ("source", "EventSource"), 6: ("firstTimestamp", "time"), 7: ("lastTimestamp", "time"),
        8: ("count", "int"), 9: ("type", "string"), 10: ("eventTime", "microtime"), 11: ("series", "EventSeries"),
        12: ("action", "string"), 13: ("related", "ObjectReference"), 14: ("reportingComponent", "*string"),
        15: ("reportingInstance", "*string"),
    },
    "Binding": {**_OBJECT, 2: ("target", "ObjectReference")},
    # --- core/v1: namespaces, nodes, events, references -----------------------------------------------------
    "NamespaceSpec": {1: ("finalizers", "[]string")},
    "NamespaceStatus": {1: ("phase", "string"), 2: ("conditions", "[]NamespaceCondition")},
    "NamespaceCondition": {1: ("type", "*string"), 2: ("status", "*string"), 4: ("lastTransitionTime", "time"),
                           5: ("reason", "string"), 6: ("message", "string")},
    "NodeSpec": {1: ("podCIDR", "string"), 7: ("podCIDRs", "[]string"), 3: ("providerID", "string"),
                 4: ("unschedulable", "bool"), 5: ("taints", "[]Taint"), 2: ("externalID", "string")},
    "Taint": {1: ("key", "*string"), 2: ("value", "string"), 3: ("effect", "*string"), 4: ("timeAdded", "time")},
    "NodeStatus": {
        1: ("capacity", "quantities"), 2: ("allocatable", "quantities"), 3: ("phase", "string"),
        4: ("conditions", "[]NodeCondition"), 5: ("addresses", "[]NodeAddress"),
        6: ("daemonEndpoints", "NodeDaemonEndpoints"), 7: ("nodeInfo", "NodeSystemInfo"),
        8: ("images", "[]ContainerImage"), 9: ("volumesInUse", "[]string"), 10: ("volumesAttached", "[]AttachedVolume"),
    },
    "NodeCondition": {1: ("type", "*string"), 2: ("status", "*string"), 3: ("lastHeartbeatTime", "time"),
                      4: ("lastTransitionTime", "time"), 5: ("reason", "string"), 6: ("message", "string")},
    "NodeAddress": {1: ("type", "*string"), 2: ("address", "*string")},
    "NodeDaemonEndpoints": {1: ("kubeletEndpoint", "DaemonEndpoint")},
    "DaemonEndpoint": {1: ("Port", "*int")},
    "NodeSystemInfo": {
        1: ("machineID", "*string"), 2: ("systemUUID", "*string"), 3: ("bootID", "*string"),
        4: ("kernelVersion", "*string"), 5: ("osImage", "*string"), 6: ("containerRuntimeVersion", "*string"),
        7: ("kubeletVersion", "*string"), 8: ("kubeProxyVersion", "*string"), 9: ("operatingSystem", "*string"),
        10: ("architecture", "*string"),
    },
    "ContainerImage": {1: ("names", "[]string"), 2: ("sizeBytes", "int")},
    "AttachedVolume": {1: ("name", "*string"), 2: ("devicePath", "*string")},
    "ObjectReference": {1: ("kind", "string"), 2: ("namespace", "string"), 3: ("name", "string"),
                        4: ("uid", "string"), 5: ("apiVersion", "string"), 6: ("resourceVersion", "string"),
                        7: ("fieldPath", "string")},
    "LocalObjectReference": {1: ("name", "string")},
    "EventSource": {1: ("component", "string"), 2: ("host", "string")},
    "EventSeries": {1: ("count", "int"), 2: ("lastObservedTime", "microtime")},
    # --- core/v1: pods ----------------------------------------------------------------------------------------
    "PodTemplateSpec": _object("PodSpec", None),
    "PodSpec": {
        1: ("volumes", "[]Volume"), 20: ("initContainers", "[]Container"), 2: ("containers", "[]Container"),
        3: ("restartPolicy", "string"), 4: ("terminationGracePeriodSeconds", "*int"),
        5: ("activeDeadlineSeconds", "*int"), 6: ("dnsPolicy", "string"), 7: ("nodeSelector", "map"),
        8: ("serviceAccountName", "string"), 9: ("serviceAccount", "string"),
        21: ("automountServiceAccountToken", "*bool"), 10: ("nodeName", "string"), 11: ("hostNetwork", "bool"),
        12: ("hostPID", "bool"), 13: ("hostIPC", "bool"), 27: ("shareProcessNamespace", "*bool"),
        14: ("securityContext", "PodSecurityContext"), 15: ("imagePullSecrets", "[]LocalObjectReference"),
        16: ("hostname", "string"), 17: ("subdomain", "string"), 18: ("affinity", "Affinity"),
        19: ("schedulerName", "string"), 22: ("tolerations", "[]Toleration"), 23: ("hostAliases", "[]HostAlias"),
        24: ("priorityClassName", "string"), 25: ("priority", "*int"), 26: ("dnsConfig", "PodDNSConfig"),
        28: ("readinessGates", "[]PodReadinessGate"), 29: ("runtimeClassName", "*string"),
        30: ("enableServiceLinks", "*bool"), 31: ("preemptionPolicy", "*string"), 32: ("overhead", "quantities"),
        33: ("topologySpreadConstraints", "[]TopologySpreadConstraint"), 35: ("setHostnameAsFQDN", "*bool"),
        36: ("os", "PodOS"), 37: ("hostUsers", "*bool"), 38: ("schedulingGates", "[]PodSchedulingGate"),
        40: ("resources", "ResourceRequirements"),
    },
    "Container": {
        1: ("name", "*string"), 2: ("image", "string"), 3: ("command", "[]string"), 4: ("args", "[]string"),
        5: ("workingDir", "string"), 6: ("ports", "[]ContainerPort"), 19: ("envFrom", "[]EnvFromSource"),
        7: ("env", "[]EnvVar"), 8: ("resources", "ResourceRequirements"),
        23: ("resizePolicy", "[]ContainerResizePolicy"), 24: ("restartPolicy", "*string"),
        9: ("volumeMounts", "[]VolumeMount"), 21: ("volumeDevices", "[]VolumeDevice"),
        10: ("livenessProbe", "Probe"), 11: ("readinessProbe", "Probe"), 22: ("startupProbe", "Probe"),
        12: ("lifecycle", "Lifecycle"), 13: ("terminationMessagePath", "string"),
        20: ("terminationMessagePolicy", "string"), 14: ("imagePullPolicy", "string"),
        15: ("securityContext", "SecurityContext"), 16: ("stdin", "bool"), 17: ("stdinOnce", "bool"),
        18: ("tty", "bool"),
    },
    "ContainerPort": {1: ("name", "string"), 2: ("hostPort", "int"), 3: ("containerPort", "*int"),
                      4: ("protocol", "string"), 5: ("hostIP", "string")},
    "ContainerResizePolicy": {1: ("resourceName", "*string"), 2: ("restartPolicy", "*string")},
    "VolumeDevice": {1: ("name", "*string"), 2: ("devicePath", "*string")},
    "EnvFromSource": {1: ("prefix", "string"), 2: ("configMapRef", "ConfigMapEnvSource"),
                      3: ("secretRef", "SecretEnvSource")},
    "ConfigMapEnvSource": {1: ("", "...LocalObjectReference"), 2: ("optional", "*bool")},
    "SecretEnvSource": {1: ("", "...LocalObjectReference"), 2: ("optional", "*bool")},
    "EnvVar": {1: ("name", "*string"), 2: ("value", "string"), 3: ("valueFrom", "EnvVarSource")},
    "EnvVarSource": {1: ("fieldRef", "ObjectFieldSelector"), 2: ("resourceFieldRef", "ResourceFieldSelector"),
                     3: ("configMapKeyRef", "ConfigMapKeySelector"), 4: ("secretKeyRef", "SecretKeySelector")},
    "ObjectFieldSelector": {1: ("apiVersion", "string"), 2: ("fieldPath", "*string")},
    "ResourceFieldSelector": {1: ("containerName", "string"), 2: ("resource", "*string"), 3: ("divisor", "quantity")},
    "ConfigMapKeySelector": {1: ("", "...LocalObjectReference"), 2: ("key", "*string"), 3: ("optional", "*bool")},
    "SecretKeySelector": {1: ("", "...LocalObjectReference"), 2: ("key", "*string"), 3: ("optional", "*bool")},
    "ResourceRequirements": {1: ("limits", "quantities"), 2: ("requests", "quantities"),
                             3: ("claims", "[]ResourceClaim")},
    "ResourceClaim": {1: ("name", "*string"), 2: ("request", "string")},
    "VolumeMount": {1: ("name", "*string"), 2: ("readOnly", "bool"), 7: ("recursiveReadOnly", "*string"),
                    3: ("mountPath", "*string"), 4: ("subPath", "string"), 5: ("mountPropagation", "*string"),
                    6: ("subPathExpr", "string")},
    "Probe": {1: ("", "...ProbeHandler"), 2: ("initialDelaySeconds", "int"), 3: ("timeoutSeconds", "int"),
              4: ("periodSeconds", "int"), 5: ("successThreshold", "int"), 6: ("failureThreshold", "int"),
              7: ("terminationGracePeriodSeconds", "*int")},
    "ProbeHandler": {1: ("exec", "ExecAction"), 2: ("httpGet", "HTTPGetAction"), 3: ("tcpSocket", "TCPSocketAction"),
                     4: ("grpc", "GRPCAction")},
    "ExecAction": {1: ("command", "[]string")},
    "HTTPGetAction": {1: ("path", "string"), 2: ("port", "intstr"), 3: ("host", "string"), 4: ("scheme", "string"),
                      5: ("httpHeaders", "[]HTTPHeader")},
    "HTTPHeader": {1: ("name", "*string"), 2: ("value", "*string")},
    "TCPSocketAction": {1: ("port", "intstr"), 2: ("host", "string")},
    "GRPCAction": {1: ("port", "*int"), 2: ("service", "*string")},
    "Lifecycle": {1: ("postStart", "LifecycleHandler"), 2: ("preStop", "LifecycleHandler")},
    "LifecycleHandler": {1: ("exec", "ExecAction"), 2: ("httpGet", "HTTPGetAction"),
                         3: ("tcpSocket", "TCPSocketAction"), 4: ("sleep", "SleepAction")},
    "SleepAction": {1: ("seconds", "*int")},
    "SecurityContext": {
        1: ("capabilities", "Capabilities"), 2: ("privileged", "*bool"), 3: ("seLinuxOptions", "SELinuxOptions"),
        4: ("runAsUser", "*int"), 8: ("runAsGroup", "*int"), 5: ("runAsNonRoot", "*bool"),
        6: ("readOnlyRootFilesystem", "*bool"), 7: ("allowPrivilegeEscalation", "*bool"),
        9: ("procMount", "*string"), 11: ("seccompProfile", "SeccompProfile"),
        12: ("appArmorProfile", "AppArmorProfile"),
    },
    "PodSecurityContext": {
        1: ("seLinuxOptions", "SELinuxOptions"), 2: ("runAsUser", "*int"), 6: ("runAsGroup", "*int"),
        3: ("runAsNonRoot", "*bool"), 4: ("supplementalGroups", "[]int"),
        12: ("supplementalGroupsPolicy", "*string"), 5: ("fsGroup", "*int"), 7: ("sysctls", "[]Sysctl"),
        9: ("fsGroupChangePolicy", "*string"), 10: ("seccompProfile", "SeccompProfile"),
        11: ("appArmorProfile", "AppArmorProfile"), 13: ("seLinuxChangePolicy", "*string"),
    },
    "Capabilities": {1: ("add", "[]string"), 2: ("drop", "[]string")},
    "SELinuxOptions": {1: ("user", "string"), 2: ("role", "string"), 3: ("type", "string"), 4: ("level", "string")},
    "SeccompProfile": {1: ("type", "*string"), 2: ("localhostProfile", "*string")},
    "AppArmorProfile": {1: ("type", "*string"), 2: ("localhostProfile", "*string")},
    "Sysctl": {1: ("name", "*string"), 2: ("value", "*string")},
    "Toleration": {1: ("key", "string"), 2: ("operator", "string"), 3: ("value", "string"), 4: ("effect", "string"),
                   5: ("tolerationSeconds", "*int")},
    "HostAlias": {1: ("ip", "*string"), 2: ("hostnames", "[]string")},
    "PodDNSConfig": {1: ("nameservers", "[]string"), 2: ("searches", "[]string"),
                     3: ("options", "[]PodDNSConfigOption")},
    "PodDNSConfigOption": {1: ("name", "string"), 2: ("value", "*string")},
    "PodReadinessGate": {1: ("conditionType", "*string")},
    "PodOS": {1: ("name", "*string")},
    "PodSchedulingGate": {1: ("name", "*string")},
    "TopologySpreadConstraint": {
        1: ("maxSkew", "*int"), 2: ("topologyKey", "*string"), 3: ("whenUnsatisfiable", "*string"),
        4: ("labelSelector", "LabelSelector"), 5: ("minDomains", "*int"), 6: ("nodeAffinityPolicy", "*string"),
        7: ("nodeTaintsPolicy", "*string"), 8: ("matchLabelKeys", "[]string"),
    },
    "Affinity": {1: ("nodeAffinity", "NodeAffinity"), 2: ("podAffinity", "PodAffinity"),
                 3: ("podAntiAffinity", "PodAffinity")},
    "NodeAffinity": {1: ("requiredDuringSchedulingIgnoredDuringExecution", "NodeSelector"),
                     2: ("preferredDuringSchedulingIgnoredDuringExecution", "[]PreferredSchedulingTerm")},
    "NodeSelector": {1: ("nodeSelectorTerms", "[]NodeSelectorTerm")},
    "NodeSelectorTerm": {1: ("matchExpressions", "[]NodeSelectorRequirement"),
                         2: ("matchFields", "[]NodeSelectorRequirement")},
    "NodeSelectorRequirement": {1: ("key", "*string"), 2: ("operator", "*string"), 3: ("values", "[]string")},
    "PreferredSchedulingTerm": {1: ("weight", "*int"), 2: ("preference", "NodeSelectorTerm")},
    # PodAntiAffinity has the same fields as PodAffinity.
    "PodAffinity": {1: ("requiredDuringSchedulingIgnoredDuringExecution", "[]PodAffinityTerm"),
                    2: ("preferredDuringSchedulingIgnoredDuringExecution", "[]WeightedPodAffinityTerm")},
    "PodAffinityTerm": {1: ("labelSelector", "LabelSelector"), 2: ("namespaces", "[]string"),
                        3: ("topologyKey", "*string"), 4: ("namespaceSelector", "LabelSelector"),
                        5: ("matchLabelKeys", "[]string"), 6: ("mismatchLabelKeys", "[]string")},
    "WeightedPodAffinityTerm": {1: ("weight", "*int"), 2: ("podAffinityTerm", "PodAffinityTerm")},
    "PodStatus": {
        1: ("phase", "string"), 2: ("conditions", "[]PodCondition"), 3: ("message", "string"),
        4: ("reason", "string"), 11: ("nominatedNodeName", "string"), 5: ("hostIP", "string"),
        16: ("hostIPs", "[]HostIP"), 6: ("podIP", "string"), 12: ("podIPs", "[]PodIP"), 7: ("startTime", "time"),
        10: ("initContainerStatuses", "[]ContainerStatus"), 8: ("containerStatuses", "[]ContainerStatus"),
        9: ("qosClass", "string"), 13: ("ephemeralContainerStatuses", "[]ContainerStatus"),
        14: ("resize", "string"),
    },
    "PodCondition": {1: ("type", "*string"), 2: ("status", "*string"), 3: ("lastProbeTime", "time"),
                     4: ("lastTransitionTime", "time"), 5: ("reason", "string"), 6: ("message", "string")},
    "HostIP": {1: ("ip", "*string")},
    "PodIP": {1: ("ip", "*string")},
    "ContainerStatus": {
        1: ("name", "*string"), 2: ("state", "ContainerState"), 3: ("lastState", "ContainerState"),
        4: ("ready", "*bool"), 5: ("restartCount", "*int"), 6: ("image", "*string"), 7: ("imageID", "*string"),
        8: ("containerID", "string"), 9: ("started", "*bool"), 10: ("allocatedResources", "quantities"),
        11: ("resources", "ResourceRequirements"),
    },
    "ContainerState": {1: ("waiting", "ContainerStateWaiting"), 2: ("running", "ContainerStateRunning"),
                       3: ("terminated", "ContainerStateTerminated")},
    "ContainerStateWaiting": {1: ("reason", "string"), 2: ("message", "string")},
    "ContainerStateRunning": {1: ("startedAt", "time")},
    "ContainerStateTerminated": {1: ("exitCode", "*int"), 2: ("signal", "int"), 3: ("reason", "string"),
                                 4: ("message", "string"), 5: ("startedAt", "time"), 6: ("finishedAt", "time"),
                                 7: ("containerID", "string")},
    # --- core/v1: volumes -------------------------------------------------------------------------------------
    "Volume": {1: ("name", "*string"), 2: ("", "...VolumeSource")},
    "VolumeSource": {
        1: ("hostPath", "HostPathVolumeSource"), 2: ("emptyDir", "EmptyDirVolumeSource"),
        6: ("secret", "SecretVolumeSource"), 7: ("nfs", "NFSVolumeSource"),
        10: ("persistentVolumeClaim", "PersistentVolumeClaimVolumeSource"),
        16: ("downwardAPI", "DownwardAPIVolumeSource"), 19: ("configMap", "ConfigMapVolumeSource"),
        26: ("projected", "ProjectedVolumeSource"),
    },
    "HostPathVolumeSource": {1: ("path", "*string"), 2: ("type", "*string")},
    "EmptyDirVolumeSource": {1: ("medium", "string"), 2: ("sizeLimit", "quantity")},
    "PersistentVolumeClaimVolumeSource": {1: ("claimName", "*string"), 2: ("readOnly", "bool")},
    "NFSVolumeSource": {1: ("server", "*string"), 2: ("path", "*string"), 3: ("readOnly", "bool")},
    "SecretVolumeSource": {1: ("secretName", "string"), 2: ("items", "[]KeyToPath"), 3: ("defaultMode", "*int"),
                           4: ("optional", "*bool")},
    "ConfigMapVolumeSource": {1: ("", "...LocalObjectReference"), 2: ("items", "[]KeyToPath"),
                              3: ("defaultMode", "*int"), 4: ("optional", "*bool")},
    "KeyToPath": {1: ("key", "*string"), 2: ("path", "*string"), 3: ("mode", "*int")},
    "DownwardAPIVolumeSource": {1: ("items", "[]DownwardAPIVolumeFile"), 2: ("defaultMode", "*int")},
    "DownwardAPIVolumeFile": {1: ("path", "*string"), 2: ("fieldRef", "ObjectFieldSelector"),
                              3: ("resourceFieldRef", "ResourceFieldSelector"), 4: ("mode", "*int")},
    "ProjectedVolumeSource": {1: ("sources", "[]VolumeProjection"), 2: ("defaultMode", "*int")},
    "VolumeProjection": {1: ("secret", "SecretProjection"), 2: ("downwardAPI", "DownwardAPIProjection"),
                         3: ("configMap", "ConfigMapProjection"),
                         4: ("serviceAccountToken", "ServiceAccountTokenProjection")},
    "SecretProjection": {1: ("", "...LocalObjectReference"), 2: ("items", "[]KeyToPath"), 4: ("optional", "*bool")},
    "ConfigMapProjection": {1: ("", "...LocalObjectReference"), 2: ("items", "[]KeyToPath"),
                            4: ("optional", "*bool")},
    "DownwardAPIProjection": {1: ("items", "[]DownwardAPIVolumeFile")},
    "ServiceAccountTokenProjection": {1: ("audience", "string"), 2: ("expirationSeconds", "*int"),
                                      3: ("path", "*string")},
    # --- core/v1: services and endpoints ------------------------------------------------------------------------
    "ServiceSpec": {
        1: ("ports", "[]ServicePort"), 2: ("selector", "map"), 3: ("clusterIP", "string"),
        18: ("clusterIPs", "[]string"), 4: ("type", "string"), 5: ("externalIPs", "[]string"),
        7: ("sessionAffinity", "string"), 8: ("loadBalancerIP", "string"),
        9: ("loadBalancerSourceRanges", "[]string"), 10: ("externalName", "string"),
        11: ("externalTrafficPolicy", "string"), 12: ("healthCheckNodePort", "int"),
        13: ("publishNotReadyAddresses", "bool"), 14: ("sessionAffinityConfig", "SessionAffinityConfig"),
        19: ("ipFamilies", "[]string"), 17: ("ipFamilyPolicy", "*string"),
        20: ("allocateLoadBalancerNodePorts", "*bool"), 21: ("loadBalancerClass", "*string"),
        22: ("internalTrafficPolicy", "*string"), 23: ("trafficDistribution", "*string"),
    },
    "ServicePort": {1: ("name", "string"), 2: ("protocol", "string"), 6: ("appProtocol", "*string"),
                    3: ("port", "*int"), 4: ("targetPort", "intstr"), 5: ("nodePort", "int")},
    "SessionAffinityConfig": {1: ("clientIP", "ClientIPConfig")},
    "ClientIPConfig": {1: ("timeoutSeconds", "*int")},
    "ServiceStatus": {1: ("loadBalancer", "LoadBalancerStatus"), 2: ("conditions", "[]Condition")},
    "LoadBalancerStatus": {1: ("ingress", "[]LoadBalancerIngress")},
    "LoadBalancerIngress": {1: ("ip", "string"), 2: ("hostname", "string"), 3: ("ipMode", "*string"),
                            4: ("ports", "[]PortStatus")},
    "PortStatus": {1: ("port", "*int"), 2: ("protocol", "*string"), 3: ("error", "*string")},
    "EndpointSubset": {1: ("addresses", "[]EndpointAddress"), 2: ("notReadyAddresses", "[]EndpointAddress"),
                       3: ("ports", "[]EndpointPort")},
    "EndpointAddress": {1: ("ip", "*string"), 3: ("hostname", "string"), 4: ("nodeName", "*string"),
                        2: ("targetRef", "ObjectReference")},
    "EndpointPort": {1: ("name", "string"), 2: ("port", "*int"), 3: ("protocol", "string"),
                     4: ("appProtocol", "*string")},
    # --- apps/v1 ------------------------------------------------------------------------------------------------
    "Deployment": _object("DeploymentSpec", "DeploymentStatus"),
    "DeploymentSpec": {
        1: ("replicas", "*int"), 2: ("selector", "LabelSelector"), 3: ("template", "PodTemplateSpec"),
        4: ("strategy", "DeploymentStrategy"), 5: ("minReadySeconds", "int"), 6: ("revisionHistoryLimit", "*int"),
        7: ("paused", "bool"), 9: ("progressDeadlineSeconds", "*int"),
    },
    "DeploymentStrategy": {1: ("type", "string"), 2: ("rollingUpdate", "RollingUpdateDeployment")},
    "RollingUpdateDeployment": {1: ("maxUnavailable", "*intstr"), 2: ("maxSurge", "*intstr")},
    "DeploymentStatus": {
        1: ("observedGeneration", "int"), 2: ("replicas", "int"), 3: ("updatedReplicas", "int"),
        7: ("readyReplicas", "int"), 4: ("availableReplicas", "int"), 5: ("unavailableReplicas", "int"),
        6: ("conditions", "[]DeploymentCondition"), 8: ("collisionCount", "*int"),
    },
    "DeploymentCondition": {1: ("type", "*string"), 2: ("status", "*string"), 6: ("lastUpdateTime", "time"),
                            7: ("lastTransitionTime", "time"), 4: ("reason", "string"), 5: ("message", "string")},
    "ReplicaSet": _object("ReplicaSetSpec", "ReplicaSetStatus"),
    "ReplicaSetSpec": {1: ("replicas", "*int"), 4: ("minReadySeconds", "int"), 2: ("selector", "LabelSelector"),
                       3: ("template", "PodTemplateSpec")},
    "ReplicaSetStatus": {1: ("replicas", "*int"), 2: ("fullyLabeledReplicas", "int"), 4: ("readyReplicas", "int"),
                         5: ("availableReplicas", "int"), 3: ("observedGeneration", "int"),
                         6: ("conditions", "[]ReplicaSetCondition")},
    "ReplicaSetCondition": {1: ("type", "*string"), 2: ("status", "*string"), 3: ("lastTransitionTime", "time"),
                            4: ("reason", "string"), 5: ("message", "string")},
    # --- batch/v1 -----------------------------------------------------------------------------------------------
    "Job": _object("JobSpec", "JobStatus"),
    "JobSpec": {
        1: ("parallelism", "*int"), 2: ("completions", "*int"), 3: ("activeDeadlineSeconds", "*int"),
        7: ("backoffLimit", "*int"), 4: ("selector", "LabelSelector"), 5: ("manualSelector", "*bool"),
        6: ("template", "PodTemplateSpec"), 8: ("ttlSecondsAfterFinished", "*int"), 9: ("completionMode", "*string"),
        10: ("suspend", "*bool"), 14: ("podReplacementPolicy", "*string"), 15: ("managedBy", "*string"),
    },
    "JobStatus": {
        1: ("conditions", "[]JobCondition"), 2: ("startTime", "time"), 3: ("completionTime", "time"),
        4: ("active", "int"), 5: ("succeeded", "int"), 6: ("failed", "int"), 11: ("terminating", "*int"),
        7: ("completedIndexes", "string"), 9: ("ready", "*int"),
    },
    "JobCondition": {1: ("type", "*string"), 2: ("status", "*string"), 3: ("lastProbeTime", "time"),
                     4: ("lastTransitionTime", "time"), 5: ("reason", "string"), 6: ("message", "string")},
    "CronJob": _object("CronJobSpec", "CronJobStatus"),
    "CronJobSpec": {
        1: ("schedule", "*string"), 8: ("timeZone", "*string"), 2: ("startingDeadlineSeconds", "*int"),
        3: ("concurrencyPolicy", "string"), 4: ("suspend", "*bool"), 5: ("jobTemplate", "JobTemplateSpec"),
        6: ("successfulJobsHistoryLimit", "*int"), 7: ("failedJobsHistoryLimit", "*int"),
    },
    "JobTemplateSpec": _object("JobSpec", None),
    "CronJobStatus": {1: ("active", "[]ObjectReference"), 4: ("lastScheduleTime", "time"),
                      5: ("lastSuccessfulTime", "time")},
    # --- core/v1 configuration, identities and replication controllers; discovery.k8s.io/v1 -------------------
    "ConfigMap": {**_OBJECT, 4: ("immutable", "*bool"), 2: ("data", "map"), 3: ("binaryData", "bytesmap")},
    "Secret": {**_OBJECT, 5: ("immutable", "*bool"), 2: ("data", "bytesmap"), 4: ("stringData", "map"),
               3: ("type", "string")},
    "ServiceAccount": {**_OBJECT, 2: ("secrets", "[]ObjectReference"),
                       3: ("imagePullSecrets", "[]LocalObjectReference"),
                       4: ("automountServiceAccountToken", "*bool")},
    "ReplicationController": _object("ReplicationControllerSpec", "ReplicationControllerStatus"),
    "ReplicationControllerSpec": {1: ("replicas", "*int"), 4: ("minReadySeconds", "int"), 2: ("selector", "map"),
                                  3: ("template", "PodTemplateSpec")},
    "ReplicationControllerStatus": {1: ("replicas", "int"), 2: ("fullyLabeledReplicas", "int"),
                                    4: ("readyReplicas", "int"), 5: ("availableReplicas", "int"),
                                    3: ("observedGeneration", "int"), 6: ("conditions", "[]ReplicaSetCondition")},
    "EndpointSlice": {**_OBJECT, 4: ("addressType", "string"), 2: ("endpoints", "[]Endpoint"),
                      3: ("ports", "[]EndpointSlicePort")},
    "Endpoint": {1: ("addresses", "[]string"), 2: ("conditions", "EndpointConditions"), 3: ("hostname", "*string"),
                 4: ("targetRef", "ObjectReference"), 6: ("nodeName", "*string"), 7: ("zone", "*string")},
    "EndpointConditions": {1: ("ready", "*bool"), 2: ("serving", "*bool"), 3: ("terminating", "*bool")},
    "EndpointSlicePort": {1: ("name", "*string"), 2: ("protocol", "*string"), 3: ("port", "*int"),
                          4: ("appProtocol", "*string")},
    # --- autoscaling/v2 -----------------------------------------------------------------------------------------
    "HorizontalPodAutoscaler": _object("HorizontalPodAutoscalerSpec", "HorizontalPodAutoscalerStatus"),
    "HorizontalPodAutoscalerSpec": {
        1: ("scaleTargetRef", "CrossVersionObjectReference"), 2: ("minReplicas", "*int"), 3: ("maxReplicas", "*int"),
        4: ("metrics", "[]MetricSpec"), 5: ("behavior", "HorizontalPodAutoscalerBehavior"),
    },
    "CrossVersionObjectReference": {1: ("kind", "*string"), 2: ("name", "*string"), 3: ("apiVersion", "string")},
    "MetricSpec": {1: ("type", "*string"), 2: ("object", "ObjectMetricSource"), 3: ("pods", "PodsMetricSource"),
                   4: ("resource", "ResourceMetricSource"), 5: ("external", "ExternalMetricSource"),
                   7: ("containerResource", "ContainerResourceMetricSource")},
    "ResourceMetricSource": {1: ("name", "*string"), 2: ("target", "MetricTarget")},
    "ContainerResourceMetricSource": {1: ("name", "*string"), 2: ("target", "MetricTarget"),
                                      3: ("container", "*string")},
    "PodsMetricSource": {1: ("metric", "MetricIdentifier"), 2: ("target", "MetricTarget")},
    "ObjectMetricSource": {1: ("describedObject", "CrossVersionObjectReference"), 2: ("target", "MetricTarget"),
                           3: ("metric", "MetricIdentifier")},
    "ExternalMetricSource": {1: ("metric", "MetricIdentifier"), 2: ("target", "MetricTarget")},
    "MetricIdentifier": {1: ("name", "*string"), 2: ("selector", "LabelSelector")},
    "MetricTarget": {1: ("type", "*string"), 2: ("value", "quantity"), 3: ("averageValue", "quantity"),
                     4: ("averageUtilization", "*int")},
    "HorizontalPodAutoscalerBehavior": {1: ("scaleUp", "HPAScalingRules"), 2: ("scaleDown", "HPAScalingRules")},
    "HPAScalingRules": {3: ("stabilizationWindowSeconds", "*int"), 1: ("selectPolicy", "*string"),
                        2: ("policies", "[]HPAScalingPolicy")},
    "HPAScalingPolicy": {1: ("type", "*string"), 2: ("value", "*int"), 3: ("periodSeconds", "*int")},
    "HorizontalPodAutoscalerStatus": {1: ("observedGeneration", "*int"), 2: ("lastScaleTime", "time"),
                                      3: ("currentReplicas", "int"), 4: ("desiredReplicas", "*int")},
}

# (apiVersion, kind) of the envelope's typeMeta -> the message its raw bytes hold.
KINDS: dict[tuple[str, str], str] = {
    ("v1", "Namespace"): "Namespace",
    ("v1", "Pod"): "Pod",
    ("v1", "Node"): "Node",
    ("v1", "Service"): "Service",
    ("v1", "Endpoints"): "Endpoints",
    ("v1", "Event"): "Event",
    ("v1", "Binding"): "Binding",
    ("apps/v1", "ReplicaSet"): "ReplicaSet",
    ("v1", "ConfigMap"): "ConfigMap",
    ("v1", "Secret"): "Secret",
    ("v1", "ServiceAccount"): "ServiceAccount",
    ("v1", "ReplicationController"): "ReplicationController",
    ("discovery.k8s.io/v1", "EndpointSlice"): "EndpointSlice",
    ("apps/v1", "Deployment"): "Deployment",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "HorizontalPodAutoscaler",
    ("batch/v1", "Job"): "Job",
    ("batch/v1", "CronJob"): "CronJob",
    # client-go's typed DELETE sends its options in the group version of the resource it deletes.
    **{(version, "DeleteOptions"): "DeleteOptions" for version in ("v1", "apps/v1", "autoscaling/v2",
                                                                   "batch/v1", "discovery.k8s.io/v1",
                                                                   "meta.k8s.io/v1")},
}

SCALARS = frozenset({"string", "int", "bool", "bytes", "quantity", "intstr", "time", "microtime", "fields", "map",
                     "quantities", "bytesmap"})
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_ZERO: dict[str, Any] = {"string": "", "int": 0, "bool": False}
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class ProtobufError(ValueError):
    """The body is not a Kubernetes protobuf encoding this module can read."""


class UnsupportedKind(ProtobufError):
    """A well-formed body holding a kind the schema table does not cover."""


@dataclass(frozen=True)
class Field:
    name: str
    base: str  # a scalar kind from SCALARS or a message name from SCHEMA
    keep_zero: bool
    repeated: bool
    inline: bool


def _parse_kind(name: str, kind: str) -> Field:
    keep_zero = kind.startswith("*")
    kind = kind.removeprefix("*")
    repeated = kind.startswith("[]")
    kind = kind.removeprefix("[]")
    inline = kind.startswith("...")
    return Field(name, kind.removeprefix("..."), keep_zero, repeated, inline)


_FIELDS: dict[str, dict[int, Field]] = {
    message: {number: _parse_kind(name, kind) for number, (name, kind) in fields.items()}
    for message, fields in SCHEMA.items()
}


def decode_object(body: bytes) -> dict[str, Any]:
    """The JSON-shaped dict of a ``k8s\\x00`` + runtime.Unknown body; ProtobufError when it cannot be read."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the Kubernetes protobuf magic k8s\\x00")
    envelope = _decode_message(body[len(MAGIC):], "runtime.Unknown", "runtime.Unknown")
    type_meta = envelope.get("typeMeta") or {}
    api_version, kind = type_meta.get("apiVersion", ""), type_meta.get("kind", "")
    if not kind:
        raise ProtobufError("the envelope names no kind (typeMeta.kind is empty)")
    encoding = envelope.get("contentEncoding", "")
    if encoding:
        raise ProtobufError(f"content encoding {encoding!r} is not supported")
    message = KINDS.get((api_version, kind))
    if message is None:
        raise UnsupportedKind(f"this apiserver cannot decode {kind} ({api_version or 'no apiVersion'}) "
                              "from protobuf; send it as application/json")
    raw = envelope.get("raw", b"")
    return {"kind": kind, "apiVersion": api_version, **_decode_message(raw, message, kind)}


def _decode_message(data: bytes, message: str, path: str) -> dict[str, Any]:
    fields = _FIELDS[message]
    out: dict[str, Any] = {}
    for number, wire, value in _read_fields(data, path):
        field = fields.get(number)
        if field is None:
            continue  # a field newer than the table, or one we do not serve
        where = f"{path}.{field.name}" if field.name else path
        if field.repeated:
            items = out.setdefault(field.name, [])
            if field.base == "int" and wire == _LENGTH:  # packed
                items.extend(_signed(item) for item in _packed_varints(value, where))
            else:
                items.append(_convert(field, wire, value, f"{where}[{len(items)}]"))
        elif field.inline:
            out.update(_decode_message(_expect_bytes(wire, value, where), field.base, where))
        elif field.base in ("map", "quantities", "bytesmap"):
            entry_key, entry_value = _map_entry(field.base, _expect_bytes(wire, value, where), where)
            out.setdefault(field.name, {})[entry_key] = entry_value
        else:
            converted = _convert(field, wire, value, where)
            if field.base in SCHEMA and isinstance(out.get(field.name), dict):
                out[field.name].update(converted)  # a repeated occurrence of a message merges into it
            elif field.keep_zero or not _is_zero(field.base, converted):
                out[field.name] = converted
            else:
                out.pop(field.name, None)
    return out


def _is_zero(base: str, value: Any) -> bool:
    if base == "intstr":
        return value == 0 or value == ""
    return base in _ZERO and value == _ZERO[base]


def _convert(field: Field, wire: int, value: int | bytes, where: str) -> Any:
    base = field.base
    if base == "int":
        return _signed(_expect_varint(wire, value, where))
    if base == "bool":
        return _expect_varint(wire, value, where) != 0
    data = _expect_bytes(wire, value, where)
    if base in SCHEMA:
        return _decode_message(data, base, where)
    if base == "string":
        return _text(data, where)
    if base == "bytes":
        return data
    if base == "quantity":
        return _quantity(data, where)
    if base == "intstr":
        return _int_or_string(data, where)
    if base in ("time", "microtime"):
        return _time(data, where, micro=base == "microtime")
    if base == "fields":
        return _fields_v1(data, where)
    raise ProtobufError(f"{where}: the schema names an unknown kind {base!r}")


def _map_entry(base: str, data: bytes, where: str) -> tuple[str, Any]:
    key, value = "", "0" if base == "quantities" else ""
    for number, wire, item in _read_fields(data, where):
        if number == 1:
            key = _text(_expect_bytes(wire, item, where), where)
        elif number == 2:
            entry = _expect_bytes(wire, item, f"{where}[{key!r}]")
            if base == "quantities":
                value = _quantity(entry, f"{where}[{key!r}]")
            elif base == "bytesmap":  # map<string, bytes>: base64 in JSON
                value = base64.b64encode(entry).decode()
            else:
                value = _text(entry, where)
    return key, value


def _quantity(data: bytes, where: str) -> str:
    text = "0"  # resource.Quantity's zero value prints as "0"
    for number, wire, item in _read_fields(data, where):
        if number == 1:
            text = _text(_expect_bytes(wire, item, where), where)
    return text


def _int_or_string(data: bytes, where: str) -> int | str:
    kind, int_value, str_value = 0, 0, ""
    for number, wire, item in _read_fields(data, where):
        if number == 1:
            kind = _signed(_expect_varint(wire, item, where))
        elif number == 2:
            int_value = _signed(_expect_varint(wire, item, where))
        elif number == 3:
            str_value = _text(_expect_bytes(wire, item, where), where)
    if kind == 0:
        return int_value
    if kind == 1:
        return str_value
    raise ProtobufError(f"{where}: IntOrString type {kind} is neither 0 (int) nor 1 (string)")


def _time(data: bytes, where: str, micro: bool) -> str | None:
    seconds: int | None = None
    nanos = 0
    for number, wire, item in _read_fields(data, where):
        if number == 1:
            seconds = _signed(_expect_varint(wire, item, where))
        elif number == 2:
            nanos = _signed(_expect_varint(wire, item, where))
    if seconds is None and not nanos:
        return None  # the zero time, which JSON writes as null
    if not 0 <= nanos < 1_000_000_000:
        raise ProtobufError(f"{where}: nanos {nanos} is out of range")
    try:
        moment = _EPOCH + datetime.timedelta(seconds=seconds or 0)
    except OverflowError:
        raise ProtobufError(f"{where}: {seconds} seconds is out of range for a timestamp") from None
    stamp = (f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}"
             f"T{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}")
    return f"{stamp}.{nanos // 1000:06d}Z" if micro else f"{stamp}Z"


def _fields_v1(data: bytes, where: str) -> Any:
    raw = b""
    for number, wire, item in _read_fields(data, where):
        if number == 1:
            raw = _expect_bytes(wire, item, where)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as error:
        raise ProtobufError(f"{where}: FieldsV1 does not hold JSON: {error}") from None


def _text(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"{where}: the string is not valid UTF-8") from None


def _signed(value: int) -> int:
    """int32 and int64 travel as 64-bit two's complement varints."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _expect_varint(wire: int, value: int | bytes, where: str) -> int:
    if wire != _VARINT or not isinstance(value, int):
        raise ProtobufError(f"{where}: expected a varint, got wire type {wire}")
    return value


def _expect_bytes(wire: int, value: int | bytes, where: str) -> bytes:
    if wire != _LENGTH or not isinstance(value, bytes):
        raise ProtobufError(f"{where}: expected a length-delimited field, got wire type {wire}")
    return value


def _read_varint(data: bytes, pos: int, where: str) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError(f"{where}: truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & ((1 << 64) - 1), pos
        shift += 7
        if shift >= 70:
            raise ProtobufError(f"{where}: varint longer than 10 bytes")


def _packed_varints(data: bytes, where: str) -> Iterator[int]:
    pos = 0
    while pos < len(data):
        value, pos = _read_varint(data, pos, where)
        yield value


def _read_fields(data: bytes, where: str) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field: an int for varints and fixed, bytes for the rest."""
    pos, end = 0, len(data)
    while pos < end:
        tag, pos = _read_varint(data, pos, where)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtobufError(f"{where}: field number 0 at byte {pos}")
        value: int | bytes
        if wire == _VARINT:
            value, pos = _read_varint(data, pos, where)
        elif wire == _LENGTH:
            length, pos = _read_varint(data, pos, where)
            if length > end - pos:
                raise ProtobufError(f"{where}: field {number} is truncated ({length} bytes announced, "
                                    f"{end - pos} left)")
            value, pos = data[pos:pos + length], pos + length
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if size > end - pos:
                raise ProtobufError(f"{where}: field {number} is truncated")
            value, pos = int.from_bytes(data[pos:pos + size], "little"), pos + size
        else:
            raise ProtobufError(f"{where}: field {number} has unsupported wire type {wire}")
        yield number, wire, value
