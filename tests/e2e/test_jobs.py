"""Jobs and CronJobs on the installed cluster, as a user drives them with kubectl."""

from __future__ import annotations

from daemons.api.client import ApiClient
from daemons.api.resources import require
from tests.e2e.conftest import run_kubectl, wait_for

JOBS = require("batch/v1", "Job")


def failed_condition(cluster: ApiClient, namespace: str, name: str) -> dict | None:
    conditions = (cluster.get(JOBS, name, namespace).get("status") or {}).get("conditions") or []
    return next((item for item in conditions if item["type"] == "Failed" and item["status"] == "True"), None)


def test_a_job_runs_to_completion_and_its_log_is_readable(cluster: ApiClient, e2e_namespace: str) -> None:
    ns = ("-n", e2e_namespace)
    run_kubectl(*ns, "create", "job", "pi", "--image=busybox", "--", "sh", "-c", "echo 1")
    waited = run_kubectl(*ns, "wait", "--for=condition=complete", "job/pi", "--timeout=120s", timeout=150)
    assert waited.stdout == "job.batch/pi condition met\n"
    assert run_kubectl(*ns, "logs", "job/pi").stdout == "1\n"
    row = run_kubectl(*ns, "get", "jobs").stdout.splitlines()[1].split()
    assert row[:3] == ["pi", "Complete", "1/1"]


def test_a_failing_job_stops_at_its_back_off_limit(cluster: ApiClient, e2e_namespace: str) -> None:
    manifest = f"""\
apiVersion: batch/v1
kind: Job
metadata: {{name: broken, namespace: {e2e_namespace}}}
spec:
  backoffLimit: 1
  template:
    spec:
      restartPolicy: Never
      containers:
      - {{name: main, image: busybox, command: [sh, -c, "exit 3"]}}
"""
    run_kubectl("apply", "-f", "-", stdin=manifest)
    # Two pods fail: the first, and its replacement after the 10 s back-off.
    failed = wait_for(lambda: failed_condition(cluster, e2e_namespace, "broken"), timeout=150,
                      what="job broken to fail")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert cluster.get(JOBS, "broken", e2e_namespace)["status"]["failed"] == 2
    row = run_kubectl("-n", e2e_namespace, "get", "job", "broken").stdout.splitlines()[1].split()
    assert row[:3] == ["broken", "Failed", "0/1"]


def test_a_cronjob_makes_jobs_on_schedule_and_by_hand(cluster: ApiClient, e2e_namespace: str) -> None:
    ns = ("-n", e2e_namespace)
    run_kubectl(*ns, "create", "cronjob", "tick", "--image=busybox", "--schedule=*/1 * * * *", "--", "echo", "tick")
    run_kubectl(*ns, "create", "job", "tick-now", "--from=cronjob/tick")
    run_kubectl(*ns, "wait", "--for=condition=complete", "job/tick-now", "--timeout=120s", timeout=150)
    assert run_kubectl(*ns, "logs", "job/tick-now").stdout == "tick\n"

    def scheduled() -> list[dict]:
        return [job for job in cluster.list(JOBS, e2e_namespace)["items"]
                if "batch.kubernetes.io/cronjob-scheduled-timestamp" in (job["metadata"].get("annotations") or {})]

    # The first scheduled minute comes within 60 s of the CronJob's creation.
    jobs = wait_for(scheduled, timeout=75, what="the CronJob's first scheduled Job")
    job = min(jobs, key=lambda job: job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"])
    assert job["metadata"]["ownerReferences"][0]["name"] == "tick"
    row = run_kubectl(*ns, "get", "cronjob", "tick").stdout.splitlines()[1].split()
    assert row[:7] == ["tick", "*/1", "*", "*", "*", "*", "<none>"]
