"""``kubectl rollout``: status messages, history, the revision undo picks, and the patches it sends."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from cli.session import CLIError
from cli.verbs.rollout import (
    CHANGE_CAUSE,
    HASH_LABEL,
    REVISION,
    daemonset_history,
    daemonset_status_message,
    daemonset_undo_patch,
    deployment_names,
    history,
    history_table,
    parse_duration,
    pick_revision,
    pod_template,
    restart_patch,
    status_message,
    targets,
    undo_patch,
)
from daemons.api.kinds.daemonset import HISTORY_ANNOTATION

pytestmark = pytest.mark.unit


def deployment(replicas=3, generation=2, observed=2, updated=3, current=3, available=3, conditions=()):
    return {"metadata": {"name": "web", "uid": "uid-web", "generation": generation, "resourceVersion": "7",
                         "annotations": {REVISION: "2", "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "web"}},
                                                        "spec": {"containers": [{"name": "web", "image": "web:2"}]}}},
            "status": {"observedGeneration": observed, "replicas": current, "updatedReplicas": updated,
                       "availableReplicas": available, "conditions": list(conditions)}}


def replica_set(revision, image, cause=None, owner="uid-web"):
    annotations = {REVISION: str(revision)}
    if cause:
        annotations[CHANGE_CAUSE] = cause
    return {"metadata": {"name": f"web-{revision}", "annotations": annotations,
                         "ownerReferences": [{"kind": "Deployment", "uid": owner, "controller": True}]},
            "spec": {"template": {"metadata": {"labels": {"app": "web", HASH_LABEL: f"h{revision}"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}}


@pytest.mark.parametrize(("d", "message", "done"), [
    (deployment(generation=3), "Waiting for deployment spec update to be observed...", False),
    (deployment(updated=1, current=4), 'Waiting for deployment "web" rollout to finish: 1 out of 3 new replicas '
     "have been updated...", False),
    (deployment(current=4), 'Waiting for deployment "web" rollout to finish: 1 old replicas are pending '
     "termination...", False),
    (deployment(available=2), 'Waiting for deployment "web" rollout to finish: 2 of 3 updated replicas are '
     "available...", False),
    (deployment(), 'deployment "web" successfully rolled out', True),
])
def test_status_messages_are_upstreams(d, message, done):
    assert status_message(d) == (message, done)


def test_a_rollout_past_its_deadline_is_an_error():
    stuck = deployment(updated=1, conditions=[{"type": "Progressing", "status": "False",
                                                "reason": "ProgressDeadlineExceeded"}])
    with pytest.raises(CLIError, match='deployment "web" exceeded its progress deadline'):
        status_message(stuck)


def test_history_lists_the_deployments_own_replica_sets_by_revision():
    rses = [replica_set(2, "web:2", cause="kubectl set image web:2"), replica_set(1, "web:1"),
            replica_set(5, "other", owner="uid-other")]
    revisions = history(deployment(), rses)
    assert sorted(revisions) == [1, 2]
    assert history_table(revisions) == ["REVISION  CHANGE-CAUSE", "1         <none>",
                                        "2         kubectl set image web:2"]


def test_undo_picks_the_previous_revision_or_the_one_asked_for():
    revisions = history(deployment(), [replica_set(1, "web:1"), replica_set(3, "web:3"), replica_set(2, "web:2")])
    assert pick_revision("web", revisions, 0)[0] == 2
    assert pick_revision("web", revisions, 1)[0] == 1
    with pytest.raises(CLIError, match="unable to find specified revision 9 in history"):
        pick_revision("web", revisions, 9)
    with pytest.raises(CLIError, match="no last revision to roll back to"):
        pick_revision("web", {1: replica_set(1, "web:1")}, 0)
    with pytest.raises(CLIError, match='no rollout history found for deployment "web"'):
        pick_revision("web", {}, 0)


def test_undo_copies_the_template_without_its_hash_and_keeps_the_deployments_own_annotations():
    patch = undo_patch(deployment(), replica_set(1, "web:1", cause="first"))
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert patch[1]["value"] == {"metadata": {"labels": {"app": "web"}},
                                 "spec": {"containers": [{"name": "web", "image": "web:1"}]}}
    assert patch[2]["value"] == {REVISION: "2", "kubectl.kubernetes.io/last-applied-configuration": "{}",
                                 CHANGE_CAUSE: "first"}


def test_restart_stamps_the_template():
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert restart_patch(moment) == {"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-01-02T03:04:05Z"}}}}}


def test_durations_and_names():
    assert parse_duration("90s") == 90
    assert parse_duration("1m30s") == 90
    assert parse_duration("0s") == 0
    with pytest.raises(CLIError, match="invalid duration"):
        parse_duration("soon")
    assert deployment_names(["deployment/web", "deploy/api"]) == ["web", "api"]
    assert deployment_names(["deployments", "web"]) == ["web"]
    with pytest.raises(CLIError, match="only deployments roll out"):
        deployment_names(["rs/web"])


# --- daemon sets --------------------------------------------------------------------------------------


def daemon_set(generation=2, observed=2, desired=3, updated=3, available=3, strategy="RollingUpdate", history=()):
    return {"metadata": {"name": "agent", "generation": generation, "resourceVersion": "9",
                         "annotations": {HISTORY_ANNOTATION: json.dumps(list(history))}},
            "spec": {"updateStrategy": {"type": strategy},
                     "template": {"metadata": {"labels": {"app": "agent"}},
                                  "spec": {"containers": [{"name": "agent", "image": "agent:2"}]}}},
            "status": {"observedGeneration": observed, "desiredNumberScheduled": desired,
                       "updatedNumberScheduled": updated, "numberAvailable": available}}


@pytest.mark.parametrize(("ds", "message", "done"), [
    (daemon_set(generation=3), "Waiting for daemon set spec update to be observed...", False),
    (daemon_set(updated=1), 'Waiting for daemon set "agent" rollout to finish: 1 out of 3 new pods have been '
     "updated...", False),
    (daemon_set(available=2), 'Waiting for daemon set "agent" rollout to finish: 2 of 3 updated pods are '
     "available...", False),
    (daemon_set(), 'daemon set "agent" successfully rolled out', True),
])
def test_daemon_set_status_messages_are_upstreams(ds, message, done):
    assert daemonset_status_message(ds) == (message, done)


def test_daemon_set_on_delete_has_no_rollout_to_watch():
    with pytest.raises(CLIError, match="only available for RollingUpdate strategy type"):
        daemonset_status_message(daemon_set(strategy="OnDelete"))


def test_daemon_set_history_undo_from_the_recorded_templates():
    old = {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}}
    ds = daemon_set(history=[{"revision": 1, "hash": "a", "template": old, "changeCause": "first"},
                             {"revision": 2, "hash": "b", "template": daemon_set()["spec"]["template"]}])
    revisions = daemonset_history(ds)
    assert history_table(revisions) == ["REVISION  CHANGE-CAUSE", "1         first", "2         <none>"]
    number, recorded = pick_revision("agent", revisions, 0, "daemonset")
    assert number == 1
    assert daemonset_undo_patch(ds, pod_template(recorded)) == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "9"},
        {"op": "replace", "path": "/spec/template", "value": old}]
    with pytest.raises(CLIError, match='no rollout history found for daemonset "agent"'):
        pick_revision("agent", daemonset_history(daemon_set()), 0, "daemonset")


def test_targets_take_deployments_and_daemon_sets():
    assert [(row.kind, name) for row, name in targets(["ds/agent", "deployment/web"])] == [
        ("DaemonSet", "agent"), ("Deployment", "web")]
    with pytest.raises(CLIError, match="only deployments roll out"):
        deployment_names(["ds/agent"])
