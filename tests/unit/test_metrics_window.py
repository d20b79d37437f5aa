"""The metrics API's rate window: ``--metrics-window`` of the apiserver, a Prometheus duration."""

import pytest

from daemons.api.usage import Usage, duration_seconds, node_queries, pod_queries
from daemons.apiserver.metrics_api import node_metrics, pod_metrics, window_text
from daemons.apiserver.settings import ApiServerSettings
from daemons.machinery.settings import parse_settings

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("text", "seconds"), [("1m", 60), ("30s", 30), ("1m30s", 90), ("2h", 7200), ("1d", 86400),
                                                ("1s500ms", 1.5), ("250ms", 0.25)])
def test_prometheus_durations(text, seconds):
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "60", "1 m", "1.5s", "1s1m", "m", "1M", "-1m", "0s", "0m0s"])
def test_what_is_not_a_window(text):
    with pytest.raises(ValueError, match=r"duration|no time"):
        duration_seconds(text)


def test_the_window_reaches_the_queries():
    assert "[10s]))" in pod_queries("web", "10s")[0] and "[10s]))" in node_queries("10s")[0]
    assert "[1m]))" in pod_queries("web")[0] and "[1m]))" in node_queries()[0]


def test_the_window_is_written_as_go_writes_durations():
    assert [window_text(s) for s in (10, 60, 90, 3600, 1.5, 0.25)] == ["10s", "1m0s", "1m30s", "1h0m0s", "1.5s",
                                                                         "250ms"]
    pod = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "app"}]}}
    node = {"metadata": {"name": "n1"}}
    assert pod_metrics(pod, {"app": Usage(0.1, 2**20)}, "2026-01-01T00:00:00Z", "10s")["window"] == "10s"
    assert node_metrics(node, Usage(1, 2**30), "2026-01-01T00:00:00Z")["window"] == "1m0s"


def test_the_apiserver_flag(capsys):
    assert parse_settings(ApiServerSettings, [], environ={}).metrics_window == "1m"
    assert parse_settings(ApiServerSettings, ["--metrics-window", "15s"], environ={}).metrics_window == "15s"
    assert parse_settings(ApiServerSettings, [], environ={"MINIK8S_METRICS_WINDOW": "2m"}).metrics_window == "2m"
    with pytest.raises(SystemExit) as exited:
        parse_settings(ApiServerSettings, ["--metrics-window", "a minute"], environ={})
    assert exited.value.code == 2 and "--metrics-window" in capsys.readouterr().err
