"""Jobs and CronJobs against the real apiserver and controller manager, through both kubectls.

No kubelet runs here: the tests play its part and write the pods' phase through the status subresource.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from daemons.api.client import ApiClient
from daemons.api.errors import Invalid, NotFound
from daemons.api.resources import require
from tests.conftest import ApiServerProcess, ControllerManagerProcess, events, serving, upstream_kubectls, wait_for

JOBS = require("batch/v1", "Job")
CRONJOBS = require("batch/v1", "CronJob")
PODS = require("v1", "Pod")
KUBECTL = Path(sys.executable).with_name("kubectl")
UPSTREAM = upstream_kubectls()


@pytest.fixture(scope="module")
def manager(tmp_path_factory: pytest.TempPathFactory,
            apiserver: ApiServerProcess) -> Iterator[ControllerManagerProcess]:
    process = ControllerManagerProcess(tmp_path_factory.mktemp("controller-manager"), apiserver, "--controllers",
                                       "job,cronjob,garbagecollector")
    with serving(process):
        yield process


def kubectl(apiserver: ApiServerProcess, namespace: str, *args: str, binary: Path = KUBECTL,
            cache: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [str(binary), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, *args]
    if cache is not None:
        argv[1:1] = ["--cache-dir", str(cache)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result.stdout


def job_body(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                           "containers": [{"name": "c", "image": "busybox"}]}}, **spec}}


def job_pods(api: ApiClient, namespace: str, name: str) -> list[dict[str, Any]]:
    return [pod for pod in api.list(PODS, namespace)["items"]
            if pod["metadata"].get("labels", {}).get("job-name") == name
            and not pod["metadata"].get("deletionTimestamp")]


def finish(api: ApiClient, namespace: str, pod: dict[str, Any], phase: str) -> None:
    """Report the pod's container finished, as its kubelet would."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    state = {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": now}}
    api.patch(PODS, pod["metadata"]["name"], {"status": {"phase": phase, "containerStatuses": [
        {"name": "c", "ready": False, "restartCount": 0, "image": "busybox", "imageID": "", "state": state}]}},
        namespace, subresource="status")


def condition(api: ApiClient, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    job = api.get(JOBS, name, namespace)
    return next((item for item in (job.get("status") or {}).get("conditions") or [] if item["type"] == kind), None)


def test_a_job_runs_its_pod_to_completion(api: ApiClient, namespace: str, manager: ControllerManagerProcess,
                                          apiserver: ApiServerProcess) -> None:
    ok(kubectl(apiserver, namespace, "create", "job", "pi", "--image=busybox", "--", "sh", "-c", "echo 1"))
    job = api.get(JOBS, "pi", namespace)
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    [pod] = wait_for(lambda: job_pods(api, namespace, "pi"), lambda pods: len(pods) == 1, manager)
    labels = pod["metadata"]["labels"]
    assert (labels["controller-uid"], labels["batch.kubernetes.io/job-name"]) == (uid, "pi")
    [owner] = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", uid, True)
    waiting = subprocess.Popen([str(KUBECTL), "--kubeconfig", str(apiserver.kubeconfig), "-n", namespace, "wait",
                                "--for=condition=complete", "job/pi", "--timeout=60s"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finish(api, namespace, pod, "Succeeded")
    out, err = waiting.communicate(timeout=90)
    assert waiting.returncode == 0, err
    assert out == "job.batch/pi condition met\n"
    status = api.get(JOBS, "pi", namespace)["status"]
    assert (status["succeeded"], status.get("active", 0)) == (1, 0)
    assert status["completionTime"] >= status["startTime"]
    header, row = ok(kubectl(apiserver, namespace, "get", "jobs")).splitlines()
    assert header.split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert row.split()[:3] == ["pi", "Complete", "1/1"]


def test_failures_past_the_back_off_limit_fail_the_job(api: ApiClient, namespace: str,
                                                       manager: ControllerManagerProcess) -> None:
    api.create(JOBS, job_body("fails", backoffLimit=0), namespace)
    [pod] = wait_for(lambda: job_pods(api, namespace, "fails"), lambda pods: len(pods) == 1, manager)
    finish(api, namespace, pod, "Failed")
    failed = wait_for(lambda: condition(api, namespace, "fails", "Failed"), bool, manager)
    assert (failed["status"], failed["reason"]) == ("True", "BackoffLimitExceeded")
    assert api.get(JOBS, "fails", namespace)["status"]["failed"] == 1
    assert events(api, namespace, "fails", "BackoffLimitExceeded")


def test_the_active_deadline_stops_the_pods(api: ApiClient, namespace: str, manager: ControllerManagerProcess) -> None:
    api.create(JOBS, job_body("slow", activeDeadlineSeconds=1), namespace)
    failed = wait_for(lambda: condition(api, namespace, "slow", "Failed"), bool, manager)
    assert failed["reason"] == "DeadlineExceeded"
    wait_for(lambda: job_pods(api, namespace, "slow"), [], manager)


def test_an_indexed_job_gives_each_pod_its_index(api: ApiClient, namespace: str,
                                                 manager: ControllerManagerProcess) -> None:
    api.create(JOBS, job_body("idx", completions=2, parallelism=2, completionMode="Indexed"), namespace)
    pods = wait_for(lambda: job_pods(api, namespace, "idx"), lambda found: len(found) == 2, manager)
    by_index = {pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: pod for pod in pods}
    assert sorted(by_index) == ["0", "1"]
    assert by_index["1"]["spec"]["hostname"] == "idx-1"
    assert {"name": "JOB_COMPLETION_INDEX", "value": "1"} in by_index["1"]["spec"]["containers"][0]["env"]
    for pod in pods:
        finish(api, namespace, pod, "Succeeded")
    wait_for(lambda: (condition(api, namespace, "idx", "Complete") or {}).get("status"), "True", manager)
    assert api.get(JOBS, "idx", namespace)["status"]["completedIndexes"] == "0-1"


def test_a_suspended_job_runs_nothing_until_resumed(api: ApiClient, namespace: str,
                                                    manager: ControllerManagerProcess) -> None:
    api.create(JOBS, job_body("later", suspend=True), namespace)
    suspended = wait_for(lambda: condition(api, namespace, "later", "Suspended"), bool, manager)
    assert suspended["status"] == "True"
    assert job_pods(api, namespace, "later") == []
    api.patch(JOBS, "later", {"spec": {"suspend": False}}, namespace)
    wait_for(lambda: len(job_pods(api, namespace, "later")), 1, manager)
    # The controller creates the pods before it writes the condition.
    wait_for(lambda: (condition(api, namespace, "later", "Suspended") or {}).get("status"), "False", manager)


def test_a_finished_job_goes_after_its_ttl(api: ApiClient, namespace: str, manager: ControllerManagerProcess,
                                           apiserver: ApiServerProcess) -> None:
    api.create(JOBS, job_body("brief", ttlSecondsAfterFinished=0), namespace)
    [pod] = wait_for(lambda: job_pods(api, namespace, "brief"), lambda pods: len(pods) == 1, manager)
    finish(api, namespace, pod, "Succeeded")
    ok(kubectl(apiserver, namespace, "wait", "--for=delete", "job/brief", "--timeout=60s"))
    with pytest.raises(NotFound):
        api.get(JOBS, "brief", namespace)


def test_restart_policy_always_is_refused(api: ApiClient, namespace: str) -> None:
    body = job_body("always")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(Invalid) as refused:
        api.create(JOBS, body, namespace)
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always": supported values: "OnFailure", "Never"' \
        in str(refused.value)


def test_a_job_from_a_cronjob_and_a_missed_run(api: ApiClient, namespace: str, manager: ControllerManagerProcess,
                                               apiserver: ApiServerProcess) -> None:
    # Yearly, so no scheduled time comes by itself while the test runs.
    ok(kubectl(apiserver, namespace, "create", "cronjob", "tick", "--image=busybox", "--schedule=0 0 1 1 *",
               "--", "date"))
    header, row = ok(kubectl(apiserver, namespace, "get", "cronjobs")).splitlines()
    assert header.split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert row.split()[:10] == ["tick", "0", "0", "1", "1", "*", "<none>", "False", "0", "<none>"]
    ok(kubectl(apiserver, namespace, "create", "job", "manual", "--from=cronjob/tick"))
    manual = api.get(JOBS, "manual", namespace)
    assert manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    assert manual["metadata"]["ownerReferences"][0]["name"] == "tick"
    # As if the controller manager had been down for years: only the latest missed time runs, at once.
    api.patch(CRONJOBS, "tick", {"status": {"lastScheduleTime": "2020-01-01T00:00:00Z"}}, namespace,
              subresource="status")

    def scheduled() -> list[dict[str, Any]]:
        return [job for job in api.list(JOBS, namespace)["items"]
                if "batch.kubernetes.io/cronjob-scheduled-timestamp" in (job["metadata"].get("annotations") or {})]

    [job] = wait_for(scheduled, lambda jobs: len(jobs) == 1, manager)
    name = job["metadata"]["name"]
    when = datetime.fromtimestamp(int(name.removeprefix("tick-")) * 60, UTC)
    local = when.astimezone()  # a CronJob without timeZone follows the controller manager's local time
    assert (local.month, local.day, local.hour, local.minute) == (1, 1, 0, 0)
    assert datetime.now(UTC) - when < timedelta(days=367)
    status = wait_for(lambda: api.get(CRONJOBS, "tick", namespace)["status"],
                      lambda found: name in {ref["name"] for ref in found.get("active") or []}, manager)
    assert status["lastScheduleTime"] == when.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("version", sorted(UPSTREAM) or ["none"])
def test_upstream_kubectl_creates_and_lists_jobs(version: str, api: ApiClient, namespace: str,
                                                 apiserver: ApiServerProcess, tmp_path: Path) -> None:
    assert version in UPSTREAM, "no upstream kubectl found: run scripts/test.sh, which installs one"
    binary, cache = UPSTREAM[version], tmp_path / "cache"
    assert ok(kubectl(apiserver, namespace, "create", "job", "up", "--image=busybox", "--", "true",
                      binary=binary, cache=cache)) == "job.batch/up created\n"
    assert ok(kubectl(apiserver, namespace, "create", "cronjob", "upc", "--image=busybox", "--schedule=0 0 1 1 *",
                      binary=binary, cache=cache)) == "cronjob.batch/upc created\n"
    assert api.get(JOBS, "up", namespace)["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    lines = ok(kubectl(apiserver, namespace, "get", "jobs", binary=binary, cache=cache)).splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert lines[1].split()[:3] == ["up", "Running", "0/1"]
    lines = ok(kubectl(apiserver, namespace, "get", "cronjobs", binary=binary, cache=cache)).splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert lines[1].split()[:10] == ["upc", "0", "0", "1", "1", "*", "<none>", "False", "0", "<none>"]
