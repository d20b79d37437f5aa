"""Daemon settings come from flags over environment over defaults, and bad values stop the daemon clearly."""

from __future__ import annotations

import logging

import pytest
from pydantic import Field

from daemons.machinery.log import setup_logging
from daemons.machinery.settings import DaemonSettings, parse_settings

pytestmark = pytest.mark.unit


class SchedulerSettings(DaemonSettings):
    """Settings of a made-up daemon with one field of each kind."""

    port: int = Field(10259, description="port of the /metrics and /healthz server")
    etcd_servers: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:2379"], description="etcd URLs")
    leader_elect: bool = Field(True, description="take part in leader election")
    node_labels: dict[str, str] = Field(default_factory=dict, description="labels of the node")
    node_name: str = Field(description="the node this daemon runs on")


ENV = {"MINIK8S_NODE_NAME": "worker-1"}


def test_defaults_apply_when_nothing_is_given() -> None:
    settings = parse_settings(SchedulerSettings, [], environ=ENV)
    assert settings.port == 10259
    assert settings.etcd_servers == ["http://127.0.0.1:2379"]
    assert settings.leader_elect is True
    assert settings.log_level == "INFO"
    assert settings.kubeconfig is None and settings.amqp_url is None
    assert settings.node_name == "worker-1"


def test_flag_beats_environment_which_beats_default() -> None:
    environ = {**ENV, "MINIK8S_PORT": "9000", "MINIK8S_LOG_LEVEL": "debug", "MINIK8S_AMQP_URL": "amqp://env/"}
    settings = parse_settings(SchedulerSettings, ["--port", "9100"], environ=environ)
    assert settings.port == 9100
    assert settings.log_level == "DEBUG"
    assert settings.amqp_url == "amqp://env/"


def test_bool_flags_and_bool_environment() -> None:
    assert parse_settings(SchedulerSettings, ["--no-leader-elect"], environ=ENV).leader_elect is False
    environ = {**ENV, "MINIK8S_LEADER_ELECT": "false"}
    assert parse_settings(SchedulerSettings, [], environ=environ).leader_elect is False
    assert parse_settings(SchedulerSettings, ["--leader-elect"], environ=environ).leader_elect is True


def test_lists_and_maps_are_comma_separated() -> None:
    settings = parse_settings(
        SchedulerSettings,
        ["--etcd-servers", "http://a:2379, http://b:2379", "--node-labels", "zone=a,gpu=true"],
        environ=ENV,
    )
    assert settings.etcd_servers == ["http://a:2379", "http://b:2379"]
    assert settings.node_labels == {"zone": "a", "gpu": "true"}
    environ = {**ENV, "MINIK8S_ETCD_SERVERS": "http://c:2379"}
    assert parse_settings(SchedulerSettings, [], environ=environ).etcd_servers == ["http://c:2379"]


def test_custom_env_prefix() -> None:
    settings = parse_settings(SchedulerSettings, [], env_prefix="KUBELET_", environ={"KUBELET_NODE_NAME": "n2"})
    assert settings.node_name == "n2"


def test_bad_int_flag_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(SchedulerSettings, ["--port", "abc"], environ=ENV)
    assert exit_info.value.code == 2
    error_line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: argument --port:" in error_line and "'abc'" in error_line


def test_bad_environment_value_names_flag_and_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(SchedulerSettings, [], environ={**ENV, "MINIK8S_PORT": "many"})
    assert exit_info.value.code == 2
    assert "argument --port (from MINIK8S_PORT)" in capsys.readouterr().err


def test_missing_required_field_and_bad_log_level(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(SchedulerSettings, ["--log-level", "loud"], environ={})
    error = capsys.readouterr().err
    assert "argument --node-name: Field required" in error
    assert "argument --log-level" in error and "'loud'" in error


def test_unknown_flag_is_an_argparse_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(SchedulerSettings, ["--no-such-flag"], environ=ENV)
    assert exit_info.value.code == 2


def test_help_shows_description_env_and_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_settings(SchedulerSettings, ["--help"], environ=ENV)
    out = " ".join(capsys.readouterr().out.split())
    assert "--etcd-servers ETCD_SERVERS etcd URLs (env MINIK8S_ETCD_SERVERS; comma-separated)" in out
    assert "--leader-elect, --no-leader-elect" in out
    assert "default: 10259" in out


def test_setup_logging_sets_level_and_quiets_libraries() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("warning")
        assert root.level == logging.WARNING
        assert logging.getLogger("httpx").level == logging.WARNING
        with pytest.raises(ValueError):
            setup_logging("loud")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("httpx").setLevel(logging.NOTSET)
        logging.getLogger("pika").setLevel(logging.NOTSET)
