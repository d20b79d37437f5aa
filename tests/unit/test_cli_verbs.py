"""Command-line logic that needs no server: label arguments, argv order, type/name parsing, errors, describe."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import typer

from cli.main import app, hoist_globals
from cli.session import CLIError, error_text, type_and_names
from cli.verbs.describe import describe_text, smart_label
from cli.verbs.label import refusals, split_changes
from daemons.api.errors import AlreadyExists, ConnectionFailed, Invalid, not_found

pytestmark = pytest.mark.unit


def test_split_changes_separates_targets_sets_and_removals():
    targets, changes = split_changes(["pod", "web", "app=web", "tier-", "empty="], "labels")
    assert targets == ["pod", "web"]
    assert changes == {"app": "web", "tier": None, "empty": ""}


@pytest.mark.parametrize(("args", "message"), [
    (["pod", "web"], "at least one label update is required"),
    (["pod", "a=b", "web"], "all resources must be specified before label changes: web"),
    (["pod", "web", "a=b", "a-"], "can not both modify and remove the same label"),
    (["pod", "web", "bad key=x"], 'invalid label spec: "bad key=x"'),
    (["pod", "web", "a=not valid"], 'invalid label spec: "a=not valid"'),
])
def test_split_changes_rejects(args, message):
    with pytest.raises(CLIError, match=message):
        split_changes(args, "labels")


def test_annotation_values_may_be_anything():
    assert split_changes(["pod", "web", "note=hello world: yes"], "annotations")[1] == {"note": "hello world: yes"}


def test_refusals_without_overwrite():
    current = {"app": "web", "tier": "front"}
    assert refusals(current, {"app": "web", "new": "x"}, "labels") is None
    assert refusals(current, {"tier": "back"}, "labels") == (
        "'tier' already has a value (front), and --overwrite is false")
    assert refusals(current, {"app": "web"}, "annotations") == (
        "--overwrite is false but found the following declared annotation(s): 'app' already has a value (web)")
    assert refusals(current, {"app": None}, "annotations") is None


def test_globals_move_before_the_verb_but_verb_option_values_stay():
    group = typer.main.get_command(app)
    argv = ["get", "pods", "-n", "prod", "-l", "-A", "--kubeconfig=/k", "-A", "-nx", "--server", "s", "--", "-n"]
    assert hoist_globals(argv, group) == ["-n", "prod", "--kubeconfig=/k", "-A", "-nx", "--server", "s",
                                          "get", "pods", "-l", "-A", "--", "-n"]
    assert hoist_globals(["-n=prod", "apply", "-f", "-"], group) == ["-nprod", "apply", "-f", "-"]


def test_type_and_names():
    groups = type_and_names(["po,deploy"])
    assert [(row.plural, names) for row, names in groups] == [("pods", []), ("deployments", [])]
    assert [(row.plural, names) for row, names in type_and_names(["pod/a", "pod/b", "svc/c"])] == [
        ("pods", ["a", "b"]), ("services", ["c"])]
    assert {row.plural for row, _ in type_and_names(["all"])} >= {"pods", "deployments", "services"}
    with pytest.raises(CLIError, match='resource type "nope"'):
        type_and_names(["nope"])
    with pytest.raises(CLIError, match="single resource type"):
        type_and_names(["po,svc", "web"])


def test_error_text():
    assert error_text(not_found("pods", "x")) == 'Error from server (NotFound): pods "x" not found'
    assert error_text(AlreadyExists('deployments.apps "web" already exists')) == (
        'Error from server (AlreadyExists): deployments.apps "web" already exists')
    one = Invalid.for_object("Pod", "web", [{"field": "spec.containers", "message": "Required value"}])
    assert error_text(one) == 'The Pod "web" is invalid: spec.containers: Required value'
    two = Invalid.for_object("Pod", "web", [{"field": "a", "message": "m1"}, {"field": "b", "message": "m2"}])
    assert error_text(two) == 'The Pod "web" is invalid: \n* a: m1\n* b: m2'
    refused = ConnectionFailed("The connection to the server https://h:6443 was refused - did you specify the "
                               "right host or port?")
    assert error_text(refused) == str(refused)
    assert error_text(CLIError("bad")) == "error: bad"


def test_smart_labels():
    assert [smart_label(key) for key in ("podIP", "apiVersion", "restartPolicy", "uid", "app.kubernetes.io/name")] \
        == ["Pod IP", "API Version", "Restart Policy", "UID", "app.kubernetes.io/name"]


def test_describe_text_layout():
    now = datetime(2024, 1, 1, 12, 0, 0, tzinfo=UTC)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": "default", "labels": {"b": "2", "a": "1"},
                        "managedFields": [{"manager": "kubectl"}]},
           "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "n1"}}
    events = [{"metadata": {"creationTimestamp": "2024-01-01T11:59:00Z"}, "type": "Normal", "reason": "Scheduled",
               "message": "assigned ", "source": {"component": "default-scheduler"}, "count": 1,
               "firstTimestamp": "2024-01-01T11:59:00Z", "lastTimestamp": "2024-01-01T11:59:00Z"},
              {"metadata": {}, "type": "Warning", "reason": "BackOff", "message": "back-off", "count": 3,
               "source": {"component": "kubelet", "host": "n1"},
               "firstTimestamp": "2024-01-01T11:00:00Z", "lastTimestamp": "2024-01-01T11:58:00Z"}]
    text = describe_text(pod, True, events, now)
    assert text.splitlines() == [
        "Name:         web",
        "Namespace:    default",
        "Labels:       a=1",
        "              b=2",
        "Annotations:  <none>",
        "API Version:  v1",
        "Kind:         Pod",
        "Spec:",
        "  Containers:",
        "  - Image:    busybox",
        "    Name:     c",
        "  Node Name:  n1",
        "Events:",
        "  Type     Reason     Age               From               Message",
        "  ----     ------     ----              ----               -------",
        "  Warning  BackOff    2m (x3 over 60m)  kubelet, n1        back-off",
        "  Normal   Scheduled  60s               default-scheduler  assigned",
    ]
    assert describe_text(pod, True, [], now).splitlines()[-1] == "Events:       <none>"
