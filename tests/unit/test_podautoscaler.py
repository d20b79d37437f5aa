"""The HPA controller's sync against a fake API and a fake metrics source, and the ``get hpa`` columns."""

from __future__ import annotations

import copy
import itertools
from datetime import UTC, datetime

import pytest

from cli.session import CLIError
from cli.verbs.autoscale import hpa_manifest
from daemons.api.errors import NotFound
from daemons.api.resources import require, resolve
from daemons.api.tables import table
from daemons.api.usage import Usage
from daemons.controllers.context import ControllerContext
from daemons.controllers.informers import InformerFactory
from daemons.controllers.podautoscaler import HorizontalPodAutoscalingController
from daemons.controllers.replica_calculator import MetricError

pytestmark = pytest.mark.unit

REVISIONS = itertools.count(100)
NOW = 1_800_000_000.0
LONG_AGO = "2020-01-01T00:00:00Z"


def stamp(obj):
    obj["metadata"]["resourceVersion"] = str(next(REVISIONS))
    return obj


def hpa(metrics=None, minimum=1, maximum=6, behavior=None, status=None):
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": minimum, "maxReplicas": maximum,
            "metrics": metrics or [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}
    if behavior:
        spec["behavior"] = behavior
    obj = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "web", "namespace": "ns", "uid": "uid-hpa", "generation": 1}, "spec": spec}
    if status:
        obj["status"] = status
    return stamp(obj)


def pod(name, cpu="200m", labels=None):
    return stamp({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                               "labels": {"app": "web"} if labels is None else labels},
                  "spec": {"containers": [{"name": "app", "image": "busybox",
                                           "resources": {"requests": {"cpu": cpu}} if cpu else {}}]},
                  "status": {"phase": "Running", "startTime": LONG_AGO,
                             "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": LONG_AGO}]}})


class FakeApi:
    """A Deployment's scale subresource, the HPA's status writes, and the events recorded."""

    def __init__(self, replicas=1, selector="app=web"):
        self.replicas = replicas
        self.selector = selector
        self.missing = False
        self.statuses: list[dict] = []
        self.events: list[tuple[str, str, str]] = []
        self.scaled: list[int] = []

    def get(self, resource, name, namespace=None, subresource=None):
        if resource.kind == "Event":
            raise NotFound("no such event")
        assert (resource.kind, name, namespace, subresource) == ("Deployment", "web", "ns", "scale")
        if self.missing:
            raise NotFound('deployments.apps "web" not found')
        return {"kind": "Scale", "spec": {"replicas": self.replicas},
                "status": {"replicas": self.replicas, "selector": self.selector}}

    def patch(self, resource, name, body, namespace=None, subresource=None, **_):
        assert (resource.kind, subresource) == ("Deployment", "scale")
        self.replicas = body["spec"]["replicas"]
        self.scaled.append(self.replicas)
        return {}

    def update_status(self, resource, body):
        self.statuses.append(copy.deepcopy(body["status"]))
        return stamp(copy.deepcopy(body))

    def create(self, resource, body, namespace=None, params=None):
        self.events.append((body["type"], body["reason"], body["message"]))
        return body


class Clock:
    def __init__(self):
        self.now = NOW

    def __call__(self):
        return self.now


@pytest.fixture
def api():
    return FakeApi()


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def usage():
    return {}


def make(api, usage, clock, prometheus_down=False):
    def metrics(namespace):
        if prometheus_down:
            raise MetricError("cannot reach Prometheus at http://127.0.0.1:9090")
        return {key: value for key, value in usage.items() if key[0] == namespace}

    context = ControllerContext(api, InformerFactory(api), workers=1)
    return HorizontalPodAutoscalingController(context, metrics=metrics, clock=clock)


def feed(informer, event_type, obj):
    informer.handle_event({"type": event_type, "object": obj})


def conditions(status):
    return {condition["type"]: (condition["status"], condition["reason"]) for condition in status["conditions"]}


def test_cpu_above_target_scales_up_and_reports_it(api, usage, clock):
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a"))
    feed(controller.pods, "ADDED", pod("other", labels={"app": "db"}))
    usage[("ns", "a")] = {"app": Usage(cpu=0.3, memory=1e6)}  # 150% of 200m against 50%: 3 replicas
    feed(controller.hpas, "ADDED", hpa())
    controller.sync("ns/web")
    assert api.scaled == [3]
    assert ("Normal", "SuccessfulRescale",
            "New size: 3; reason: cpu resource utilization (percentage of request) above target") in api.events
    status = api.statuses[-1]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (1, 3)
    assert status["currentMetrics"] == [{"type": "Resource", "resource": {
        "name": "cpu", "current": {"averageUtilization": 150, "averageValue": "300m"}}}]
    assert status["lastScaleTime"] == "2027-01-15T08:00:00Z"
    assert conditions(status) == {"AbleToScale": ("True", "SucceededRescale"),
                                  "ScalingActive": ("True", "ValidMetricFound"),
                                  "ScalingLimited": ("False", "DesiredWithinRange")}


def test_an_unchanged_situation_writes_no_status_and_no_scale(api, usage, clock):
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a"))
    usage[("ns", "a")] = {"app": Usage(cpu=0.1, memory=1e6)}  # exactly on target
    feed(controller.hpas, "ADDED", hpa())
    controller.sync("ns/web")
    written = api.statuses[-1]
    assert (api.scaled, written["desiredReplicas"]) == ([], 1)
    feed(controller.hpas, "MODIFIED", hpa(status=written))
    controller.sync("ns/web")
    assert len(api.statuses) == 1


def test_the_scale_up_policy_limits_the_step(api, usage, clock):
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a"))
    usage[("ns", "a")] = {"app": Usage(cpu=1.0, memory=1e6)}  # 500% -> 10 replicas wanted
    feed(controller.hpas, "ADDED", hpa(maximum=10, behavior={"scaleUp": {"policies": [
        {"type": "Pods", "value": 1, "periodSeconds": 15}]}}))
    controller.sync("ns/web")
    assert api.scaled == [2]
    assert conditions(api.statuses[-1])["ScalingLimited"] == ("True", "ScaleUpLimit")
    clock.now += 5
    controller.sync("ns/web")
    assert api.scaled == [2]
    clock.now += 11
    controller.sync("ns/web")
    assert api.scaled == [2, 3]


def test_without_metrics_nothing_scales_and_the_condition_and_event_say_why(api, usage, clock):
    controller = make(api, usage, clock, prometheus_down=True)
    feed(controller.pods, "ADDED", pod("a"))
    feed(controller.hpas, "ADDED", hpa())
    controller.sync("ns/web")
    assert api.scaled == []
    status = api.statuses[-1]
    assert conditions(status)["ScalingActive"] == ("False", "FailedGetResourceMetric")
    assert "cannot reach Prometheus" in next(c["message"] for c in status["conditions"]
                                             if c["type"] == "ScalingActive")
    assert any(event[:2] == ("Warning", "FailedGetResourceMetric") for event in api.events)


def test_a_missing_request_is_reported_and_does_not_scale(api, usage, clock):
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a", cpu=None))
    usage[("ns", "a")] = {"app": Usage(cpu=1.0, memory=1e6)}
    feed(controller.hpas, "ADDED", hpa())
    controller.sync("ns/web")
    assert api.scaled == []
    message = next(c["message"] for c in api.statuses[-1]["conditions"] if c["type"] == "ScalingActive")
    assert "missing request for cpu" in message


def test_a_missing_target_is_FailedGetScale(api, usage, clock):
    api.missing = True
    controller = make(api, usage, clock)
    feed(controller.hpas, "ADDED", hpa())
    controller.sync("ns/web")
    assert conditions(api.statuses[-1])["AbleToScale"] == ("False", "FailedGetScale")
    assert any(event[:2] == ("Warning", "FailedGetScale") for event in api.events)


def test_replicas_outside_the_bounds_are_brought_inside_without_metrics(api, usage, clock):
    api.replicas = 9
    controller = make(api, usage, clock, prometheus_down=True)
    feed(controller.hpas, "ADDED", hpa(maximum=4))
    controller.sync("ns/web")
    assert api.scaled == [4]
    assert ("Normal", "SuccessfulRescale", "New size: 4; reason: Current number of replicas above "
            "Spec.MaxReplicas") in api.events


def test_scale_down_waits_for_the_stabilization_window(api, usage, clock):
    api.replicas = 4
    controller = make(api, usage, clock)
    for name in "abcd":
        feed(controller.pods, "ADDED", pod(name))
        usage[("ns", name)] = {"app": Usage(cpu=0.3, memory=1e6)}  # 150%: wants 12, max 6
    feed(controller.hpas, "ADDED", hpa())
    controller.sync("ns/web")
    assert api.scaled == [6]
    for name in "abcd":
        usage[("ns", name)] = {"app": Usage(cpu=0.01, memory=1e6)}  # now idle: wants 1
    clock.now += 60
    controller.sync("ns/web")
    assert api.scaled == [6]  # the 12 of a minute ago is within the 300 s window
    assert conditions(api.statuses[-1])["AbleToScale"] == ("True", "ScaleDownStabilized")
    clock.now += 301
    controller.sync("ns/web")
    assert api.scaled == [6, 1]


def test_an_unsupported_metric_type_is_reported(api, usage, clock):
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a"))
    feed(controller.hpas, "ADDED", hpa(metrics=[{"type": "Pods", "pods": {
        "metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "10"}}}]))
    controller.sync("ns/web")
    assert conditions(api.statuses[-1])["ScalingActive"] == ("False", "InvalidMetricSourceType")


MEMORY = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                       "averageValue": "100Mi"}}}
CPU = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}


def test_a_failing_metric_is_tolerated_while_another_scales_up(api, usage, clock):
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a", cpu=None))  # no CPU request: the CPU metric cannot be computed
    usage[("ns", "a")] = {"app": Usage(cpu=0.5, memory=250 * 2**20)}
    feed(controller.hpas, "ADDED", hpa(metrics=[CPU, MEMORY]))
    controller.sync("ns/web")
    assert api.scaled == [3]
    status = api.statuses[-1]
    assert status["currentMetrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "current": {}}},
        {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "250Mi"}}}]
    assert ("Normal", "SuccessfulRescale", "New size: 3; reason: memory resource above target") in api.events
    assert any(event[:2] == ("Warning", "FailedGetResourceMetric") for event in api.events)


def test_a_failing_metric_blocks_a_scale_down(api, usage, clock):
    api.replicas = 3
    controller = make(api, usage, clock)
    feed(controller.pods, "ADDED", pod("a", cpu=None))
    usage[("ns", "a")] = {"app": Usage(cpu=0.5, memory=10 * 2**20)}  # memory alone would scale down
    feed(controller.hpas, "ADDED", hpa(metrics=[CPU, MEMORY]))
    controller.sync("ns/web")
    assert api.scaled == []
    assert conditions(api.statuses[-1])["ScalingActive"] == ("False", "FailedGetResourceMetric")


def test_own_status_writes_do_not_requeue_but_spec_changes_do(api, usage, clock):
    controller = make(api, usage, clock)
    first = hpa()
    feed(controller.hpas, "ADDED", first)
    assert controller.controller.process_next(timeout=0) is True
    feed(controller.hpas, "MODIFIED", stamp({**copy.deepcopy(first), "status": {"desiredReplicas": 1}}))
    assert len(controller.controller.queue) == 0
    feed(controller.hpas, "MODIFIED", hpa(maximum=8))
    assert len(controller.controller.queue) == 1


# --- the get hpa table ------------------------------------------------------------------------------


def cells(obj):
    return table(resolve("hpa"), [obj], "1", now=datetime(2027, 1, 15, 8, 0, tzinfo=UTC))["rows"][0]["cells"]


def test_get_hpa_before_metrics_shows_unknown():
    obj = hpa(metrics=[{"type": "Resource", "resource": {"name": "cpu", "target": {
        "type": "Utilization", "averageUtilization": 50}}}, {"type": "Resource", "resource": {
            "name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}])
    assert cells(obj)[:6] == ["web", "Deployment/web", "cpu: <unknown>/50%, memory: <unknown>/100Mi", "1", 6, 0]


def test_get_hpa_shows_current_against_target_and_counts_extra_metrics():
    metric = {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                        "averageUtilization": 50}}}
    memory = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                           "averageValue": "100Mi"}}}
    obj = hpa(metrics=[metric, memory, metric], status={"currentReplicas": 3, "desiredReplicas": 3,
                                                        "currentMetrics": [
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 73}}},
        {"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "10Mi"}}}]})
    assert cells(obj)[2:6] == ["cpu: 73%/50%, memory: 10Mi/100Mi + 1 more...", "1", 6, 3]


# --- kubectl autoscale ------------------------------------------------------------------------------


def test_autoscale_builds_the_hpa_upstream_kubectl_posts():
    deployments = require("apps/v1", "Deployment")
    assert hpa_manifest(deployments, "web", 4, 1, 50) == {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 1, "maxReplicas": 4, "metrics": [{"type": "Resource", "resource": {
                     "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]}}
    assert hpa_manifest(deployments, "web", 3, hpa_name="web-hpa")["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxReplicas": 3}


@pytest.mark.parametrize(("maximum", "minimum", "message"), [
    (-1, None, "--max=MAXPODS is required"),
    (2, 3, "--max=MAXPODS must be larger or equal to --min=MINPODS"),
])
def test_autoscale_refuses_bad_bounds(maximum, minimum, message):
    with pytest.raises(CLIError, match=message):
        hpa_manifest(require("apps/v1", "Deployment"), "web", maximum, minimum)
