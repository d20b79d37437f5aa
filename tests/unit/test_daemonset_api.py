"""The DaemonSet row: upstream's defaults and validation messages, kubectl's columns."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from daemons.api import tables
from daemons.api.kinds.daemonset import RESOURCE
from daemons.api.resources import resolve

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)


def manifest(**spec) -> dict:
    base = {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                         "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}}}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "default", "creationTimestamp": "2026-11-22T11:55:00Z"},
            "spec": {**base, **spec}}


def errors(obj: dict) -> list[str]:
    RESOURCE.defaults(obj)
    return [str(error) for error in RESOURCE.check(obj, None)]


def test_served_as_apps_v1_ds():
    assert resolve("ds") is RESOURCE and resolve("daemonsets.apps") is RESOURCE
    assert (RESOURCE.api_version, RESOURCE.categories, RESOURCE.subresources) == ("apps/v1", ("all",), ("status",))


def test_defaults_roll_one_node_at_a_time():
    obj = manifest()
    RESOURCE.defaults(obj)
    assert obj["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                             "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
    assert obj["spec"]["revisionHistoryLimit"] == 10
    assert RESOURCE.model.model_validate(obj).spec.template.spec.restart_policy == "Always"
    assert errors(obj) == []


@pytest.mark.parametrize(("spec", "message"), [
    ({"selector": {}}, "spec.selector: Invalid value: map[string]string{}: empty selector is invalid for daemonset"),
    ({"selector": {"matchLabels": {"app": "other"}}},
     'spec.template.metadata.labels: Invalid value: map[string]string{"app":"agent"}: `selector` does not match '
     "template `labels`"),
    ({"updateStrategy": {"type": "Recreate"}},
     'spec.updateStrategy.type: Unsupported value: "Recreate": supported values: "OnDelete", "RollingUpdate"'),
    ({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}},
     "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: 0: cannot be 0 when maxSurge is 0"),
    ({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": "10%"}}},
     'spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: "10%": may not be set when maxUnavailable is '
     "non-zero"),
    ({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "120%"}}},
     'spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: "120%": must not be greater than 100%'),
    ({"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": -1}}},
     "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: -1: must be greater than or equal to 0"),
    ({"minReadySeconds": -1}, "spec.minReadySeconds: Invalid value: -1: must be greater than or equal to 0"),
])
def test_invalid_specs_in_upstream_words(spec, message):
    assert errors(manifest(**spec)) == [message]


def test_template_must_restart_always_and_run_forever():
    obj = manifest()
    obj["spec"]["template"]["spec"].update(restartPolicy="Never", activeDeadlineSeconds=5)
    assert errors(obj) == [
        'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"',
        "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"]


def test_selector_is_immutable():
    current = manifest()
    changed = copy.deepcopy(current)
    changed["spec"]["selector"] = {"matchLabels": {"app": "agent", "tier": "node"}}
    assert [error.field for error in RESOURCE.check_update(changed, current)] == ["spec.selector"]
    assert RESOURCE.check_update(copy.deepcopy(current), current) == []


def test_columns_as_kubectl_prints_them():
    obj = manifest()
    obj["spec"]["template"]["spec"]["nodeSelector"] = {"role": "worker", "disk": "ssd"}
    obj["status"] = {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                     "updatedNumberScheduled": 1, "numberAvailable": 2}
    table = tables.table(RESOURCE, [obj], "7", NOW)
    assert [column["name"] for column in table["columnDefinitions"]] == [
        "Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Node Selector", "Age", "Containers",
        "Images", "Selector"]
    assert table["rows"][0]["cells"] == ["agent", 3, 3, 2, 1, 2, "disk=ssd,role=worker", "5m", "agent", "agent:1",
                                         "app=agent"]
    assert tables.table(RESOURCE, [manifest()], "7", NOW)["rows"][0]["cells"][1:7] == [0, 0, 0, 0, 0, "<none>"]
