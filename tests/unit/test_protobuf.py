"""The Kubernetes protobuf body decoder: bodies built by a small encoder here, plus one kubectl 1.33 really sent."""

from __future__ import annotations

import contextlib

import pytest

from daemons.api import errors
from daemons.apiserver.decoding import decode_body as parse_body
from daemons.apiserver.protobuf import KINDS, SCALARS, SCHEMA, ProtobufError, UnsupportedKind, decode_object

pytestmark = pytest.mark.unit

PROTOBUF = "application/vnd.kubernetes.protobuf"


# --- a tiny proto2 encoder ------------------------------------------------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32/int64 travel as 64-bit two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def num(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


def raw(number: int, data: bytes) -> bytes:
    return key(number, 2) + varint(len(data)) + data


def text(number: int, value: str) -> bytes:
    return raw(number, value.encode())


def msg(number: int, *parts: bytes) -> bytes:
    return raw(number, b"".join(parts))


def entries(number: int, mapping: dict[str, str]) -> bytes:
    return b"".join(msg(number, text(1, k), text(2, v)) for k, v in mapping.items())


def quantities(number: int, mapping: dict[str, str]) -> bytes:
    return b"".join(msg(number, text(1, k), msg(2, text(1, v))) for k, v in mapping.items())


def int_or_string(number: int, value: int | str) -> bytes:
    if isinstance(value, int):
        return msg(number, num(1, 0), num(2, value), text(3, ""))
    return msg(number, num(1, 1), num(2, 0), text(3, value))


def empty_meta(*extra: bytes, name: str = "") -> bytes:
    """ObjectMeta the way Go's marshaller writes it: every string and int, set or not, and a zero Time."""
    return msg(1, text(1, name), text(2, ""), text(3, ""), text(4, ""), text(5, ""), text(6, ""), num(7, 0),
               msg(8), *extra)


def body(api_version: str, kind: str, obj: bytes) -> bytes:
    return (b"k8s\x00" + msg(1, text(1, api_version), text(2, kind)) + raw(2, obj) + text(3, "") + text(4, ""))


# What kubectl 1.33 POSTs for `kubectl create namespace pbtest` (from `kubectl -v=9`).
KUBECTL_133_NAMESPACE = bytes.fromhex(
    "6b3873000a0f0a0276311209 4e616d657370616365121e0a160a0670627465737412001a0022002a00320038004200"
    "12001a020a001a002200".replace(" ", "")
)


# --- whole objects --------------------------------------------------------------------------------------------


def test_namespace_sent_by_kubectl_133_decodes_to_what_kubectl_127_sends_as_json():
    assert decode_object(KUBECTL_133_NAMESPACE) == {
        "kind": "Namespace", "apiVersion": "v1",
        "metadata": {"name": "pbtest", "creationTimestamp": None}, "spec": {}, "status": {},
    }


def test_namespace_with_labels_finalizers_and_times():
    meta = empty_meta(
        entries(11, {"team": "a", "tier": "web"}), entries(12, {"note": "x"}),
        msg(9, num(1, 1_700_000_000), num(2, 5)),  # deletionTimestamp
        num(10, 30),
        msg(13, text(5, "v1"), text(1, "Thing"), text(3, "owner"), text(4, "uid-1"), num(6, 1), num(7, 0)),
        name="ns1",
    )
    obj = meta + msg(2, text(1, "kubernetes")) + msg(3, text(1, "Active"))

    assert decode_object(body("v1", "Namespace", obj)) == {
        "kind": "Namespace", "apiVersion": "v1",
        "metadata": {
            "name": "ns1", "creationTimestamp": None, "labels": {"team": "a", "tier": "web"},
            "annotations": {"note": "x"}, "deletionTimestamp": "2023-11-14T22:13:20Z",
            "deletionGracePeriodSeconds": 30,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "owner", "uid": "uid-1",
                                 "controller": True, "blockOwnerDeletion": False}],
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def container() -> bytes:
    return msg(
        2,
        text(1, "web"), text(2, "nginx:1.25"), text(3, "nginx"), text(3, "-g"), text(4, "daemon off;"), text(5, ""),
        msg(6, text(1, "http"), num(2, 0), num(3, 80), text(4, "TCP"), text(5, "")),
        msg(6, text(1, ""), num(2, 0), num(3, 443), text(4, ""), text(5, "")),
        msg(7, text(1, "MODE"), text(2, "prod")),
        msg(7, text(1, "TOKEN"), text(2, ""), msg(3, msg(4, msg(1, text(1, "creds")), text(2, "token")))),
        msg(7, text(1, "POD"), text(2, ""), msg(3, msg(1, text(1, ""), text(2, "metadata.name")))),
        msg(8, quantities(1, {"cpu": "500m", "memory": "128Mi"}), quantities(2, {"cpu": "250m"})),
        msg(9, text(1, "data"), num(2, 1), text(3, "/data"), text(4, ""), text(6, "")),
        msg(11, msg(1, msg(2, text(1, "/healthz"), int_or_string(2, "http"), text(3, ""), text(4, "HTTP"))),
            num(2, 5), num(3, 0), num(4, 10), num(5, 0), num(6, 0)),
        msg(10, msg(1, msg(3, int_or_string(1, 80), text(2, ""))), num(2, 0)),
        text(13, "/dev/termination-log"), text(20, ""), text(14, "IfNotPresent"),
        msg(15, num(2, 0), num(4, 1000), num(7, 0), msg(1, text(2, "ALL"))),
        num(16, 0), num(17, 0), num(18, 0),
    )


def test_deployment_with_template_selector_strategy_and_containers():
    labels = entries(11, {"app": "web"})
    pod_spec = (
        msg(1, text(1, "data"), msg(2, msg(2, text(1, ""), msg(2, text(1, "1Gi"))))),
        msg(1, text(1, "host"), msg(2, msg(1, text(1, "/var/log"), text(2, "Directory")))),
        msg(1, text(1, "claim"), msg(2, msg(10, text(1, "pvc-1"), num(2, 0)))),
        container(), text(3, "Always"), num(4, 30), text(6, "ClusterFirst"), entries(7, {"disk": "ssd"}),
        text(8, ""), num(11, 0), num(21, 0),
        msg(22, text(1, "node.kubernetes.io/not-ready"), text(2, "Exists"), text(3, ""), text(4, "NoExecute"),
            num(5, 300)),
        msg(14, num(2, 1000), num(4, 1), num(4, 2), num(5, 2000)),
    )
    spec = msg(
        2,
        num(1, 3),
        msg(2, entries(1, {"app": "web"}), msg(2, text(1, "tier"), text(2, "In"), text(3, "front"), text(3, "edge"))),
        msg(3, empty_meta(labels), msg(2, *pod_spec)),
        msg(4, text(1, "RollingUpdate"), msg(2, int_or_string(1, 0), int_or_string(2, "25%"))),
        num(5, 0), num(6, 0), num(7, 0),
    )
    status = msg(3, num(1, 0), num(2, 0), num(3, 0), num(4, 0), num(5, 0), num(7, 0))
    obj = empty_meta(labels, name="web") + spec + status

    decoded = decode_object(body("apps/v1", "Deployment", obj))

    assert decoded == {
        "kind": "Deployment", "apiVersion": "apps/v1",
        "metadata": {"name": "web", "creationTimestamp": None, "labels": {"app": "web"}},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"},
                         "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "edge"]}]},
            "template": {
                "metadata": {"creationTimestamp": None, "labels": {"app": "web"}},
                "spec": {
                    "volumes": [
                        {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                        {"name": "host", "hostPath": {"path": "/var/log", "type": "Directory"}},
                        {"name": "claim", "persistentVolumeClaim": {"claimName": "pvc-1"}},
                    ],
                    "containers": [{
                        "name": "web", "image": "nginx:1.25", "command": ["nginx", "-g"], "args": ["daemon off;"],
                        "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}],
                        "env": [
                            {"name": "MODE", "value": "prod"},
                            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
                            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        ],
                        "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m"}},
                        "volumeMounts": [{"name": "data", "readOnly": True, "mountPath": "/data"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                                           "initialDelaySeconds": 5, "periodSeconds": 10},
                        "livenessProbe": {"tcpSocket": {"port": 80}},
                        "terminationMessagePath": "/dev/termination-log",
                        "imagePullPolicy": "IfNotPresent",
                        "securityContext": {"privileged": False, "runAsUser": 1000, "allowPrivilegeEscalation": False,
                                            "capabilities": {"drop": ["ALL"]}},
                    }],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "nodeSelector": {"disk": "ssd"},
                    "automountServiceAccountToken": False,
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}],
                    "securityContext": {"runAsUser": 1000, "supplementalGroups": [1, 2], "fsGroup": 2000},
                },
            },
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}},
            "revisionHistoryLimit": 0,
        },
        "status": {},
    }


def test_pointer_zero_is_kept_and_plain_zero_dropped():
    """``replicas: 0`` (a Go pointer, sent only when set) survives; ``minReadySeconds: 0`` (always sent) does not."""
    spec = msg(2, num(1, 0), num(5, 0), num(7, 0), msg(4, text(1, "")))

    decoded = decode_object(body("apps/v1", "Deployment", empty_meta(name="zero") + spec))

    assert decoded["spec"] == {"replicas": 0, "strategy": {}}


def test_service_ports_with_int_and_string_target_ports():
    spec = msg(
        2,
        msg(1, text(1, "80-8080"), text(2, "TCP"), num(3, 80), int_or_string(4, 8080), num(5, 0)),
        msg(1, text(1, "web"), text(2, "TCP"), num(3, 81), int_or_string(4, "http"), num(5, 30081)),
        msg(1, text(1, "plain"), text(2, "UDP"), num(3, 53), int_or_string(4, 0), num(5, 0)),
        entries(2, {"app": "svc"}), text(3, ""), text(4, "NodePort"), text(7, ""), num(12, 0), num(13, 0),
        text(17, "SingleStack"),
    )
    obj = empty_meta(entries(11, {"app": "svc"}), name="svc") + spec + msg(3, msg(1))

    assert decode_object(body("v1", "Service", obj)) == {
        "kind": "Service", "apiVersion": "v1",
        "metadata": {"name": "svc", "creationTimestamp": None, "labels": {"app": "svc"}},
        "spec": {
            "ports": [
                {"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080},
                {"name": "web", "protocol": "TCP", "port": 81, "targetPort": "http", "nodePort": 30081},
                {"name": "plain", "protocol": "UDP", "port": 53},  # a zero targetPort means unset
            ],
            "selector": {"app": "svc"},
            "type": "NodePort",
            "ipFamilyPolicy": "SingleStack",
        },
        "status": {"loadBalancer": {}},
    }


def test_event_times_negative_ints_and_endpoints():
    event = (
        empty_meta(name="ev")
        + msg(2, text(1, "Pod"), text(2, "default"), text(3, "p"), text(4, ""))
        + text(3, "Started") + msg(6, num(1, 0), num(2, 0)) + num(8, -1)
        + msg(10, num(1, 1_700_000_000), num(2, 123_456_789)) + text(14, "") + text(15, "kubelet-1")
    )
    assert decode_object(body("v1", "Event", event)) == {
        "kind": "Event", "apiVersion": "v1",
        "metadata": {"name": "ev", "creationTimestamp": None},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
        "reason": "Started", "firstTimestamp": "1970-01-01T00:00:00Z", "count": -1,
        "eventTime": "2023-11-14T22:13:20.123456Z", "reportingComponent": "", "reportingInstance": "kubelet-1",
    }

    endpoints = empty_meta(name="svc") + msg(2, msg(1, text(1, "10.0.0.5"), text(3, ""),
                                                    msg(2, text(1, "Pod"), text(3, "p"))),
                                             msg(3, text(1, ""), num(2, 8080), text(3, "TCP")))
    assert decode_object(body("v1", "Endpoints", endpoints))["subsets"] == [
        {"addresses": [{"ip": "10.0.0.5", "targetRef": {"kind": "Pod", "name": "p"}}],
         "ports": [{"port": 8080, "protocol": "TCP"}]},
    ]


def test_node_taints_and_capacity():
    node = (empty_meta(name="n1")
            + msg(2, text(1, "10.244.1.0/24"), num(4, 1), msg(5, text(1, "gpu"), text(2, ""), text(3, "NoSchedule")))
            + msg(3, quantities(1, {"cpu": "4", "pods": "110"}),
                  msg(5, text(1, "InternalIP"), text(2, "192.168.1.10"))))
    assert decode_object(body("v1", "Node", node)) == {
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": "n1", "creationTimestamp": None},
        "spec": {"podCIDR": "10.244.1.0/24", "unschedulable": True, "taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "4", "pods": "110"},
                   "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}]},
    }


# --- robustness ---------------------------------------------------------------------------------------------------


def test_unknown_fields_of_every_wire_type_are_skipped():
    unknown = (num(90, 7) + key(91, 1) + b"\x01" * 8 + text(92, "future") + key(93, 5) + b"\x02" * 4
               + msg(94, text(1, "nested")))
    obj = (empty_meta(unknown, name="ns2") + unknown
           + msg(2, unknown, text(1, "kubernetes")) + msg(3, unknown))
    envelope = body("v1", "Namespace", obj) + text(9, "envelope field from the future")

    assert decode_object(envelope) == {
        "kind": "Namespace", "apiVersion": "v1",
        "metadata": {"name": "ns2", "creationTimestamp": None},
        "spec": {"finalizers": ["kubernetes"]}, "status": {},
    }


def test_packed_repeated_ints_decode_like_unpacked():
    spec = msg(2, msg(14, raw(4, varint(5) + varint(300) + varint(70000))))
    decoded = decode_object(body("v1", "Pod", empty_meta(name="p") + spec))
    assert decoded["spec"]["securityContext"] == {"supplementalGroups": [5, 300, 70000]}


@pytest.mark.parametrize("cut", [5, 10, 20, len(KUBECTL_133_NAMESPACE) - 13, len(KUBECTL_133_NAMESPACE) - 7])
def test_truncated_body_raises(cut):
    with pytest.raises(ProtobufError, match="truncated"):
        decode_object(KUBECTL_133_NAMESPACE[:cut])


def test_every_truncation_raises_protobuf_error_or_decodes():
    full = body("apps/v1", "Deployment", empty_meta(name="x") + msg(2, num(1, 2), msg(3, msg(2, container()))))
    for cut in range(len(full)):
        with contextlib.suppress(ProtobufError):  # anything else (IndexError, KeyError, ...) fails the test
            decode_object(full[:cut])


@pytest.mark.parametrize(("data", "message"), [
    (b"", "magic"),
    (b'{"kind": "Namespace"}', "magic"),
    (b"k8s\x00" + msg(1, text(1, "v1")), "no kind"),
    (b"k8s\x00" + msg(1, text(1, "v1"), text(2, "Namespace")) + text(3, "gzip"), "content encoding"),
    (body("v1", "Namespace", key(1, 0) + b"\xff" * 11), "varint longer"),
    (body("v1", "Namespace", num(1, 5)), "expected a length-delimited field"),
    (body("v1", "Namespace", msg(1, text(1, "n"), text(7, "not a varint"))), "expected a varint"),
    (body("v1", "Namespace", msg(1, raw(1, b"\xff\xfe"))), "UTF-8"),
    (body("v1", "Namespace", key(3, 3)), "wire type 3"),
    (body("v1", "Namespace", key(0, 0) + b"\x00"), "field number 0"),
    (body("apps/v1", "Deployment", msg(2, msg(4, msg(2, msg(1, num(1, 7)))))), "IntOrString type 7"),
])
def test_malformed_bodies_raise_protobuf_error(data, message):
    with pytest.raises(ProtobufError, match=message):
        decode_object(data)


def without_metadata(obj: dict) -> dict:
    return {key: value for key, value in obj.items() if key != "metadata"}


def test_configmap_and_secret_bytes_maps_decode_to_base64():
    configmap = empty_meta(name="app") + entries(2, {"a": "1"}) + msg(3, text(1, "blob"), raw(2, b"\xff\x00")) \
        + num(4, 1)
    assert without_metadata(decode_object(body("v1", "ConfigMap", configmap))) == {
        "apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"},
        "binaryData": {"blob": "/wA="}, "immutable": True}
    secret = empty_meta(name="creds") + msg(2, text(1, "user"), raw(2, b"me")) + text(3, "Opaque")
    assert without_metadata(decode_object(body("v1", "Secret", secret))) == {
        "apiVersion": "v1", "kind": "Secret", "data": {"user": "bWU="},
        "type": "Opaque"}


def test_replication_controller_and_endpoint_slice():
    template = msg(3, empty_meta(msg(11, text(1, "app"), text(2, "web"))), msg(2, msg(2, text(1, "c"),
                                                                                    text(2, "nginx"))))
    rc = empty_meta(name="web") + msg(2, num(1, 2), entries(2, {"app": "web"}), template, num(4, 0))
    decoded = decode_object(body("v1", "ReplicationController", rc))
    assert decoded["spec"]["replicas"] == 2
    assert decoded["spec"]["selector"] == {"app": "web"}
    assert decoded["spec"]["template"]["metadata"]["labels"] == {"app": "web"}
    endpoint = msg(2, text(1, "10.0.0.1"), msg(2, num(1, 1), num(2, 1), num(3, 0)), text(6, "n1"))
    slice_ = empty_meta(name="web-abc") + endpoint + msg(3, text(1, ""), text(2, "TCP"), num(3, 80)) \
        + text(4, "IPv4")
    assert without_metadata(decode_object(body("discovery.k8s.io/v1", "EndpointSlice", slice_))) == {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": True, "serving": True,
                                                                  "terminating": False}, "nodeName": "n1"}],
        "ports": [{"name": "", "protocol": "TCP", "port": 80}]}


def test_kind_outside_the_table_is_unsupported():
    with pytest.raises(UnsupportedKind, match="LimitRange"):
        decode_object(body("v1", "LimitRange", empty_meta(name="limits")))


def test_schema_references_resolve():
    for message, fields in SCHEMA.items():
        numbers = set()
        for number, (name, kind) in fields.items():
            base = kind.removeprefix("*").removeprefix("[]").removeprefix("...")
            assert base in SCALARS or base in SCHEMA, f"{message}.{name}: unknown kind {kind!r}"
            assert number not in numbers
            numbers.add(number)
            assert name or kind.startswith("..."), f"{message}: field {number} has no JSON name"
    assert all(target in SCHEMA for target in KINDS.values())


# --- parse_body -----------------------------------------------------------------------------------------------


def test_parse_body_decodes_protobuf_and_maps_errors():
    assert parse_body(KUBECTL_133_NAMESPACE, PROTOBUF)["metadata"]["name"] == "pbtest"

    with pytest.raises(errors.UnsupportedMediaType, match="LimitRange"):
        parse_body(body("v1", "LimitRange", empty_meta(name="limits")), PROTOBUF)
    with pytest.raises(errors.BadRequest, match=r"not valid Kubernetes protobuf: .*truncated"):
        parse_body(KUBECTL_133_NAMESPACE[:20], PROTOBUF)
    assert parse_body(b'{"kind": "Namespace"}', "application/json") == {"kind": "Namespace"}


def test_delete_options_as_client_go_sends_them_for_a_pod():
    options = num(1, 0) + msg(2, text(1, "uid-1")) + text(4, "Foreground")
    assert decode_object(body("v1", "DeleteOptions", options)) == {
        "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
        "preconditions": {"uid": "uid-1"}, "propagationPolicy": "Foreground",
    }
