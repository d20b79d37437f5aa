"""Nodes: which pods a drain evicts or refuses, cordon's outcomes, ``--timeout`` durations, and the pod CIDR the
kubelet reads from the overlay's subnet file."""

from __future__ import annotations

from typing import Any

import pytest

from cli.session import CLIError
from cli.verbs.cordon import schedulability_outcome
from cli.verbs.drain import (
    DAEMONSET_FATAL,
    LOCAL_STORAGE_FATAL,
    UNMANAGED_FATAL,
    DrainRules,
    Verdict,
    aggregate,
    go_duration,
    is_gone,
    parse_duration,
    plan,
    verdict,
)
from daemons.kubelet.node import HostInfo, node_object, parse_subnet_env, pod_cidr_spec
from daemons.kubelet.settings import KubeletSettings, NodeConfig
from daemons.machinery.settings import parse_settings

pytestmark = pytest.mark.unit


def pod(name: str, owner: str | None = None, empty_dir: bool = False, phase: str = "Running",
        namespace: str = "shop", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u",
                                        "controller": True}]
    if annotations:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}
    if empty_dir:
        spec["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


# --- cordon -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "unschedulable", "expected"), [
    ({}, True, (True, "cordoned")),
    ({"unschedulable": True}, True, (False, "already cordoned")),
    ({"unschedulable": True}, False, (True, "uncordoned")),
    ({"unschedulable": False}, False, (False, "already uncordoned")),
    ({}, False, (False, "already uncordoned")),
])
def test_cordon_patches_only_when_the_node_differs(spec, unschedulable, expected):
    assert schedulability_outcome({"metadata": {"name": "n1"}, "spec": spec}, unschedulable) == expected


# --- which pods a drain takes -------------------------------------------------------------------------

def test_pods_managed_by_a_controller_are_evicted_without_flags():
    assert verdict(pod("web-1", "ReplicaSet"), DrainRules()) == Verdict(True)


def test_a_pod_without_a_controller_blocks_the_drain_unless_forced():
    assert verdict(pod("bare"), DrainRules()) == Verdict(False, UNMANAGED_FATAL, refused=True)
    forced = verdict(pod("bare"), DrainRules(force=True))
    assert forced.delete and not forced.refused and forced.message == "deleting Pods that declare no controller"


def test_an_owner_that_is_not_the_controller_does_not_count():
    bare = pod("bare")
    bare["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"}]
    assert verdict(bare, DrainRules()).refused


def test_emptydir_data_blocks_the_drain_unless_allowed():
    assert verdict(pod("cache", "ReplicaSet", empty_dir=True), DrainRules()) == \
        Verdict(False, LOCAL_STORAGE_FATAL, refused=True)
    assert verdict(pod("cache", "ReplicaSet", empty_dir=True), DrainRules(delete_emptydir_data=True)).delete


def test_daemonset_pods_block_the_drain_or_are_left_in_place():
    assert verdict(pod("proxy", "DaemonSet"), DrainRules(force=True)) == Verdict(False, DAEMONSET_FATAL, refused=True)
    ignored = verdict(pod("proxy", "DaemonSet", empty_dir=True), DrainRules(ignore_daemonsets=True))
    assert ignored == Verdict(False, "ignoring DaemonSet-managed Pods")


def test_mirror_pods_are_left_silently():
    mirror = pod("etcd-n1", annotations={"kubernetes.io/config.mirror": "abc"})
    assert verdict(mirror, DrainRules()) == Verdict(False)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_go_whatever_they_are(phase):
    for finished in (pod("done", phase=phase), pod("done", "DaemonSet", phase=phase),
                     pod("done", empty_dir=True, phase=phase)):
        assert verdict(finished, DrainRules()) == Verdict(True)


def test_the_plan_lists_refusals_per_reason_in_order_and_evicts_the_rest():
    pods = [pod("a"), pod("b", "ReplicaSet", empty_dir=True), pod("c", "ReplicaSet"), pod("d", namespace="ops"),
            pod("e", "DaemonSet")]
    result = plan(pods, DrainRules())
    assert result.refusals == [
        f"{UNMANAGED_FATAL}: shop/a, ops/d",
        f"{LOCAL_STORAGE_FATAL}: shop/b",
        f"{DAEMONSET_FATAL}: shop/e",
    ]
    assert [p["metadata"]["name"] for p in result.evict] == ["c"]


def test_the_plan_warns_about_what_the_flags_let_go():
    pods = [pod("a"), pod("b", "ReplicaSet", empty_dir=True), pod("e", "DaemonSet"), pod("f", empty_dir=True)]
    result = plan(pods, DrainRules(force=True, ignore_daemonsets=True, delete_emptydir_data=True))
    assert result.refusals == []
    assert [p["metadata"]["name"] for p in result.evict] == ["a", "b", "f"]
    # As kubectl: the controller check runs last and replaces the emptyDir warning.
    assert result.warnings == ["deleting Pods that declare no controller: shop/a, shop/f",
                               "ignoring DaemonSet-managed Pods: shop/e"]


def test_errors_aggregate_as_kubectl_prints_them():
    assert aggregate(["one"]) == "one"
    assert aggregate(["one", "two"]) == "[one, two]"


# --- waiting --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0), ("0s", 0), ("5m", 300), ("90s", 90), ("1h30m", 5400), ("1.5s", 1.5), ("500ms", 0.5),
])
def test_timeouts_take_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "5x", "m", "5m junk"])
def test_bad_timeouts_are_refused(text):
    with pytest.raises(CLIError, match="--timeout"):
        parse_duration(text)


@pytest.mark.parametrize(("seconds", "text"), [(300, "5m0s"), (30, "30s"), (3600, "1h0m0s"), (1.5, "1.5s"),
                                               (0, "0s"), (3725, "1h2m5s")])
def test_durations_print_as_go_prints_them(seconds, text):
    assert go_duration(seconds) == text


def test_a_pod_is_gone_when_missing_or_replaced():
    assert is_gone(None, "uid-a")
    assert is_gone(pod("b"), "uid-a")
    assert not is_gone(pod("a"), "uid-a")


# --- the kubelet's pod CIDR -------------------------------------------------------------------------------

SUBNET_ENV = "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.3.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"


@pytest.mark.parametrize(("text", "cidr"), [
    (SUBNET_ENV, "10.244.3.0/24"), ('FLANNEL_SUBNET="10.244.7.1/24"\n', "10.244.7.0/24"),
    ("FLANNEL_NETWORK=10.244.0.0/16\n", None), ("", None), ("FLANNEL_SUBNET=garbage\n", None),
])
def test_pod_cidr_comes_from_flannels_subnet_file(text, cidr):
    assert parse_subnet_env(text) == cidr


def test_pod_cidr_is_patched_only_when_the_node_lacks_it():
    assert pod_cidr_spec({}, "10.244.3.0/24") == {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]}
    assert pod_cidr_spec({"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]}, "10.244.3.0/24") == {}
    assert pod_cidr_spec({"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]}, "10.244.4.0/24") == {
        "podCIDR": "10.244.4.0/24", "podCIDRs": ["10.244.4.0/24"]}
    assert pod_cidr_spec({"podCIDR": "10.244.3.0/24"}, None) == {}


def test_the_registered_node_carries_the_pod_cidr():
    info = HostInfo(hostname="vm1", cpus=2, memory_kib=1000, os_image="Debian", kernel_version="6.1",
                    architecture="amd64")
    config = NodeConfig(name="n1", roles=["control-plane"], taints=[{"key": "k", "effect": "NoSchedule"}])
    node = node_object(config, info, "10.244.3.0/24")
    assert node["spec"] == {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.244.3.0/24",
                            "podCIDRs": ["10.244.3.0/24"]}
    assert node["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] == ""
    assert node_object(NodeConfig(name="n1"), info)["spec"] == {}


def test_pod_cidr_file_setting():
    default = parse_settings(KubeletSettings, ["--node-config", "/etc/n.yaml"], environ={})
    assert default.pod_cidr_file == "/run/flannel/subnet.env"
    flagged = parse_settings(KubeletSettings, ["--node-config", "/etc/n.yaml", "--pod-cidr-file", "/tmp/s.env"],
                             environ={})
    assert flagged.pod_cidr_file == "/tmp/s.env"
