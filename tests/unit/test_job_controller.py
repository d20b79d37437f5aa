"""The Job controller's decisions, and the Job kind's hooks and columns, with explicit times and pods."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from daemons.api.kinds import job as job_kind
from daemons.controllers.job import (
    BACKOFF_LIMIT_EXCEEDED,
    DEADLINE_EXCEEDED,
    backoff_seconds,
    format_indexes,
    plan,
    pod_for,
)
from daemons.machinery.keys import key_of

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
NOW = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def make_job(**spec: Any) -> Obj:
    job: Obj = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "pi", "namespace": "ns", "uid": "uid-1", "creationTimestamp": stamp(NOW)},
                "spec": {"template": {"spec": {"restartPolicy": "Never",
                                               "containers": [{"name": "c", "image": "busybox"}]}},
                         **spec}}
    job_kind.defaults(job)
    job["spec"].setdefault("parallelism", 1)
    job["spec"].setdefault("backoffLimit", 6)
    return job


def with_status(job: Obj, **status: Any) -> Obj:
    return {**job, "status": status}


def pod(name: str, phase: str = "Running", finished: datetime | None = None, index: int | None = None,
        ready: bool = False, restarts: int = 0) -> Obj:
    status: Obj = {"phase": phase, "containerStatuses": [{"name": "c", "restartCount": restarts, "state": {}}]}
    if finished is not None:
        status["containerStatuses"][0]["state"] = {"terminated": {"finishedAt": stamp(finished)}}
    if ready:
        status["conditions"] = [{"type": "Ready", "status": "True"}]
    metadata: Obj = {"name": name, "namespace": "ns", "creationTimestamp": stamp(NOW)}
    if index is not None:
        metadata["annotations"] = {job_kind.COMPLETION_INDEX_ANNOTATION: str(index)}
    return {"metadata": metadata, "status": status}


def conditions(result_status: Obj) -> dict[str, Obj]:
    return {item["type"]: item for item in result_status.get("conditions") or []}


def test_back_off_doubles_from_ten_seconds_and_stops_at_six_minutes() -> None:
    assert [backoff_seconds(n) for n in range(0, 8)] == [0, 10, 20, 40, 80, 160, 320, 360]
    assert backoff_seconds(100) == 360


def test_a_new_job_starts_parallelism_pods_and_its_clock() -> None:
    result = plan(make_job(completions=5, parallelism=2), [], NOW)
    assert result.create == [None, None]
    assert result.status["startTime"] == stamp(NOW)
    assert result.status["active"] == 2


def test_pods_are_not_created_beyond_the_completions_left() -> None:
    job = with_status(make_job(completions=3, parallelism=3), startTime=stamp(NOW))
    pods = [pod("a", "Succeeded", NOW), pod("b", "Succeeded", NOW), pod("c")]
    result = plan(job, pods, NOW)
    assert result.create == [] and result.delete == []
    assert (result.status["succeeded"], result.status["active"]) == (2, 1)


def test_enough_successes_complete_the_job() -> None:
    job = with_status(make_job(completions=2), startTime=stamp(NOW - timedelta(seconds=30)))
    result = plan(job, [pod("a", "Succeeded", NOW), pod("b", "Succeeded", NOW)], NOW)
    found = conditions(result.status)
    assert found["Complete"]["status"] == "True"
    assert result.status["completionTime"] == stamp(NOW)
    assert job_kind.status_text(with_status(job, **result.status)) == "Complete"


def test_without_completions_one_success_and_no_running_pod_completes() -> None:
    job = with_status(make_job(parallelism=2), startTime=stamp(NOW))
    assert "Complete" not in conditions(plan(job, [pod("a", "Succeeded", NOW), pod("b")], NOW).status)
    assert "Complete" in conditions(plan(job, [pod("a", "Succeeded", NOW), pod("b", "Succeeded", NOW)], NOW).status)


def test_a_failed_pod_is_replaced_only_after_its_back_off() -> None:
    job = with_status(make_job(backoffLimit=3), startTime=stamp(NOW - timedelta(minutes=1)))
    failed_at = NOW - timedelta(seconds=4)
    early = plan(job, [pod("a", "Failed", failed_at)], NOW)
    assert early.create == [] and early.requeue_after == pytest.approx(6)
    late = plan(job, [pod("a", "Failed", failed_at)], NOW + timedelta(seconds=6))
    assert late.create == [None]


def test_the_second_consecutive_failure_waits_twenty_seconds() -> None:
    job = with_status(make_job(backoffLimit=3), startTime=stamp(NOW - timedelta(minutes=1)))
    pods = [pod("a", "Failed", NOW - timedelta(seconds=30)), pod("b", "Failed", NOW)]
    assert plan(job, pods, NOW + timedelta(seconds=19)).create == []
    assert plan(job, pods, NOW + timedelta(seconds=20)).create == [None]


def test_more_failures_than_the_back_off_limit_fail_the_job() -> None:
    job = with_status(make_job(backoffLimit=1), startTime=stamp(NOW))
    assert "Failed" not in conditions(plan(job, [pod("a", "Failed", NOW)], NOW).status)
    result = plan(job, [pod("a", "Failed", NOW), pod("b", "Failed", NOW)], NOW)
    failed = conditions(result.status)["Failed"]
    assert (failed["status"], failed["reason"]) == ("True", BACKOFF_LIMIT_EXCEEDED)
    assert failed["message"] == "Job has reached the specified backoff limit"
    assert "completionTime" not in result.status
    assert result.create == []


def test_container_restarts_count_against_the_limit_with_restart_policy_on_failure() -> None:
    job = make_job(backoffLimit=2)
    job["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    job = with_status(job, startTime=stamp(NOW))
    result = plan(job, [pod("a", restarts=2)], NOW)
    assert conditions(result.status)["Failed"]["reason"] == BACKOFF_LIMIT_EXCEEDED
    assert [item["metadata"]["name"] for item in result.delete] == ["a"]


def test_past_the_active_deadline_pods_are_deleted_and_the_job_fails() -> None:
    job = with_status(make_job(activeDeadlineSeconds=30), startTime=stamp(NOW - timedelta(seconds=10)))
    running = [pod("a")]
    before = plan(job, running, NOW)
    assert before.requeue_after == pytest.approx(20) and before.delete == []
    after = plan(job, running, NOW + timedelta(seconds=20))
    assert conditions(after.status)["Failed"]["reason"] == DEADLINE_EXCEEDED
    assert conditions(after.status)["Failed"]["message"] == "Job was active longer than specified deadline"
    assert [key_of(item) for item in after.delete] == ["ns/a"]
    assert after.status["active"] == 0


def test_a_suspended_job_keeps_no_pods_and_says_so() -> None:
    job = with_status(make_job(suspend=True), startTime=stamp(NOW))
    result = plan(job, [pod("a")], NOW)
    assert [key_of(item) for item in result.delete] == ["ns/a"]
    suspended = conditions(result.status)["Suspended"]
    assert (suspended["status"], suspended["reason"]) == ("True", "JobSuspended")
    assert "startTime" not in result.status
    assert job_kind.status_text(with_status(job, **result.status)) == "Suspended"
    resumed = plan(with_status(make_job(), **result.status), [], NOW + timedelta(minutes=1))
    assert conditions(resumed.status)["Suspended"]["status"] == "False"
    assert resumed.status["startTime"] == stamp(NOW + timedelta(minutes=1))
    assert resumed.create == [None]


def test_an_indexed_job_starts_the_lowest_missing_indexes() -> None:
    job = with_status(make_job(completions=5, parallelism=2, completionMode="Indexed"), startTime=stamp(NOW))
    result = plan(job, [pod("a", "Succeeded", NOW, index=0), pod("b", index=1)], NOW)
    assert result.create == [2]
    assert result.status["completedIndexes"] == "0"


def test_an_indexed_job_completes_when_every_index_succeeded() -> None:
    job = with_status(make_job(completions=2, completionMode="Indexed"), startTime=stamp(NOW))
    pods = [pod("a", "Succeeded", NOW, index=1), pod("b", "Succeeded", NOW, index=1)]
    assert "Complete" not in conditions(plan(job, pods, NOW).status)
    pods.append(pod("c", "Succeeded", NOW, index=0))
    assert "Complete" in conditions(plan(job, pods, NOW).status)


def test_an_indexed_pod_carries_its_index_and_hostname() -> None:
    body = pod_for(make_job(completions=3, completionMode="Indexed"), 2)
    assert body["metadata"]["annotations"][job_kind.COMPLETION_INDEX_ANNOTATION] == "2"
    assert body["metadata"]["generateName"] == "pi-2-"
    assert body["spec"]["hostname"] == "pi-2"
    assert {"name": "JOB_COMPLETION_INDEX", "value": "2"} in body["spec"]["containers"][0]["env"]
    labels = body["metadata"]["labels"]
    assert labels["job-name"] == "pi" and labels["batch.kubernetes.io/controller-uid"] == "uid-1"


def test_completed_indexes_are_written_as_ranges() -> None:
    assert format_indexes([0, 1, 2, 4, 6, 7]) == "0-2,4,6-7"
    assert format_indexes([]) == ""


def test_a_finished_job_is_deleted_after_its_ttl() -> None:
    job = make_job(ttlSecondsAfterFinished=60)
    finished = with_status(job, startTime=stamp(NOW), conditions=[
        {"type": "Complete", "status": "True", "lastTransitionTime": stamp(NOW)}])
    assert plan(finished, [], NOW + timedelta(seconds=15)).requeue_after == pytest.approx(45)
    assert plan(finished, [], NOW + timedelta(seconds=61)).requeue_after == 0


def test_defaults_generate_the_selector_from_the_uid_and_label_the_job_with_it() -> None:
    job = make_job()
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}}
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels == {"batch.kubernetes.io/controller-uid": "uid-1", "controller-uid": "uid-1",
                      "batch.kubernetes.io/job-name": "pi", "job-name": "pi"}
    assert job["metadata"]["labels"] == labels
    assert (job["spec"]["completions"], job["spec"]["parallelism"]) == (1, 1)


def test_restart_policy_always_is_refused_as_upstream_words_it() -> None:
    job = make_job()
    job["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert [str(error) for error in job_kind.check(job, None)] == [
        'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"']


def test_the_template_cannot_change() -> None:
    job = make_job()
    changed = make_job()
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx"
    assert [error.field for error in job_kind.check_update(changed, job)] == ["spec.template"]


@pytest.mark.parametrize(("spec", "status", "text"), [
    ({"completions": 3}, {"succeeded": 1}, "1/3"),
    ({"parallelism": 4}, {}, "0/1 of 4"),
    ({"parallelism": 1}, {"succeeded": 1}, "1/1"),
])
def test_completions_column(spec: Obj, status: Obj, text: str) -> None:
    assert job_kind.completions_text({"spec": spec, "status": status}) == text


def test_duration_column_stops_at_completion() -> None:
    job = {"status": {"startTime": stamp(NOW), "completionTime": stamp(NOW + timedelta(seconds=42))}}
    assert job_kind.duration_text(job, NOW + timedelta(hours=1)) == "42s"
    assert job_kind.duration_text({"status": {"startTime": stamp(NOW)}}, NOW + timedelta(seconds=5)) == "5s"
    assert job_kind.duration_text({}, NOW) == ""
