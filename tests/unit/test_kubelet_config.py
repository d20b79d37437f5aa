"""A pod's configuration: env from ConfigMaps, Secrets, fields and resources, ``$(VAR)`` expansion, and the files
of configMap and secret volumes with their atomic ``..data`` swap."""

import base64
import os
from datetime import UTC, datetime

import pytest

from daemons.kubelet.configfiles import (
    BadPath,
    MissingConfig,
    current_projection,
    mounts_under,
    object_data,
    projection,
    referenced_objects,
    write_projection,
)
from daemons.kubelet.spec import ConfigError, container_create_args, environment, expand, volume_sources

UID = "0b5f5a4e-1111-2222-3333-444455556666"
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
OBJECTS = {("ConfigMap", "settings"): {"color": b"blue", "size": b"10"},
           ("Secret", "creds"): {"password": b"s3cr3t", "user": b"admin"}}


def pod(**spec):
    return {"metadata": {"name": "web", "namespace": "shop", "uid": UID, "labels": {"app": "web"},
                         "annotations": {"team": "a"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "default",
                     "containers": [{"name": "main", "image": "busybox"}], **spec}}


def env(*variables, env_from=None, resources=None, objects=None):
    container = {"name": "main", "env": list(variables), "envFrom": env_from or [], "resources": resources or {}}
    return environment(pod(), container, "10.1.0.5", "192.0.2.2", objects=OBJECTS if objects is None else objects,
                       allocatable={"cpu": "4", "memory": "8Gi"})


def ref(kind, name, key, **extra):
    return {"valueFrom": {kind: {"name": name, "key": key, **extra}}}


@pytest.mark.parametrize(("text", "expanded"), [
    ("$(A)-$(B)", "1-two"),
    ("$$(A)", "$(A)"),
    ("$$", "$"),
    ("$(MISSING)", "$(MISSING)"),
    ("$(A", "$(A"),
    ("cost $5 $", "cost $5 $"),
    ("$()", "$()"),
])
def test_expansion_follows_upstream(text, expanded):
    assert expand(text, {"A": "1", "B": "two"}) == expanded


def test_env_takes_values_from_configmaps_secrets_and_fields():
    variables = env(
        {"name": "COLOR", **ref("configMapKeyRef", "settings", "color")},
        {"name": "PASSWORD", **ref("secretKeyRef", "creds", "password")},
        {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": "TEAM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}}},
        {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
        {"name": "BOTH", "value": "$(COLOR)/$(TEAM)/$(LATER)"},
        {"name": "LATER", "value": "x"},
    )
    assert variables == {"COLOR": "blue", "PASSWORD": "s3cr3t", "UID": UID, "TEAM": "a", "HOST": "192.0.2.2",
                         "SA": "default", "BOTH": "blue/a/$(LATER)", "LATER": "x"}


def test_env_from_adds_every_key_with_its_prefix_and_env_wins():
    variables = env({"name": "CFG_color", "value": "red"},
                    env_from=[{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                              {"secretRef": {"name": "creds"}},
                              {"configMapRef": {"name": "absent", "optional": True}}])
    assert variables == {"CFG_size": "10", "password": "s3cr3t", "user": "admin", "CFG_color": "red"}


def test_optional_references_to_missing_objects_or_keys_set_nothing():
    assert env({"name": "A", **ref("configMapKeyRef", "absent", "k", optional=True)},
               {"name": "B", **ref("secretKeyRef", "creds", "nope", optional=True)}) == {}


@pytest.mark.parametrize(("variable", "env_from", "message"), [
    (ref("configMapKeyRef", "absent", "k"), None, 'configmap "absent" not found'),
    (ref("configMapKeyRef", "settings", "nope"), None, "couldn't find key nope in ConfigMap shop/settings"),
    (ref("secretKeyRef", "gone", "k"), None, 'secret "gone" not found'),
    (ref("secretKeyRef", "creds", "nope"), None, "couldn't find key nope in Secret shop/creds"),
    ({"value": ""}, [{"secretRef": {"name": "gone"}}], 'secret "gone" not found'),
])
def test_missing_references_are_config_errors_naming_what_is_missing(variable, env_from, message):
    with pytest.raises(ConfigError) as error:
        env({"name": "X", **variable}, env_from=env_from)
    assert str(error.value) == message


def test_resource_field_refs_divide_and_round_up_with_node_allocatable_for_unset_limits():
    resources = {"limits": {"memory": "128Mi", "cpu": "500m"}, "requests": {"cpu": "250m"}}

    def field(resource, divisor=None):
        selector = {"resource": resource, **({"divisor": divisor} if divisor else {})}
        return {"name": "V", "valueFrom": {"resourceFieldRef": selector}}

    assert env(field("limits.memory", "1Mi"), resources=resources) == {"V": "128"}
    assert env(field("limits.cpu"), resources=resources) == {"V": "1"}
    assert env(field("limits.cpu", "1m"), resources=resources) == {"V": "500"}
    assert env(field("requests.cpu", "1m"), resources=resources) == {"V": "250"}
    assert env(field("requests.memory"), resources=resources) == {"V": str(128 * 2**20)}
    assert env(field("limits.cpu")) == {"V": "4"}
    with pytest.raises(ConfigError, match=r"limits\.gpu"):
        env(field("limits.gpu"))


def test_command_and_args_expand_the_containers_environment():
    container = {"name": "main", "image": "busybox", "command": ["sh", "-c", "echo $(GREETING) $$HOME"],
                 "args": ["$(NOPE)"], "env": [{"name": "GREETING", "value": "hi"}]}
    args = container_create_args(pod(), container, "p", {}, node_name="n1")
    assert args["entrypoint"] == ["sh", "-c", "echo hi $HOME"]
    assert args["command"] == ["$(NOPE)"]
    assert "GREETING=hi" in args["environment"]


def test_configmap_and_secret_volumes_live_under_the_pod_and_mount_read_only():
    volumes = [{"name": "conf", "configMap": {"name": "settings"}}, {"name": "creds", "secret": {"secretName": "c"}}]
    container = {"name": "main", "image": "busybox", "volumeMounts": [{"name": "conf", "mountPath": "/etc/conf"},
                                                                      {"name": "creds", "mountPath": "/creds"}]}
    sources = volume_sources(pod(volumes=volumes), "/var/lib/k")
    assert sources["conf"].host_path == f"/var/lib/k/pods/{UID}/volumes/kubernetes.io~configmap/conf"
    assert sources["creds"].host_path == f"/var/lib/k/pods/{UID}/volumes/kubernetes.io~secret/creds"
    assert (sources["conf"].config, sources["creds"].config) == ("ConfigMap", "Secret")
    args = container_create_args(pod(volumes=volumes), container, "p",
                                 {name: source.host_path for name, source in sources.items()}, node_name="n1")
    assert [bind.rsplit(":", 1)[1] for bind in args["volumes"]] == ["ro", "ro"]


def test_the_pod_refers_to_the_objects_of_its_volumes_env_and_env_from():
    spec = pod(volumes=[{"name": "v", "secret": {"secretName": "tls"}}],
               initContainers=[{"name": "i", "image": "busybox", "envFrom": [{"configMapRef": {"name": "boot"}}]}],
               containers=[{"name": "main", "image": "busybox", "env": [
                   {"name": "A", **ref("configMapKeyRef", "settings", "color")}]}])
    assert referenced_objects(spec) == {("Secret", "tls"), ("ConfigMap", "boot"), ("ConfigMap", "settings")}


def test_object_data_decodes_secrets_and_binary_data():
    secret = {"data": {"k": base64.b64encode(b"\x00raw").decode()}}
    configmap = {"data": {"a": "text"}, "binaryData": {"b": base64.b64encode(b"\xff").decode()}}
    assert object_data("Secret", secret) == {"k": b"\x00raw"}
    assert object_data("ConfigMap", configmap) == {"a": b"text", "b": b"\xff"}


def test_items_map_keys_to_paths_with_their_own_modes():
    data = {"color": b"blue", "size": b"10"}
    assert projection("ConfigMap", {"name": "settings"}, data) == {"color": (b"blue", 0o644), "size": (b"10", 0o644)}
    source = {"name": "settings", "defaultMode": 0o400,
              "items": [{"key": "color", "path": "sub/colour.txt", "mode": 0o600}, {"key": "size", "path": "n"}]}
    assert projection("ConfigMap", source, data) == {"sub/colour.txt": (b"blue", 0o600), "n": (b"10", 0o400)}
    for escaping in ("../x", "/etc/x", "a/../../x"):
        with pytest.raises(BadPath):
            projection("ConfigMap", {"name": "s", "items": [{"key": "color", "path": escaping}]}, data)
    with pytest.raises(BadPath):
        projection("ConfigMap", {"name": "s"}, {"..data": b"x"})


def test_missing_objects_and_keys_block_the_volume_unless_optional():
    with pytest.raises(MissingConfig, match='configmap "settings" not found'):
        projection("ConfigMap", {"name": "settings"}, None)
    with pytest.raises(MissingConfig, match="references non-existent secret key: nope"):
        projection("Secret", {"secretName": "s", "items": [{"key": "nope", "path": "p"}]}, {})
    assert projection("ConfigMap", {"name": "settings", "optional": True}, None) == {}
    assert projection("Secret", {"secretName": "s", "optional": True, "items": [{"key": "nope", "path": "p"}]},
                      {"k": b"v"}) == {}


def test_a_volume_update_swaps_the_data_link_and_keeps_key_links(tmp_path):
    target = str(tmp_path / "vol")
    assert write_projection(target, {"color": (b"blue", 0o644), "sub/x": (b"1", 0o600)}, NOW)
    assert (tmp_path / "vol" / "color").read_bytes() == b"blue"
    assert os.readlink(tmp_path / "vol" / "color") == "..data/color"
    first = os.readlink(tmp_path / "vol" / "..data")
    assert first.startswith("..2026_01_01_12_00_00.")
    assert not write_projection(target, {"color": (b"blue", 0o644), "sub/x": (b"1", 0o600)}, NOW)

    assert write_projection(target, {"color": (b"red", 0o400)}, NOW)
    assert (tmp_path / "vol" / "color").read_bytes() == b"red"
    assert oct(os.stat(tmp_path / "vol" / "color").st_mode & 0o777) == oct(0o400)
    assert not (tmp_path / "vol" / "sub").exists() and not (tmp_path / "vol" / first).exists()
    assert sorted(os.listdir(target)) == sorted(["..data", "color", os.readlink(tmp_path / "vol" / "..data")])
    assert current_projection(target) == {"color": (b"red", 0o400)}


def test_pod_folder_mounts_are_found_deepest_first():
    table = ["tmpfs /var/lib/k/pods/u/volumes/kubernetes.io~secret/a tmpfs rw 0 0",
             "tmpfs /var/lib/k/pods/u/volumes/kubernetes.io~secret/a/b tmpfs rw 0 0",
             "tmpfs /var/lib/k/pods/uu/volumes/x tmpfs rw 0 0", "/dev/sda1 / ext4 rw 0 0"]
    assert mounts_under("/var/lib/k/pods/u", table) == [
        "/var/lib/k/pods/u/volumes/kubernetes.io~secret/a/b", "/var/lib/k/pods/u/volumes/kubernetes.io~secret/a"]
