"""The PATCH flavours: RFC 7386, RFC 6902, strategic merge as kubectl sends it, and server-side apply."""

import copy
import json

import pytest

from daemons.apiserver.patch import (
    ApplyConflict,
    PatchError,
    json_merge_patch,
    json_patch,
    merge_list_for,
    record_update,
    server_side_apply,
    strategic_merge_patch,
)

pytestmark = pytest.mark.unit

NOW = "2024-05-01T10:00:00Z"
LATER = "2024-05-01T11:00:00Z"


def pod(containers=None, labels=None, **spec):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": labels if labels is not None else {"app": "web"}},
        "spec": {"containers": containers or [{"name": "web", "image": "nginx:1.25"}], **spec},
    }


def deployment(image="nginx:1.25", replicas=2):
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image, "ports": [{"containerPort": 80}]}]},
            },
        },
    }


def names(items):
    return [item["name"] for item in items]


def managed(obj, manager, operation):
    entries = [entry for entry in obj["metadata"].get("managedFields", [])
               if (entry["manager"], entry["operation"]) == (manager, operation)]
    assert len(entries) <= 1
    return entries[0] if entries else None


# --- RFC 7386 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [  # RFC 7386 appendix A, the cases whose target and patch are objects
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_json_merge_patch_rfc7386_examples(target, patch, expected):
    assert json_merge_patch(target, patch) == expected


def test_json_merge_patch_rfc7386_section3_example():
    target = {
        "title": "Goodbye!",
        "author": {"givenName": "John", "familyName": "Doe"},
        "tags": ["example", "sample"],
        "content": "This will be unchanged",
    }
    patch = {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None}, "tags": ["example"]}
    assert json_merge_patch(target, patch) == {
        "title": "Hello!",
        "author": {"givenName": "John"},
        "tags": ["example"],
        "content": "This will be unchanged",
        "phoneNumber": "+01-123-456-7890",
    }


def test_json_merge_patch_replaces_lists_whole_and_removes_labels():
    result = json_merge_patch(pod(labels={"app": "web", "tier": "fe"}),
                              {"metadata": {"labels": {"tier": None, "env": "prod"}}, "spec": {"containers": []}})
    assert result["metadata"]["labels"] == {"app": "web", "env": "prod"}
    assert result["spec"]["containers"] == []


@pytest.mark.parametrize("patch", [["c"], "bar", None, 3])
def test_json_merge_patch_rejects_a_non_object_patch(patch):
    with pytest.raises(PatchError):
        json_merge_patch({"a": "foo"}, patch)


def test_json_merge_patch_leaves_inputs_alone():
    target = {"a": {"b": [1]}, "keep": {"x": 1}}
    patch = {"a": {"c": {"d": 1}}}
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = json_merge_patch(target, patch)
    result["keep"]["x"] = 2
    result["a"]["c"]["d"] = 2
    assert (target, patch) == (target_before, patch_before)


# --- RFC 6902 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "operations", "expected"),
    [  # RFC 6902 appendix A
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
        ({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}], {"foo": ["bar", "qux", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        ({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}],
         {"baz": "boo", "foo": "bar"}),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        ({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
         {"foo": "bar", "child": {"grandchild": {}}}),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}], {"foo": "bar", "baz": "qux"}),
        ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
         {"foo": ["bar", ["abc", "def"]]}),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        ({"foo": "bar"}, [{"op": "copy", "from": "/foo", "path": "/baz"}], {"foo": "bar", "baz": "bar"}),
    ],
)
def test_json_patch_rfc6902_examples(target, operations, expected):
    assert json_patch(target, operations) == expected


def test_json_patch_on_a_pod_label_and_image():
    result = json_patch(pod(), [
        {"op": "add", "path": "/metadata/labels/tier", "value": "fe"},
        {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.26"},
    ])
    assert result["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    assert result["spec"]["containers"][0]["image"] == "nginx:1.26"


@pytest.mark.parametrize(
    "operations",
    [
        [{"op": "add", "path": "/baz/bat", "value": "qux"}],  # RFC 6902 A.12: parent missing
        [{"op": "test", "path": "/baz", "value": "bar"}],  # RFC 6902 A.9: failed test
        [{"op": "test", "path": "/~01", "value": "10"}],  # RFC 6902 A.15: string is not number
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "move", "from": "/missing", "path": "/x"}],
        [{"op": "frobnicate", "path": "/foo"}],
        [{"path": "/foo", "value": 1}],
        [{"op": "add", "value": 1}],
        [{"op": "add", "path": "/foo"}],
        [{"op": "add", "path": "foo", "value": 1}],
        [{"op": "add", "path": "/list/9", "value": 1}],
        [{"op": "add", "path": "", "value": ["not", "an", "object"]}],
        ["not an operation"],
        [1],
    ],
)
def test_json_patch_failures_raise_patch_error(operations):
    with pytest.raises(PatchError):
        json_patch({"foo": "bar", "baz": "qux", "~1": 10, "list": []}, operations)


def test_json_patch_rejects_a_non_list():
    with pytest.raises(PatchError):
        json_patch({"foo": "bar"}, {"op": "remove", "path": "/foo"})


def test_json_patch_is_all_or_nothing_and_leaves_inputs_alone():
    target = {"foo": {"bar": 1}}
    value = {"nested": [1]}
    operations = [{"op": "add", "path": "/new", "value": value}]
    result = json_patch(target, operations)
    result["new"]["nested"].append(2)
    result["foo"]["bar"] = 2
    assert target == {"foo": {"bar": 1}}
    assert value == {"nested": [1]}
    with pytest.raises(PatchError):
        json_patch(target, [{"op": "remove", "path": "/foo/bar"}, {"op": "test", "path": "/foo/bar", "value": 1}])
    assert target == {"foo": {"bar": 1}}


# --- Strategic merge patch: the merge-key table ---------------------------------------------------------


@pytest.mark.parametrize(
    ("field_names", "key"),
    [
        (("spec", "containers"), "name"),
        (("spec", "template", "spec", "containers"), "name"),
        (("spec", "template", "spec", "initContainers"), "name"),
        (("spec", "containers", "ports"), "containerPort"),
        (("spec", "template", "spec", "containers", "env"), "name"),
        (("spec", "initContainers", "volumeMounts"), "mountPath"),
        (("spec", "volumes"), "name"),
        (("spec", "imagePullSecrets"), "name"),
        (("spec", "ports"), "port"),
        (("status", "conditions"), "type"),
        (("status", "addresses"), "type"),
        (("status", "podIPs"), "ip"),
        (("metadata", "ownerReferences"), "uid"),
        (("spec", "template", "metadata", "ownerReferences"), "uid"),
    ],
)
def test_merge_keys_follow_upstream_tags(field_names, key):
    rule = merge_list_for(field_names)
    assert rule is not None
    assert rule.key == key


@pytest.mark.parametrize("field_names", [("metadata", "finalizers"), ("spec", "podCIDRs")])
def test_primitive_lists_that_merge_as_sets(field_names):
    rule = merge_list_for(field_names)
    assert rule is not None
    assert rule.key is None


@pytest.mark.parametrize(
    "field_names",
    [
        ("spec", "tolerations"),
        ("spec", "taints"),  # upstream NodeSpec.taints has no merge key: kubectl sends the whole list
        ("subsets",),
        ("subsets", "ports"),
        ("spec", "containers", "args"),
        ("spec", "selector", "matchExpressions"),
        ("status", "containerStatuses"),
        ("spec", "finalizers"),  # NamespaceSpec.finalizers is atomic upstream
    ],
)
def test_lists_without_merge_key_are_replaced(field_names):
    assert merge_list_for(field_names) is None


# --- Strategic merge patch: containers and friends ------------------------------------------------------


def test_strategic_adds_a_container_by_name():
    result = strategic_merge_patch(pod(), {"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}})
    # as upstream: without $setElementOrder, an item new to the server goes before the server-only ones
    assert result["spec"]["containers"] == [
        {"name": "sidecar", "image": "busybox"},
        {"name": "web", "image": "nginx:1.25"},
    ]


def test_strategic_appends_a_container_when_kubectl_gives_the_order():
    patch = {"spec": {"$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
                      "containers": [{"name": "sidecar", "image": "busybox"}]}}
    assert names(strategic_merge_patch(pod(), patch)["spec"]["containers"]) == ["web", "sidecar"]


def test_strategic_modifies_a_container_by_name_keeping_other_fields():
    target = pod([{"name": "web", "image": "nginx:1.25", "args": ["-g", "daemon off;"]},
                  {"name": "sidecar", "image": "busybox"}])
    result = strategic_merge_patch(target, {"spec": {"containers": [{"name": "sidecar", "image": "busybox:1.36"}]}})
    assert result["spec"]["containers"] == [
        {"name": "web", "image": "nginx:1.25", "args": ["-g", "daemon off;"]},
        {"name": "sidecar", "image": "busybox:1.36"},
    ]


def test_strategic_deletes_a_container_with_patch_delete():
    target = pod([{"name": "web", "image": "nginx"}, {"name": "sidecar", "image": "busybox"}])
    result = strategic_merge_patch(target, {"spec": {"containers": [{"$patch": "delete", "name": "sidecar"}]}})
    assert result["spec"]["containers"] == [{"name": "web", "image": "nginx"}]


def test_strategic_delete_of_an_absent_container_is_a_no_op():
    result = strategic_merge_patch(pod(), {"spec": {"containers": [{"$patch": "delete", "name": "ghost"}]}})
    assert result == pod()


def test_strategic_set_element_order_reorders_containers():
    target = pod([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}, {"name": "c", "image": "x"}])
    patch = {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                      "containers": [{"name": "a", "image": "y"}]}}
    result = strategic_merge_patch(target, patch)
    assert result["spec"]["containers"] == [
        {"name": "c", "image": "x"}, {"name": "a", "image": "y"}, {"name": "b", "image": "x"},
    ]
    assert "$setElementOrder/containers" not in result["spec"]


def test_strategic_set_element_order_alone_only_reorders():
    target = pod([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}])
    result = strategic_merge_patch(target, {"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}})
    assert names(result["spec"]["containers"]) == ["b", "a"]


def test_strategic_set_element_order_with_a_deleted_and_an_added_container():
    target = pod([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}])
    patch = {"spec": {"$setElementOrder/containers": [{"name": "new"}, {"name": "a"}],
                      "containers": [{"name": "new", "image": "z"}, {"$patch": "delete", "name": "b"}]}}
    assert names(strategic_merge_patch(target, patch)["spec"]["containers"]) == ["new", "a"]


def test_strategic_keeps_server_only_items_where_they_were():
    target = pod([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}, {"name": "c", "image": "x"}])
    result = strategic_merge_patch(target, {"spec": {"containers": [{"name": "b", "image": "y"}]}})
    assert names(result["spec"]["containers"]) == ["a", "b", "c"]


def test_strategic_merges_env_by_name_and_null_removes_a_field_of_an_item():
    target = pod([{"name": "web", "image": "nginx", "env": [
        {"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]}])
    patch = {"spec": {"containers": [{"name": "web", "env": [
        {"name": "B", "value": "2", "valueFrom": None}, {"name": "C", "value": "3"},
    ]}]}}
    result = strategic_merge_patch(target, patch)
    assert result["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"},
    ]


def test_strategic_merges_ports_mounts_and_volumes_by_their_keys():
    target = pod([{"name": "web", "image": "nginx", "ports": [{"containerPort": 80, "name": "http"}],
                   "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                 volumes=[{"name": "data", "emptyDir": {}}])
    patch = {"spec": {
        "containers": [{"name": "web",
                        "ports": [{"containerPort": 443, "name": "https"}, {"containerPort": 80, "protocol": "TCP"}],
                        "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
        "volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}],
    }}
    result = strategic_merge_patch(target, patch)
    container = result["spec"]["containers"][0]
    assert container["ports"] == [
        {"containerPort": 443, "name": "https"}, {"containerPort": 80, "name": "http", "protocol": "TCP"},
    ]
    assert [mount["mountPath"] for mount in container["volumeMounts"]] == ["/cache", "/data"]
    assert names(result["spec"]["volumes"]) == ["cache", "data"]


def test_strategic_retain_keys_switches_a_volume_source():
    target = pod(volumes=[{"name": "data", "emptyDir": {}}])
    patch = {"spec": {"volumes": [{"$retainKeys": ["hostPath", "name"], "name": "data",
                                   "hostPath": {"path": "/srv"}}]}}
    assert strategic_merge_patch(target, patch)["spec"]["volumes"] == [{"name": "data", "hostPath": {"path": "/srv"}}]


def test_strategic_retain_keys_on_deployment_strategy():
    target = deployment()
    target["spec"]["strategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}}
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    assert strategic_merge_patch(target, patch)["spec"]["strategy"] == {"type": "Recreate"}


def test_strategic_patch_replace_on_a_map():
    target = pod(nodeSelector={"disk": "ssd", "zone": "a"})
    patch = {"spec": {"nodeSelector": {"$patch": "replace", "zone": "b"}}}
    assert strategic_merge_patch(target, patch)["spec"]["nodeSelector"] == {"zone": "b"}


def test_strategic_patch_delete_on_a_map_removes_it():
    target = pod(nodeSelector={"disk": "ssd"})
    assert "nodeSelector" not in strategic_merge_patch(target, {"spec": {"nodeSelector": {"$patch": "delete"}}})["spec"]


def test_strategic_patch_merge_on_a_map_is_the_default():
    result = strategic_merge_patch(pod(), {"metadata": {"labels": {"$patch": "merge", "tier": "fe"}}})
    assert result["metadata"]["labels"] == {"app": "web", "tier": "fe"}


def test_strategic_patch_delete_at_the_root_empties_the_object():
    assert strategic_merge_patch(pod(), {"$patch": "delete"}) == {}


def test_strategic_patch_replace_item_replaces_the_whole_list():
    target = pod([{"name": "a", "image": "x"}, {"name": "b", "image": "x"}])
    patch = {"spec": {"containers": [{"name": "c", "image": "y", "args": None}, {"$patch": "replace"}]}}
    assert strategic_merge_patch(target, patch)["spec"]["containers"] == [{"name": "c", "image": "y"}]


def test_strategic_label_add_and_remove_as_kubectl_label_sends():
    target = pod(labels={"app": "web", "tier": "fe"})
    result = strategic_merge_patch(target, {"metadata": {"labels": {"tier": None, "env": "prod"}}})
    assert result["metadata"]["labels"] == {"app": "web", "env": "prod"}


def test_strategic_annotate_scale_and_rollout_restart_on_a_deployment():
    patch = {"metadata": {"annotations": {"note": "x"}},
             "spec": {"replicas": 5,
                      "template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": NOW}}}}}
    result = strategic_merge_patch(deployment(), patch)
    assert result["metadata"]["annotations"] == {"note": "x"}
    assert result["spec"]["replicas"] == 5
    assert result["spec"]["template"]["metadata"] == {
        "labels": {"app": "web"}, "annotations": {"kubectl.kubernetes.io/restartedAt": NOW},
    }
    assert result["spec"]["template"]["spec"] == deployment()["spec"]["template"]["spec"]


def test_strategic_merges_containers_under_the_deployment_template():
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.26"}]}}}}
    container = strategic_merge_patch(deployment(), patch)["spec"]["template"]["spec"]["containers"][0]
    assert container == {"name": "web", "image": "nginx:1.26", "ports": [{"containerPort": 80}]}


def test_strategic_replaces_tolerations_and_node_taints_whole():
    target = pod(tolerations=[{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}])
    result = strategic_merge_patch(target, {"spec": {"tolerations": [{"key": "c", "operator": "Exists"}]}})
    assert result["spec"]["tolerations"] == [{"key": "c", "operator": "Exists"}]
    node = {"kind": "Node", "metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}}
    # what `kubectl taint nodes n1 a-` sends: the remaining list
    result = strategic_merge_patch(node, {"spec": {"taints": [{"key": "b", "effect": "NoSchedule"}]}})
    assert result["spec"]["taints"] == [{"key": "b", "effect": "NoSchedule"}]


def test_strategic_merges_service_ports_by_port():
    service = {"kind": "Service", "metadata": {"name": "web"},
               "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}
    patch = {"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"name": "https", "port": 443}]}}
    assert strategic_merge_patch(service, patch)["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": 9090}, {"name": "https", "port": 443},
    ]


def test_strategic_merges_status_conditions_by_type():
    target = pod()
    target["status"] = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"},
    ]}
    patch = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "web", "ready": True}]}}
    status = strategic_merge_patch(target, patch)["status"]
    assert status["phase"] == "Running"
    assert status["conditions"] == [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]
    assert status["containerStatuses"] == [{"name": "web", "ready": True}]


def test_strategic_merges_owner_references_by_uid():
    target = pod()
    target["metadata"]["ownerReferences"] = [{"uid": "1", "kind": "ReplicaSet", "name": "rs"}]
    patch = {"metadata": {"ownerReferences": [{"uid": "1", "controller": True},
                                              {"uid": "2", "kind": "X", "name": "x"}]}}
    assert strategic_merge_patch(target, patch)["metadata"]["ownerReferences"] == [
        {"uid": "1", "kind": "ReplicaSet", "name": "rs", "controller": True}, {"uid": "2", "kind": "X", "name": "x"},
    ]


def test_strategic_finalizers_merge_as_a_set_and_delete_from_primitive_list():
    target = pod()
    target["metadata"]["finalizers"] = ["a", "b"]
    added = strategic_merge_patch(target, {"metadata": {"finalizers": ["b", "c"]}})
    assert added["metadata"]["finalizers"] == ["a", "b", "c"]
    removed = strategic_merge_patch(added, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a", "zzz"]}})
    assert removed["metadata"]["finalizers"] == ["b", "c"]
    reordered = strategic_merge_patch(added, {"metadata": {"$setElementOrder/finalizers": ["c", "b", "a"]}})
    assert reordered["metadata"]["finalizers"] == ["c", "b", "a"]


def test_strategic_replaces_lists_without_merge_key():
    target = pod([{"name": "web", "image": "nginx", "args": ["a", "b"]}])
    result = strategic_merge_patch(target, {"spec": {"containers": [{"name": "web", "args": ["c"]}]}})
    assert result["spec"]["containers"][0]["args"] == ["c"]


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": ["not-a-map"]}},
        {"spec": {"containers": [{"$patch": "delete"}]}},
        {"spec": {"$patch": "explode"}},
        {"spec": {"$setElementOrder/containers": {"name": "web"}}},
        {"spec": {"volumes": [{"name": "v", "$retainKeys": "name"}]}},
        {"metadata": {"finalizers": [{"$patch": "delete"}]}},
    ],
)
def test_strategic_rejects_malformed_patches(patch):
    with pytest.raises(PatchError):
        strategic_merge_patch(pod(), patch)


def test_strategic_leaves_inputs_alone():
    target = pod(volumes=[{"name": "data", "emptyDir": {}}])
    patch = {"spec": {"$setElementOrder/containers": [{"name": "web"}],
                      "containers": [{"name": "web", "image": "nginx:1.26"}, {"name": "b", "image": "busybox"}],
                      "volumes": [{"$retainKeys": ["name", "hostPath"], "name": "data", "hostPath": {"path": "/x"}}]}}
    target_before, patch_before = copy.deepcopy(target), copy.deepcopy(patch)
    result = strategic_merge_patch(target, patch)
    result["spec"]["containers"][1]["image"] = "changed"
    result["metadata"]["labels"]["changed"] = "yes"
    assert (target, patch) == (target_before, patch_before)


# --- Strategic merge patch: what upstream `kubectl apply` (client-side) sends ---------------------------


def last_applied(obj):
    return json.dumps(obj, separators=(",", ":"), sort_keys=True) + "\n"


def test_kubectl_apply_changed_image_and_removed_label_on_a_pod():
    old_config = pod(labels={"app": "web", "tier": "fe"})
    new_config = pod([{"name": "web", "image": "nginx:1.26"}])
    live = copy.deepcopy(old_config)
    live["metadata"].update(uid="u1", resourceVersion="7",
                            annotations={"kubectl.kubernetes.io/last-applied-configuration": last_applied(old_config)})
    live["spec"].update(restartPolicy="Always", nodeName="node-1")
    live["spec"]["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    live["status"] = {"phase": "Running"}
    # the body kubectl 1.30 sends (CreateThreeWayMergePatch)
    patch = {
        "metadata": {
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": last_applied(new_config)},
            "labels": {"tier": None},
        },
        "spec": {"$setElementOrder/containers": [{"name": "web"}],
                 "containers": [{"image": "nginx:1.26", "name": "web"}]},
    }
    result = strategic_merge_patch(live, patch)
    assert result["metadata"]["labels"] == {"app": "web"}
    assert result["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/last-applied-configuration": last_applied(new_config),
    }
    assert result["metadata"]["uid"] == "u1"
    assert result["spec"]["containers"] == [{"name": "web", "image": "nginx:1.26", "imagePullPolicy": "IfNotPresent"}]
    assert result["spec"]["nodeName"] == "node-1"
    assert result["status"] == {"phase": "Running"}


def test_kubectl_apply_changed_image_and_removed_container_on_a_deployment():
    live = deployment()
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    patch = {
        "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}\n"}},
        "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"image": "nginx:1.26", "name": "web"}, {"$patch": "delete", "name": "sidecar"}],
        }}},
    }
    result = strategic_merge_patch(live, patch)
    assert result["spec"]["template"]["spec"]["containers"] == [
        {"name": "web", "image": "nginx:1.26", "ports": [{"containerPort": 80}]},
    ]
    assert result["spec"]["replicas"] == 2


# --- Server-side apply ----------------------------------------------------------------------------------


def test_ssa_create_returns_the_applied_object_with_an_apply_entry():
    applied = deployment()
    applied["status"] = {"replicas": 9}
    applied["metadata"]["finalizers"] = ["example.com/guard"]
    applied["metadata"]["annotations"] = {"note": None}
    result = server_side_apply(None, applied, "kubectl", False, NOW)
    expected = deployment()
    expected["metadata"]["finalizers"] = ["example.com/guard"]
    expected["metadata"]["annotations"] = {}
    assert {key: value for key, value in result.items() if key != "metadata"} == {
        key: value for key, value in expected.items() if key != "metadata"
    }
    assert result["metadata"]["labels"] == {"app": "web"}
    assert result["metadata"]["managedFields"] == [{
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "apps/v1",
        "time": NOW,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {
                "f:annotations": {},
                "f:finalizers": {"v:\"example.com/guard\"": {}},
                "f:labels": {"f:app": {}},
            },
            "f:spec": {
                "f:replicas": {},
                "f:selector": {"f:matchLabels": {"f:app": {}}},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                        ".": {},
                        "f:image": {},
                        "f:name": {},
                        "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}},
                    }}},
                },
            },
        },
    }]
    assert applied["status"] == {"replicas": 9}  # input untouched


def test_ssa_never_tracks_identity_bookkeeping_or_status():
    applied = pod()
    applied["metadata"].update(uid="fake", resourceVersion="1", generation=3, creationTimestamp=NOW,
                               managedFields=[{"manager": "liar"}])
    applied["status"] = {"phase": "Running"}
    result = server_side_apply(None, applied, "kubectl", False, NOW)
    fields = result["metadata"]["managedFields"][0]["fieldsV1"]
    assert set(fields) == {"f:metadata", "f:spec"}
    assert set(fields["f:metadata"]) == {"f:labels"}
    assert [entry["manager"] for entry in result["metadata"]["managedFields"]] == ["kubectl"]
    assert "status" not in result


def stored(obj, uid="u1", resource_version="5"):
    """An object as the server keeps it: identity fields filled in."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid=uid, resourceVersion=resource_version, creationTimestamp=NOW)
    return obj


def test_ssa_reapply_with_a_removed_field_removes_it():
    first = pod([{"name": "web", "image": "nginx", "args": ["a"]}, {"name": "sidecar", "image": "busybox"}],
                labels={"app": "web", "tier": "fe"})
    live = stored(server_side_apply(None, first, "kubectl", False, NOW))
    live["status"] = {"phase": "Running"}
    second = pod([{"name": "web", "image": "nginx"}], labels={"app": "web"})
    result = server_side_apply(live, second, "kubectl", False, LATER)
    assert result["metadata"]["labels"] == {"app": "web"}
    assert result["spec"]["containers"] == [{"name": "web", "image": "nginx"}]
    assert result["status"] == {"phase": "Running"}
    assert (result["metadata"]["uid"], result["metadata"]["resourceVersion"]) == ("u1", "5")
    entry = managed(result, "kubectl", "Apply")
    assert entry["time"] == LATER
    assert entry["fieldsV1"]["f:spec"] == {"f:containers": {"k:{\"name\":\"web\"}": {
        ".": {}, "f:image": {}, "f:name": {},
    }}}


def test_ssa_removing_the_last_label_drops_the_labels_map():
    live = stored(server_side_apply(None, pod(labels={"app": "web"}), "kubectl", False, NOW))
    config = pod()
    del config["metadata"]["labels"]
    result = server_side_apply(live, config, "kubectl", False, LATER)
    assert "labels" not in result["metadata"]
    assert result["metadata"]["name"] == "web"


def test_ssa_keeps_a_removed_field_another_applier_also_owns():
    live = stored(server_side_apply(None, pod(labels={"app": "web", "tier": "fe"}), "kubectl", False, NOW))
    live = stored(server_side_apply(live, pod(labels={"tier": "fe"}), "other-applier", False, NOW))
    result = server_side_apply(live, pod(labels={"app": "web"}), "kubectl", False, LATER)
    assert result["metadata"]["labels"] == {"app": "web", "tier": "fe"}
    assert managed(result, "other-applier", "Apply")["fieldsV1"]["f:metadata"] == {"f:labels": {"f:tier": {}}}


def test_ssa_keeps_a_removed_field_an_ordinary_write_changed_since():
    live = stored(server_side_apply(None, pod(labels={"app": "web", "tier": "fe"}), "kubectl", False, NOW))
    live = record_update(live, strategic_merge_patch(live, {"metadata": {"labels": {"tier": "be"}}}), "editor", NOW)
    result = server_side_apply(live, pod(labels={"app": "web"}), "kubectl", False, LATER)
    assert result["metadata"]["labels"] == {"app": "web", "tier": "be"}


def test_ssa_same_value_from_two_managers_is_shared_not_a_conflict():
    live = stored(server_side_apply(None, deployment(replicas=3), "alice", False, NOW))
    result = server_side_apply(live, deployment(replicas=3), "bob", False, LATER)
    for manager in ("alice", "bob"):
        assert "f:replicas" in managed(result, manager, "Apply")["fieldsV1"]["f:spec"]


def test_ssa_two_managers_conflict():
    live = stored(server_side_apply(None, deployment(replicas=2), "alice", False, NOW))
    live_before = copy.deepcopy(live)
    with pytest.raises(ApplyConflict) as raised:
        server_side_apply(live, deployment(image="nginx:1.26", replicas=5), "bob", False, LATER)
    assert raised.value.conflicts == [
        ("alice", ".spec.replicas"),
        ("alice", '.spec.template.spec.containers[name="web"].image'),
    ]
    assert "Apply failed with 2 conflicts" in str(raised.value)
    assert 'conflict with "alice": .spec.replicas' in str(raised.value)
    assert isinstance(raised.value, ValueError)
    assert live == live_before


def test_ssa_force_moves_ownership():
    live = stored(server_side_apply(None, deployment(replicas=2), "alice", False, NOW))
    bob_config = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}}
    result = server_side_apply(live, bob_config, "bob", True, LATER)
    assert result["spec"]["replicas"] == 5
    assert result["spec"]["template"] == deployment()["spec"]["template"]
    assert "f:replicas" not in managed(result, "alice", "Apply")["fieldsV1"]["f:spec"]
    assert managed(result, "bob", "Apply")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    # alice no longer owns replicas: re-applying without it leaves bob's value alone
    alice_config = deployment()
    del alice_config["spec"]["replicas"]
    after = server_side_apply(stored(result), alice_config, "alice", False, LATER)
    assert after["spec"]["replicas"] == 5


def test_ssa_force_drops_an_entry_left_with_nothing():
    live = stored(server_side_apply(None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team", "labels": {"owner": "alice"}}}, "alice", False, NOW))
    result = server_side_apply(live, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "team", "labels": {"owner": "bob"}}}, "bob", True, LATER)
    assert [entry["manager"] for entry in result["metadata"]["managedFields"]] == ["bob"]
    assert result["metadata"]["labels"] == {"owner": "bob"}


def test_ssa_update_managers_do_not_conflict_and_lose_what_apply_changes():
    live = stored(server_side_apply(None, deployment(replicas=2), "kubectl", False, NOW))
    scaled = record_update(live, strategic_merge_patch(live, {"spec": {"replicas": 7}}), "kubectl-scale", NOW)
    assert managed(scaled, "kubectl-scale", "Update")["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in managed(scaled, "kubectl", "Apply")["fieldsV1"]["f:spec"]
    result = server_side_apply(stored(scaled), deployment(replicas=3), "kubectl", False, LATER)
    assert result["spec"]["replicas"] == 3
    assert managed(result, "kubectl-scale", "Update") is None
    assert "f:replicas" in managed(result, "kubectl", "Apply")["fieldsV1"]["f:spec"]


def test_ssa_merges_keyed_lists_with_other_managers_items():
    live = stored(server_side_apply(None, pod(), "kubectl", False, NOW))
    proxy = {"name": "proxy", "image": "envoy"}
    injected = json_patch(live, [{"op": "add", "path": "/spec/containers/-", "value": proxy}])
    live = record_update(live, injected, "injector", NOW)
    result = server_side_apply(live, pod([{"name": "web", "image": "nginx:1.26"}]), "kubectl", False, LATER)
    assert result["spec"]["containers"] == [{"name": "web", "image": "nginx:1.26"}, {"name": "proxy", "image": "envoy"}]


def test_ssa_finalizers_are_set_items():
    applied = pod()
    applied["metadata"]["finalizers"] = ["a", "b"]
    live = stored(server_side_apply(None, applied, "kubectl", False, NOW))
    live["metadata"]["finalizers"].append("c")  # someone else's, written without tracking
    applied["metadata"]["finalizers"] = ["a"]
    result = server_side_apply(live, applied, "kubectl", False, LATER)
    assert result["metadata"]["finalizers"] == ["a", "c"]
    assert managed(result, "kubectl", "Apply")["fieldsV1"]["f:metadata"]["f:finalizers"] == {"v:\"a\"": {}}


def test_ssa_ignores_applied_status_on_the_main_resource():
    live = stored(server_side_apply(None, pod(), "kubectl", False, NOW))
    live["status"] = {"phase": "Running"}
    applied = pod()
    applied["status"] = {"phase": "Failed"}
    result = server_side_apply(live, applied, "kubectl", False, LATER)
    assert result["status"] == {"phase": "Running"}
    assert "f:status" not in managed(result, "kubectl", "Apply")["fieldsV1"]


def test_ssa_rejects_patch_directives():
    with pytest.raises(PatchError):
        server_side_apply(None, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "$patch": "delete"}},
                          "kubectl", False, NOW)


def test_ssa_leaves_inputs_alone():
    live = stored(server_side_apply(None, pod(labels={"app": "web", "tier": "fe"}), "kubectl", False, NOW))
    applied = pod([{"name": "web", "image": "nginx:1.26"}])
    live_before, applied_before = copy.deepcopy(live), copy.deepcopy(applied)
    result = server_side_apply(live, applied, "kubectl", False, LATER)
    result["spec"]["containers"][0]["image"] = "mutated"
    result["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"] = {}
    assert (live, applied) == (live_before, applied_before)


# --- record_update --------------------------------------------------------------------------------------


def test_record_update_on_create_owns_every_field_but_identity():
    created = stored(pod())
    result = record_update(None, created, "kube-controller-manager", NOW)
    assert result["metadata"]["managedFields"] == [{
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": NOW,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}},
        },
    }]
    assert "managedFields" not in created["metadata"]


def test_record_update_moves_changed_fields_and_forgets_removed_ones():
    live = stored(server_side_apply(None, pod(labels={"app": "web", "tier": "fe"}), "kubectl", False, NOW))
    after = copy.deepcopy(live)
    after["metadata"]["labels"] = {"app": "web"}
    after["spec"]["containers"][0]["image"] = "nginx:1.26"
    after["metadata"]["managedFields"] = []  # what a client sends back is not trusted
    result = record_update(live, after, "kubectl-edit", LATER)
    apply_fields = managed(result, "kubectl", "Apply")["fieldsV1"]
    assert apply_fields["f:metadata"] == {"f:labels": {"f:app": {}}}
    assert apply_fields["f:spec"] == {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:name": {}}}}
    edit = managed(result, "kubectl-edit", "Update")
    assert edit["time"] == LATER
    assert edit["fieldsV1"] == {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}


def test_record_update_without_changes_adds_no_entry():
    live = stored(server_side_apply(None, pod(), "kubectl", False, NOW))
    bumped = copy.deepcopy(live)
    bumped["metadata"].update(resourceVersion="6", generation=2)
    result = record_update(live, bumped, "someone", LATER)
    assert result["metadata"]["managedFields"] == live["metadata"]["managedFields"]


def test_record_update_tracks_status_writes():
    live = stored(server_side_apply(None, pod(), "kubectl", False, NOW))
    after = strategic_merge_patch(live, {"status": {"phase": "Running",
                                                    "conditions": [{"type": "Ready", "status": "True"}]}})
    result = record_update(live, after, "kubelet", LATER)
    assert managed(result, "kubelet", "Update")["fieldsV1"] == {"f:status": {
        "f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}},
        "f:phase": {},
    }}
    assert managed(result, "kubectl", "Apply") == managed(live, "kubectl", "Apply")


def test_record_update_then_apply_conflict_free_and_update_entry_kept_for_untouched_fields():
    live = stored(server_side_apply(None, pod(), "kubectl", False, NOW))
    labelled = record_update(live, strategic_merge_patch(live, {"metadata": {"labels": {"team": "a"}}}),
                             "kubectl-label", NOW)
    result = server_side_apply(stored(labelled), pod([{"name": "web", "image": "nginx:1.26"}]), "kubectl", False,
                               LATER)
    assert result["metadata"]["labels"] == {"app": "web", "team": "a"}
    assert managed(result, "kubectl-label", "Update")["fieldsV1"] == {"f:metadata": {"f:labels": {"f:team": {}}}}
