"""Upstream's defaulting: an object in, the defaulted object out; twice is once; what the user set stays."""

import copy
from collections.abc import Callable

import pytest

from daemons.api import defaults

pytestmark = pytest.mark.unit

Obj = dict


def defaulted(function: Callable[[Obj], None], obj: Obj) -> Obj:
    """``obj`` defaulted, after checking that defaulting the result again changes nothing."""
    once = copy.deepcopy(obj)
    function(once)
    twice = copy.deepcopy(once)
    function(twice)
    assert twice == once, "defaulting is not idempotent"
    return once


def container(**fields) -> Obj:
    return {"name": "app", "image": "nginx:1.25", **fields}


DEFAULTED_CONTAINER = {"name": "app", "image": "nginx:1.25", "imagePullPolicy": "IfNotPresent",
                       "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
DEFAULTED_POD_SPEC = {"containers": [DEFAULTED_CONTAINER], "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
                      "schedulerName": "default-scheduler", "securityContext": {},
                      "terminationGracePeriodSeconds": 30}


def test_pod_gets_upstream_spec_defaults():
    pod = {"metadata": {"name": "web"}, "spec": {"containers": [container()]}}
    assert defaulted(defaults.default_pod, pod) == {
        "metadata": {"name": "web"}, "spec": {**DEFAULTED_POD_SPEC, "enableServiceLinks": True}}


@pytest.mark.parametrize(("image", "policy"), [
    ("nginx", "Always"), ("nginx:latest", "Always"), ("registry:5000/team/nginx", "Always"),
    ("registry:5000/team/nginx:1.25", "IfNotPresent"), ("nginx@sha256:abc", "IfNotPresent"),
])
def test_image_pull_policy_follows_the_tag(image, policy):
    pod = defaulted(defaults.default_pod, {"spec": {"containers": [container(image=image)],
                                                    "initContainers": [container(name="init", image=image)]}})
    assert [c["imagePullPolicy"] for c in (*pod["spec"]["containers"], *pod["spec"]["initContainers"])] == \
        [policy, policy]


def test_container_ports_probes_and_env_are_defaulted():
    probe = {"httpGet": {"port": 80}}
    pod = defaulted(defaults.default_pod, {"spec": {"containers": [container(
        ports=[{"containerPort": 80}], livenessProbe=probe, readinessProbe={"exec": {"command": ["true"]}},
        env=[{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}])]}})
    app = pod["spec"]["containers"][0]
    assert app["ports"] == [{"containerPort": 80, "protocol": "TCP"}]
    assert app["livenessProbe"] == {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1,
                                    "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}
    assert app["readinessProbe"]["failureThreshold"] == 3
    assert app["env"][0]["valueFrom"]["fieldRef"] == {"fieldPath": "spec.nodeName", "apiVersion": "v1"}


def test_volumes_are_defaulted():
    volumes = [{"name": "scratch"}, {"name": "conf", "configMap": {"name": "c"}},
               {"name": "keys", "secret": {"secretName": "s", "defaultMode": 0o400}},
               {"name": "host", "hostPath": {"path": "/var"}}]
    pod = defaulted(defaults.default_pod, {"spec": {"containers": [container()], "volumes": volumes}})
    assert pod["spec"]["volumes"] == [
        {"name": "scratch", "emptyDir": {}}, {"name": "conf", "configMap": {"name": "c", "defaultMode": 420}},
        {"name": "keys", "secret": {"secretName": "s", "defaultMode": 0o400}},
        {"name": "host", "hostPath": {"path": "/var", "type": ""}}]


def test_pod_requests_default_to_limits_and_host_network_ports():
    pod = defaulted(defaults.default_pod, {"spec": {"hostNetwork": True, "containers": [container(
        resources={"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}},
        ports=[{"containerPort": 8080}])]}})
    app = pod["spec"]["containers"][0]
    assert app["resources"]["requests"] == {"cpu": "500m", "memory": "1Gi"}
    assert app["ports"] == [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]


def test_pod_keeps_what_the_user_set():
    spec = {"containers": [container(imagePullPolicy="Never", terminationMessagePath="/tmp/log",
                                     terminationMessagePolicy="FallbackToLogsOnError")],
            "restartPolicy": "Never", "dnsPolicy": "Default", "schedulerName": "mine",
            "securityContext": {"runAsUser": 1000}, "terminationGracePeriodSeconds": 0,
            "enableServiceLinks": False}
    assert defaulted(defaults.default_pod, {"spec": spec}) == {"spec": spec}


def test_pod_template_gets_pod_spec_defaults_but_no_pod_only_ones():
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container()]}}
    defaults.default_pod_template(template)
    assert template == {"metadata": {"labels": {"app": "web"}}, "spec": DEFAULTED_POD_SPEC}


def template() -> Obj:
    return {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [container()]}}


def test_service_defaults():
    service = {"spec": {"selector": {"app": "web"}, "ports": [{"port": 80}, {"port": 53, "protocol": "UDP",
                                                                            "targetPort": "dns"}]}}
    assert defaulted(defaults.default_service, service) == {"spec": {
        "selector": {"app": "web"}, "type": "ClusterIP", "sessionAffinity": "None",
        "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"],
        "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                  {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}}


def test_service_defaults_by_type():
    balancer = defaulted(defaults.default_service, {"spec": {"type": "LoadBalancer", "sessionAffinity": "ClientIP",
                                                             "ports": [{"port": 80}]}})["spec"]
    assert (balancer["externalTrafficPolicy"], balancer["allocateLoadBalancerNodePorts"]) == ("Cluster", True)
    assert balancer["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}
    external = defaulted(defaults.default_service, {"spec": {"type": "ExternalName", "externalName": "a.b"}})
    assert external == {"spec": {"type": "ExternalName", "externalName": "a.b", "sessionAffinity": "None"}}


def test_endpoints_and_endpoint_slice_ports():
    endpoints = defaulted(defaults.default_endpoints, {"subsets": [{"ports": [{"port": 80}]}]})
    assert endpoints == {"subsets": [{"ports": [{"port": 80, "protocol": "TCP"}]}]}
    slice_ = defaulted(defaults.default_endpoint_slice, {"ports": [{"port": 80}, {"name": "dns", "port": 53,
                                                                                  "protocol": "UDP"}]})
    assert slice_["ports"] == [{"port": 80, "name": "", "protocol": "TCP"},
                               {"name": "dns", "port": 53, "protocol": "UDP"}]


def test_namespace_defaults():
    namespace = defaulted(defaults.default_namespace, {"metadata": {"name": "team", "labels": {
        "kubernetes.io/metadata.name": "other", "tier": "x"}}})
    assert namespace == {"metadata": {"name": "team", "labels": {"kubernetes.io/metadata.name": "team", "tier": "x"}},
                         "spec": {"finalizers": ["kubernetes"]}}
    finalized = {"metadata": {"name": "t"}, "spec": {"finalizers": []}}
    assert defaulted(defaults.default_namespace, finalized)["spec"] == {"finalizers": []}


def test_secret_type():
    assert defaulted(defaults.default_secret, {"data": {}}) == {"data": {}, "type": "Opaque"}
    assert defaulted(defaults.default_secret, {"type": "kubernetes.io/tls"}) == {"type": "kubernetes.io/tls"}


def test_replica_set_defaults_replicas_and_template_only():
    replica_set = defaulted(defaults.default_replica_set, {"spec": {"template": template()}})
    assert replica_set == {"spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "web"}},
                                                                "spec": DEFAULTED_POD_SPEC}}}
    assert defaulted(defaults.default_replica_set, {"spec": {"replicas": 0}}) == {"spec": {"replicas": 0}}


def test_replication_controller_selector_and_labels_from_template():
    controller = defaulted(defaults.default_replication_controller, {"spec": {"template": template()}})
    assert controller["metadata"] == {"labels": {"app": "web"}}
    assert (controller["spec"]["selector"], controller["spec"]["replicas"]) == ({"app": "web"}, 1)
    kept = defaulted(defaults.default_replication_controller, {
        "metadata": {"labels": {"team": "a"}}, "spec": {"selector": {"app": "web", "v": "1"}, "replicas": 3,
                                                          "template": template()}})
    assert (kept["metadata"]["labels"], kept["spec"]["selector"], kept["spec"]["replicas"]) == \
        ({"team": "a"}, {"app": "web", "v": "1"}, 3)


def test_deployment_defaults():
    deployment = defaulted(defaults.default_deployment, {"spec": {"template": template()}})
    assert deployment == {"spec": {
        "replicas": 1, "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%",
                                                                               "maxSurge": "25%"}},
        "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600,
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": DEFAULTED_POD_SPEC}}}


def test_deployment_keeps_its_strategy():
    recreate = defaulted(defaults.default_deployment, {"spec": {"strategy": {"type": "Recreate"}}})
    assert recreate["spec"]["strategy"] == {"type": "Recreate"}
    partial = defaulted(defaults.default_deployment, {"spec": {"replicas": 0, "revisionHistoryLimit": 2,
                                                               "strategy": {"rollingUpdate": {"maxSurge": 0}}}})
    assert partial["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0,
                                                                                      "maxUnavailable": "25%"}}
    assert (partial["spec"]["replicas"], partial["spec"]["revisionHistoryLimit"]) == (0, 2)


def test_daemon_set_defaults():
    daemon_set = defaulted(defaults.default_daemon_set, {"spec": {"template": template()}})
    assert daemon_set["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert daemon_set["spec"]["revisionHistoryLimit"] == 10
    assert daemon_set["spec"]["template"]["spec"] == DEFAULTED_POD_SPEC
    on_delete = defaulted(defaults.default_daemon_set, {"spec": {"updateStrategy": {"type": "OnDelete"}}})
    assert on_delete["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_job_defaults():
    job_template = {**template(), "spec": {"containers": [container()], "restartPolicy": "Never"}}
    job = defaulted(defaults.default_job, {"spec": {"template": job_template}})
    assert job["metadata"] == {"labels": {"app": "web"}}
    assert {key: value for key, value in job["spec"].items() if key != "template"} == {
        "completions": 1, "parallelism": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": False,
        "podReplacementPolicy": "TerminatingOrFailed"}
    assert "manualSelector" not in job["spec"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["spec"]["securityContext"] == {}


def test_job_parallelism_without_completions_leaves_completions_unset():
    job = defaulted(defaults.default_job, {"metadata": {"labels": {"own": "x"}},
                                           "spec": {"parallelism": 3, "template": template()}})
    assert "completions" not in job["spec"] and job["spec"]["parallelism"] == 3
    assert job["metadata"]["labels"] == {"own": "x"}
    failing = defaulted(defaults.default_job, {"spec": {"podFailurePolicy": {"rules": []},
                                                        "backoffLimitPerIndex": 1}})
    assert (failing["spec"]["podReplacementPolicy"], failing["spec"]["backoffLimit"]) == ("Failed", 2147483647)


def test_cron_job_defaults():
    cron_job = defaulted(defaults.default_cron_job, {"spec": {"schedule": "* * * * *",
                                                              "jobTemplate": {"spec": {"template": template()}}}})
    assert cron_job["spec"] == {"schedule": "* * * * *", "concurrencyPolicy": "Allow", "suspend": False,
                                "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                                "jobTemplate": {"spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                                                      "spec": DEFAULTED_POD_SPEC}}}}
    kept = defaulted(defaults.default_cron_job, {"spec": {"concurrencyPolicy": "Forbid", "suspend": True,
                                                          "successfulJobsHistoryLimit": 0}})
    assert (kept["spec"]["concurrencyPolicy"], kept["spec"]["suspend"], kept["spec"]["successfulJobsHistoryLimit"]) \
        == ("Forbid", True, 0)


def test_horizontal_pod_autoscaler_defaults():
    hpa = defaulted(defaults.default_horizontal_pod_autoscaler, {"spec": {"maxReplicas": 5}})
    assert hpa == {"spec": {"maxReplicas": 5, "minReplicas": 1, "metrics": [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}}


def test_horizontal_pod_autoscaler_behavior_is_completed():
    hpa = defaulted(defaults.default_horizontal_pod_autoscaler, {"spec": {"minReplicas": 2, "maxReplicas": 5,
                                                                          "behavior": {"scaleDown": {
                                                                              "stabilizationWindowSeconds": 60}}}})
    assert hpa["spec"]["minReplicas"] == 2
    assert hpa["spec"]["behavior"] == {
        "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]}}
