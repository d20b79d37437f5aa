import pytest

from daemons.api.errors import Invalid
from daemons.api.resources import resolve
from daemons.apiserver.validation import validate

pytestmark = pytest.mark.unit

PODS = resolve("pods")


def pod(**spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec}}


def causes(resource, obj):
    with pytest.raises(Invalid) as raised:
        validate(resource, obj)
    return {cause["field"]: cause["message"] for cause in raised.value.causes}


def test_valid_pod_is_defaulted_and_unknown_fields_reported():
    obj, unknown = validate(PODS, pod(hostnameX="x"))
    assert obj["spec"]["restartPolicy"] == "Always"
    assert obj["spec"]["containers"][0]["name"] == "c"
    assert unknown == ["spec.hostnameX"]


def test_each_bad_field_is_named():
    bad = pod(restartPolicy="Sometimes")
    bad["metadata"]["name"] = "Bad_Name"
    bad["spec"]["containers"].append({"name": "d"})
    found = causes(PODS, bad)
    assert "metadata.name" in found
    assert found["spec.restartPolicy"].startswith("Unsupported value: 'Sometimes'")
    assert found["spec.containers[1].image"] == "Required value"


def test_missing_name_and_wrong_types():
    obj = pod()
    del obj["metadata"]["name"]
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": "eighty"}]
    found = causes(PODS, obj)
    assert found["metadata.name"].startswith("Required value")
    assert "spec.containers[0].ports[0].containerPort" in found


def test_selector_must_match_template_labels():
    rs = {"metadata": {"name": "web"}, "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    assert "spec.template.metadata.labels" in causes(resolve("rs"), rs)


def test_service_names_are_dns1035_labels():
    service = {"metadata": {"name": "1web"}, "spec": {"ports": [{"port": 80}]}}
    assert "metadata.name" in causes(resolve("svc"), service)


def test_resource_quantities_must_parse_be_non_negative_and_requests_within_limits():
    bad = pod()
    bad["spec"]["containers"][0]["resources"] = {"limits": {"memory": "-64Mi"}}
    assert "spec.containers[0].resources.limits[memory]" in causes(PODS, bad)
    bad["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "lots"}}
    assert "spec.containers[0].resources.limits[cpu]" in causes(PODS, bad)
    bad["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}
    assert "spec.containers[0].resources.requests[cpu]" in causes(PODS, bad)
