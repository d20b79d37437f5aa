import pytest

from daemons.api.usage import (
    PrometheusClient,
    PrometheusError,
    Usage,
    node_queries,
    node_usage,
    parse_vector,
    pod_queries,
    pod_usage,
)

pytestmark = pytest.mark.unit


def vector(*samples):
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1700000000.123, str(value)]} for labels, value in samples]}}


def test_pod_queries_rate_cpu_over_one_minute_and_leave_out_the_sandbox():
    cpu, memory = pod_queries("web")
    assert cpu == ('sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total'
                   '{container!="",container!="POD",pod!="",namespace="web"}[1m]))')
    assert memory == ('sum by (namespace, pod, container) (container_memory_working_set_bytes'
                      '{container!="",container!="POD",pod!="",namespace="web"})')
    assert "namespace=" not in pod_queries()[0]


def test_a_namespace_is_quoted_as_a_promql_string():
    assert 'namespace="a\\"b"' in pod_queries('a"b')[0]


def test_node_queries_read_the_root_cgroup_by_node():
    cpu, memory = node_queries()
    assert 'id="/"' in cpu and "[1m]" in cpu and cpu.startswith("sum by (node)")
    assert memory == 'sum by (node) (container_memory_working_set_bytes{id="/"})'


def test_parse_vector_returns_labels_and_values_without_nan():
    body = vector(({"pod": "a"}, 0.25), ({"pod": "b"}, "NaN"), ({"pod": "c"}, "+Inf"))
    assert parse_vector(body, "q") == [({"pod": "a"}, 0.25)]


def test_parse_vector_names_the_query_on_an_error_answer():
    body = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
    with pytest.raises(PrometheusError, match=r"rate\(x\[1m\]\).*bad_data: parse error"):
        parse_vector(body, "rate(x[1m])")


def test_parse_vector_refuses_a_matrix():
    with pytest.raises(PrometheusError, match="'matrix'"):
        parse_vector({"status": "success", "data": {"resultType": "matrix", "result": []}}, "x[1m]")


class FakePrometheus(PrometheusClient):
    def __init__(self, answers):
        self.answers = answers
        self.asked = []

    def query(self, promql):
        self.asked.append(promql)
        return parse_vector(vector(*self.answers["cpu" if "container_cpu" in promql else "memory"]), promql)


def test_pod_usage_pairs_cpu_and_memory_per_container():
    fake = FakePrometheus({
        "cpu": [
            ({"namespace": "default", "pod": "web", "container": "app"}, 0.012),
            ({"namespace": "default", "pod": "web", "container": "sidecar"}, 0.001),
            ({"namespace": "default", "pod": "fresh", "container": "app"}, 0.5),
        ],
        "memory": [
            ({"namespace": "default", "pod": "web", "container": "app"}, 3 * 2**20),
            ({"namespace": "default", "pod": "web", "container": "sidecar"}, 2**20),
        ],
    })
    usage = pod_usage(fake, "default")
    # "fresh" has been scraped once: a CPU figure without memory is not a complete sample yet.
    assert usage == {("default", "web"): {"app": Usage(cpu=0.012, memory=3 * 2**20),
                                          "sidecar": Usage(cpu=0.001, memory=2**20)}}
    assert all('namespace="default"' in query for query in fake.asked)


def test_node_usage_by_node_label():
    fake = FakePrometheus({
        "cpu": [({"node": "n1"}, 0.75), ({"node": "n2"}, 0.1)],
        "memory": [({"node": "n1"}, 2**30)],
    })
    assert node_usage(fake) == {"n1": Usage(cpu=0.75, memory=2**30)}
