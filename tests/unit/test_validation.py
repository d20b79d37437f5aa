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


def service(**spec):
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": spec}


def test_service_defaults_are_upstreams():
    obj, _unknown = validate(resolve("svc"), service(selector={"app": "web"}, ports=[{"port": 80}]))
    assert obj["spec"] == {"type": "ClusterIP", "selector": {"app": "web"},
                           "ports": [{"protocol": "TCP", "port": 80, "targetPort": 80}],
                           "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "sessionAffinity": "None",
                           "internalTrafficPolicy": "Cluster"}
    node_port, _unknown = validate(resolve("svc"), service(type="NodePort", ports=[{"port": 80, "nodePort": 0}],
                                                           clusterIP="10.96.0.9"))
    assert node_port["spec"]["externalTrafficPolicy"] == "Cluster"
    assert node_port["spec"]["clusterIPs"] == ["10.96.0.9"]
    assert node_port["spec"]["ports"] == [{"protocol": "TCP", "port": 80, "targetPort": 80}]
    balancer, _unknown = validate(resolve("svc"), service(type="LoadBalancer", ports=[{"port": 80}]))
    assert balancer["spec"]["allocateLoadBalancerNodePorts"] is True
    headless, _unknown = validate(resolve("svc"), service(clusterIP="None"))
    assert headless["spec"]["clusterIPs"] == ["None"] and "ports" not in headless["spec"]
    from_list, _unknown = validate(resolve("svc"), service(clusterIP="", clusterIPs=["10.96.0.7"], ports=[{"port": 1}]))
    assert from_list["spec"]["clusterIP"] == "10.96.0.7"


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({}, "spec.ports", "Required value"),
    ({"ports": [{"port": 80}, {"port": 81}]}, "spec.ports[0].name", "Required value"),
    ({"ports": [{"name": "a", "port": 80}, {"name": "a", "port": 81}]}, "spec.ports[1].name", 'Duplicate value: "a"'),
    ({"ports": [{"name": "a", "port": 80}, {"name": "b", "port": 80}]}, "spec.ports[1]", 'Duplicate value: "80/TCP"'),
    ({"ports": [{"port": 0}]}, "spec.ports[0].port", "Invalid value: 0: Input should be greater than or equal to 1"),
    ({"ports": [{"port": 65536}]}, "spec.ports[0].port", None),
    ({"ports": [{"port": 80, "name": "HTTP"}]}, "spec.ports[0].name", None),
    ({"ports": [{"port": 80, "targetPort": 70000}]}, "spec.ports[0].targetPort", None),
    ({"ports": [{"port": 80, "nodePort": 30080}]}, "spec.ports[0].nodePort",
     "Forbidden: may not be used when `type` is 'ClusterIP'"),
    ({"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30080},
                                    {"name": "b", "port": 81, "nodePort": 30080}]},
     "spec.ports[1].nodePort", "Duplicate value: 30080"),
    ({"type": "Balanced", "ports": [{"port": 80}]}, "spec.type", None),
    ({"selector": {"app": 1}, "ports": [{"port": 80}]}, "spec.selector.app", None),
    ({"selector": ["app"], "ports": [{"port": 80}]}, "spec.selector", None),
    ({"clusterIP": "10.96.0.300", "ports": [{"port": 80}]}, "spec.clusterIPs[0]",
     'Invalid value: "10.96.0.300": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)'),
    ({"clusterIP": "10.96.0.3", "clusterIPs": ["10.96.0.4"], "ports": [{"port": 80}]}, "spec.clusterIPs[0]", None),
    ({"type": "NodePort", "clusterIP": "None"}, "spec.clusterIPs[0]",
     "Invalid value: \"None\": may not be set to 'None' for NodePort services"),
    ({"type": "ExternalName"}, "spec.externalName", "Required value"),
    ({"type": "ExternalName", "externalName": "db.example", "clusterIP": "10.96.0.3"}, "spec.clusterIPs",
     "Forbidden: may not be set for ExternalName services"),
    ({"externalTrafficPolicy": "Local", "ports": [{"port": 80}]}, "spec.externalTrafficPolicy", None),
    ({"sessionAffinity": "Sticky", "ports": [{"port": 80}]}, "spec.sessionAffinity", None),
    ({"allocateLoadBalancerNodePorts": False, "ports": [{"port": 80}]}, "spec.allocateLoadBalancerNodePorts",
     "Forbidden: may only be used when `type` is 'LoadBalancer'"),
])
def test_service_problems_name_the_field(spec, field, message):
    found = causes(resolve("svc"), service(**spec))
    assert field in found, found
    if message is not None:
        assert found[field] == message
