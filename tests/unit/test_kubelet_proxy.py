import pytest

from daemons.api import errors
from daemons.apiserver.kubelet_proxy import choose_container, kubelet_url

pytestmark = pytest.mark.unit


def pod(*names):
    return {"metadata": {"name": "web"}, "spec": {"containers": [{"name": name} for name in names]}}


def test_the_only_container_is_chosen_without_a_name():
    assert choose_container(pod("main"), None) == "main"
    assert choose_container(pod("main", "sidecar"), "sidecar") == "sidecar"


def test_several_containers_need_a_name_and_a_valid_one():
    with pytest.raises(errors.BadRequest, match=r"choose one of: \[main sidecar\]"):
        choose_container(pod("main", "sidecar"), None)
    with pytest.raises(errors.BadRequest, match="container other is not valid for pod web"):
        choose_container(pod("main"), "other")


def test_kubelet_url_from_node_status():
    node = {"metadata": {"name": "n1"}, "status": {
        "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "192.0.2.7"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10255}}}}
    assert kubelet_url(node) == "https://192.0.2.7:10255"
    with pytest.raises(errors.ServiceUnavailable):
        kubelet_url({"metadata": {"name": "n2"}, "status": {}})
