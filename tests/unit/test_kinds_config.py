"""ConfigMap, Secret, ServiceAccount, EndpointSlice and ReplicationController: defaults, upstream's field
errors and table cells, and the data ``kubectl create`` builds from its flags."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from cli.session import CLIError
from cli.verbs.create import (
    configmap_manifest,
    docker_config,
    env_file_sources,
    file_sources,
    gathered,
    literal_sources,
)
from daemons.api.kinds import configmap, endpointslice, replicationcontroller, secret, serviceaccount
from daemons.api.resources import resolve
from daemons.api.tables import table

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CREATED = {"name": "x", "creationTimestamp": "2025-12-31T23:59:00Z"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def messages(errors) -> list[str]:
    return [str(error) for error in errors]


def cells(resource, obj) -> list:
    return table(resource, [{"metadata": CREATED, **obj}], "1", NOW)["rows"][0]["cells"]


def headers(resource) -> list[str]:
    return [column["name"] for column in table(resource, [], "1", NOW)["columnDefinitions"] if not column["priority"]]


# --- ConfigMap -------------------------------------------------------------------------------------


def test_configmap_keys_must_be_config_keys_and_in_one_bag_only():
    obj = {"data": {"a b": "1", "..x": "2", "both": "3"}, "binaryData": {"both": b64("4")}}
    assert messages(configmap.check(obj, None)) == [
        "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' "
        "or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
        "'[-._a-zA-Z0-9]+')",
        "data[..x]: Invalid value: \"..x\": must not start with '..'",
        'data[both]: Invalid value: "both": duplicate of key present in binaryData',
        'binaryData[both]: Invalid value: "both": duplicate of key present in data',
    ]
    assert messages(configmap.check({"data": {"k" * 254: ""}}, None)) == [
        f'data[{"k" * 254}]: Invalid value: "{"k" * 254}": must be no more than 253 characters']


def test_configmap_binary_data_is_base64_and_the_whole_at_most_one_mebibyte():
    assert messages(configmap.check({"binaryData": {"k": "not base64!"}}, None)) == [
        'binaryData[k]: Invalid value: "<value redacted>": illegal base64 data']
    half = "x" * (512 * 1024)
    assert configmap.check({"data": {"a": half, "b": half}}, None) == []
    assert messages(configmap.check({"data": {"a": half, "b": half + "x"}}, None)) == [
        ": Too long: must have at most 1048576 bytes"]


def test_an_immutable_configmap_keeps_its_data_and_its_immutability():
    current = {"data": {"a": "1"}, "immutable": True}
    assert configmap.check_update({"data": {"a": "1"}, "immutable": True, "metadata": {"labels": {"x": "y"}}},
                                  current) == []
    assert messages(configmap.check_update({"data": {"a": "2"}, "binaryData": {"b": b64("x")}}, current)) == [
        "immutable: Forbidden: field is immutable when `immutable` is set",
        "data: Forbidden: field is immutable when `immutable` is set",
        "binaryData: Forbidden: field is immutable when `immutable` is set",
    ]
    assert configmap.check_update({"data": {"a": "2"}, "immutable": True}, {"data": {"a": "1"}}) == []


# --- Secret ----------------------------------------------------------------------------------------


def test_string_data_is_merged_into_data_and_the_type_defaults_to_opaque():
    obj = {"data": {"a": b64("old"), "b": b64("kept")}, "stringData": {"a": "new"}}
    secret.defaults(obj)
    assert obj == {"data": {"a": b64("new"), "b": b64("kept")}, "type": "Opaque"}


@pytest.mark.parametrize(("secret_type", "data", "annotations", "expected"), [
    ("kubernetes.io/tls", {"tls.crt": b64("c")}, {}, ["data[tls.key]: Required value"]),
    ("kubernetes.io/basic-auth", {}, {}, ["data[username]: Required value", "data[password]: Required value"]),
    ("kubernetes.io/basic-auth", {"password": ""}, {}, []),
    ("kubernetes.io/ssh-auth", {"ssh-privatekey": ""}, {}, ["data[ssh-privatekey]: Required value"]),
    ("kubernetes.io/dockerconfigjson", {}, {}, ["data[.dockerconfigjson]: Required value"]),
    ("kubernetes.io/dockerconfigjson", {".dockerconfigjson": b64('{"auths": {}}')}, {}, []),
    ("kubernetes.io/service-account-token", {}, {},
     ["metadata.annotations[kubernetes.io/service-account.name]: Required value"]),
    ("kubernetes.io/service-account-token", {}, {"kubernetes.io/service-account.name": "default"}, []),
    ("example.com/custom", {}, {}, []),
])
def test_each_secret_type_requires_its_keys(secret_type, data, annotations, expected):
    obj = {"type": secret_type, "data": data, "metadata": {"annotations": annotations}}
    assert messages(secret.check(obj, None)) == expected


def test_a_docker_config_must_be_a_json_object():
    obj = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("not json")}}
    [error] = secret.check(obj, None)
    assert error.field == "data[.dockerconfigjson]"
    assert error.message.startswith('Invalid value: "<secret contents redacted>": ')


def test_a_secret_keeps_its_type_and_an_immutable_one_its_data():
    current = {"type": "Opaque", "data": {"a": b64("1")}, "immutable": True}
    assert messages(secret.check_update({"type": "kubernetes.io/tls", "data": {"a": b64("2")}, "immutable": True},
                                        current)) == [
        'type: Invalid value: "kubernetes.io/tls": field is immutable',
        "data: Forbidden: field is immutable when `immutable` is set",
    ]


# --- EndpointSlice ---------------------------------------------------------------------------------


def test_endpoint_slice_addresses_ports_and_address_type():
    obj = {"addressType": "IPv4", "endpoints": [{"addresses": []}, {"addresses": ["10.0.0.1", "fe80::1"]}],
           "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "http", "port": 70000,
                                                                       "protocol": "ICMP"}]}
    assert messages(endpointslice.check(obj, None)) == [
        "endpoints[0].addresses: Required value: must contain at least 1 address",
        'endpoints[1].addresses[1]: Invalid value: "fe80::1": must be a valid IPv4 address',
        'ports[1].name: Duplicate value: "http"',
        'ports[1].protocol: Unsupported value: "ICMP": supported values: "SCTP", "TCP", "UDP"',
        "ports[1].port: Invalid value: 70000: must be between 0 and 65535, inclusive",
    ]
    assert messages(endpointslice.check({"addressType": "IPX"}, None)) == [
        'addressType: Unsupported value: "IPX": supported values: "FQDN", "IPv4", "IPv6"']
    assert messages(endpointslice.check_update({"addressType": "IPv6"}, {"addressType": "IPv4"})) == [
        'addressType: Invalid value: "IPv6": field is immutable']


def test_endpoint_slice_ports_default_to_tcp_and_an_empty_name():
    obj = {"ports": [{"port": 80}]}
    endpointslice.RESOURCE.defaults(obj)
    assert obj["ports"] == [{"port": 80, "name": "", "protocol": "TCP"}]


# --- ReplicationController -------------------------------------------------------------------------


def rc(selector=None, labels=None, restart="Always"):
    spec = {"replicas": 2, "template": {"metadata": {"labels": labels or {"app": "web"}},
                                        "spec": {"restartPolicy": restart,
                                                 "containers": [{"name": "c", "image": "nginx"}]}}}
    if selector is not None:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web"}, "spec": spec}


def test_a_replication_controller_selects_its_template_labels_by_default():
    obj = rc()
    replicationcontroller.RESOURCE.defaults(obj)
    assert obj["spec"]["selector"] == {"app": "web"}
    assert obj["metadata"]["labels"] == {"app": "web"}
    assert replicationcontroller.check(obj, None) == []


def test_a_replication_controller_selector_must_match_a_template_that_restarts_always():
    assert messages(replicationcontroller.check(rc(selector={"app": "db"}, restart="Never"), None)) == [
        'spec.template.metadata.labels: Invalid value: map[string]string{"app":"web"}: `selector` does not match '
        "template `labels`",
        'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"',
    ]
    assert messages(replicationcontroller.check({"spec": {}}, None)) == [
        "spec.selector: Required value", "spec.template: Required value"]


# --- names and columns -----------------------------------------------------------------------------


def test_short_names_and_columns_as_upstream_kubectl_shows_them():
    assert [resolve(name).kind for name in ("cm", "sa", "rc", "secrets", "endpointslices")] == [
        "ConfigMap", "ServiceAccount", "ReplicationController", "Secret", "EndpointSlice"]
    assert headers(configmap.RESOURCE) == ["Name", "Data", "Age"]
    assert cells(configmap.RESOURCE, {"data": {"a": "1"}, "binaryData": {"b": ""}}) == ["x", 2, "60s"]
    assert headers(secret.RESOURCE) == ["Name", "Type", "Data", "Age"]
    assert cells(secret.RESOURCE, {"type": "Opaque", "data": {"a": ""}}) == ["x", "Opaque", 1, "60s"]
    assert headers(serviceaccount.RESOURCE) == ["Name", "Secrets", "Age"]
    assert cells(serviceaccount.RESOURCE, {}) == ["x", 0, "60s"]
    assert headers(replicationcontroller.RESOURCE) == ["Name", "Desired", "Current", "Ready", "Age"]
    assert cells(replicationcontroller.RESOURCE, {**rc(selector={"app": "web"}), "metadata": CREATED,
                                                  "status": {"replicas": 2, "readyReplicas": 1}}) == [
        "x", 2, 2, 1, "60s", "c", "nginx", "app=web"]
    assert headers(endpointslice.RESOURCE) == ["Name", "AddressType", "Ports", "Endpoints", "Age"]
    many = [{"addresses": [f"10.0.0.{n}"]} for n in range(5)]
    assert cells(endpointslice.RESOURCE, {"addressType": "IPv4", "endpoints": many, "ports": [{"port": 80}]}) == [
        "x", "IPv4", "80", "10.0.0.0,10.0.0.1,10.0.0.2 + 2 more...", "60s"]
    assert cells(endpointslice.RESOURCE, {"addressType": "IPv4"}) == ["x", "IPv4", "<unset>", "<unset>", "60s"]


# --- kubectl create's flags ------------------------------------------------------------------------


def test_literals_split_at_the_first_equals_sign():
    assert literal_sources(["a=b=c", "empty="]) == [("a", b"b=c"), ("empty", b"")]
    with pytest.raises(CLIError, match="invalid literal source novalue, expected key=value"):
        literal_sources(["novalue"])


def test_files_are_keyed_by_their_name_or_the_given_key_and_a_directory_by_each_file(tmp_path):
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "one.conf").write_text("1")
    (tmp_path / "dir" / "sub").mkdir()
    (tmp_path / "app.properties").write_text("x=y")
    assert file_sources([str(tmp_path / "app.properties"), f"renamed={tmp_path / 'app.properties'}",
                         str(tmp_path / "dir")]) == [("app.properties", b"x=y"), ("renamed", b"x=y"),
                                                     ("one.conf", b"1")]
    with pytest.raises(CLIError, match="cannot give a key name for a directory path"):
        file_sources([f"k={tmp_path / 'dir'}"])
    with pytest.raises(CLIError, match="no such file or directory"):
        file_sources([str(tmp_path / "missing")])


def test_env_files_skip_comments_and_take_bare_keys_from_the_environment(tmp_path):
    path = tmp_path / "app.env"
    path.write_text("\ufeffA=1\n\n# comment\n  B=x=y\nFROM_ENV\nUNSET\n")
    assert env_file_sources([str(path)], {"FROM_ENV": "env"}) == [("A", b"1"), ("B", b"x=y"),
                                                                    ("FROM_ENV", b"env")]
    path.write_text("1BAD=x\n")
    with pytest.raises(CLIError, match='"1BAD" is not a valid key name'):
        env_file_sources([str(path)], {})


def test_keys_are_checked_and_a_repeated_key_is_refused():
    with pytest.raises(CLIError, match='"a b" is not a valid key name for a ConfigMap'):
        gathered("ConfigMap", "cfg", ["a b=1"], None, None)
    with pytest.raises(CLIError, match='cannot add key "a", another key by that name already exists in Data for '
                                       'ConfigMap "cfg"'):
        gathered("ConfigMap", "cfg", ["a=1", "a=2"], None, None)


def test_a_configmap_keeps_text_in_data_and_other_bytes_in_binary_data():
    body = configmap_manifest("cfg", {"text": b"hello", "blob": b"\xff\x00"})
    assert body["data"] == {"text": "hello"}
    assert body["binaryData"] == {"blob": base64.b64encode(b"\xff\x00").decode()}


def test_a_docker_registry_secret_holds_the_credentials_and_their_auth():
    config = json.loads(docker_config("registry.example:5000", "me", "pw", "me@example.com"))
    assert config == {"auths": {"registry.example:5000": {"username": "me", "password": "pw",
                                                          "email": "me@example.com", "auth": b64("me:pw")}}}
