"""The reconcile loop's error handling, expectations, and object keys."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from daemons.api.errors import Conflict
from daemons.machinery.controller import (
    Controller,
    Expectations,
    PermanentError,
    TemporaryError,
    key_of,
    split_key,
)

pytestmark = pytest.mark.unit


class FakeSync:
    """Fails with the scripted exceptions, one per call, then succeeds."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls: list[str] = []

    def __call__(self, key: str) -> None:
        self.calls.append(key)
        if self.failures:
            raise self.failures.pop(0)


def test_success_forgets_the_back_off() -> None:
    sync = FakeSync()
    controller = Controller("test", sync)
    controller.queue.backoff.when("default/a")
    controller.enqueue("default/a")
    assert controller.process_next(timeout=0)
    assert sync.calls == ["default/a"]
    assert controller.queue.num_requeues("default/a") == 0
    assert len(controller.queue) == 0


def test_temporary_error_retries_with_growing_back_off_until_success() -> None:
    sync = FakeSync(TemporaryError("no node yet"), TemporaryError("still none"))
    controller = Controller("test", sync, base_delay=0.01, max_delay=1.0)
    controller.enqueue("default/a")
    assert controller.process_next(timeout=0)
    assert controller.queue.num_requeues("default/a") == 1
    assert controller.queue.get(timeout=0) is None, "the retry waits for its back-off"
    assert controller.process_next(timeout=1)
    assert controller.queue.num_requeues("default/a") == 2
    assert controller.process_next(timeout=1)
    assert sync.calls == ["default/a"] * 3
    assert controller.queue.num_requeues("default/a") == 0


def test_temporary_error_with_delay_requeues_after_that_delay() -> None:
    controller = Controller("test", FakeSync(TemporaryError("wait for the image", delay=30)))
    controller.enqueue("default/a")
    controller.process_next(timeout=0)
    assert controller.queue.delayed == 1
    assert controller.queue.num_requeues("default/a") == 0


def test_permanent_error_drops_the_key(caplog: pytest.LogCaptureFixture) -> None:
    sync = FakeSync(PermanentError("spec.replicas is negative"))
    controller = Controller("test", sync)
    controller.enqueue("default/a")
    with caplog.at_level(logging.ERROR):
        controller.process_next(timeout=0)
    assert len(controller.queue) == 0 and controller.queue.delayed == 0
    assert "default/a" in caplog.text and "spec.replicas is negative" in caplog.text


def test_unexpected_exception_is_retried_and_logged_with_traceback(caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller("test", FakeSync(KeyError("spec")))
    controller.enqueue("default/a")
    with caplog.at_level(logging.ERROR):
        controller.process_next(timeout=0)
    assert controller.queue.num_requeues("default/a") == 1
    record = next(record for record in caplog.records if "default/a" in record.getMessage())
    assert record.exc_info is not None


def test_conflict_is_retried_quietly(caplog: pytest.LogCaptureFixture) -> None:
    controller = Controller("test", FakeSync(Conflict("the object has been modified")))
    controller.enqueue("default/a")
    with caplog.at_level(logging.INFO):
        controller.process_next(timeout=0)
    assert controller.queue.num_requeues("default/a") == 1
    assert all(record.exc_info is None for record in caplog.records)


def test_enqueue_object_uses_the_object_key() -> None:
    controller = Controller("test", FakeSync())
    controller.enqueue_object({"metadata": {"name": "web", "namespace": "prod"}})
    controller.enqueue_object({"metadata": {"name": "node-1"}})
    assert [controller.queue.get(timeout=0), controller.queue.get(timeout=0)] == ["prod/web", "node-1"]


def test_workers_sync_until_stopped() -> None:
    synced: list[str] = []
    all_seen = threading.Event()

    def sync(key: str) -> None:
        synced.append(key)
        if len(synced) == 10:
            all_seen.set()

    controller = Controller("test", sync, workers=3)
    runner = threading.Thread(target=controller.run, daemon=True)
    runner.start()
    for index in range(10):
        controller.enqueue(f"default/pod-{index}")
    assert all_seen.wait(5)
    controller.stop()
    runner.join(5)
    assert not runner.is_alive()
    assert sorted(synced) == sorted(f"default/pod-{index}" for index in range(10))
    assert not controller.process_next(timeout=0)


def test_controller_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        Controller("test", FakeSync(), workers=0)


# --- expectations -----------------------------------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_unknown_key_is_satisfied() -> None:
    assert Expectations().satisfied("default/rs")


def test_creations_must_all_be_observed() -> None:
    expectations = Expectations()
    expectations.expect_creations("default/rs", 2)
    assert not expectations.satisfied("default/rs")
    expectations.creation_observed("default/rs")
    assert expectations.pending("default/rs") == (1, 0)
    assert not expectations.satisfied("default/rs")
    expectations.creation_observed("default/rs")
    assert expectations.satisfied("default/rs")
    expectations.creation_observed("default/rs")
    assert expectations.pending("default/rs") == (0, 0)


def test_deletions_count_each_victim_once() -> None:
    expectations = Expectations()
    expectations.expect_deletions("default/rs", ["default/p1", "default/p2"])
    expectations.deletion_observed("default/rs", "default/p1")
    expectations.deletion_observed("default/rs", "default/p1")
    assert not expectations.satisfied("default/rs")
    expectations.deletion_observed("default/rs", "default/unrelated")
    assert expectations.pending("default/rs") == (0, 1)
    expectations.deletion_observed("default/rs", "default/p2")
    assert expectations.satisfied("default/rs")


def test_expectations_expire_after_the_ttl() -> None:
    clock = FakeClock()
    expectations = Expectations(clock=clock)
    expectations.expect_creations("default/rs", 3)
    clock.now += 299
    assert not expectations.satisfied("default/rs")
    clock.now += 2
    assert expectations.satisfied("default/rs")
    expectations.expect_creations("default/rs", 1)
    assert not expectations.satisfied("default/rs"), "a new expectation starts a new TTL"


def test_observations_for_other_keys_and_delete() -> None:
    expectations = Expectations()
    expectations.expect_creations("default/rs", 1)
    expectations.creation_observed("default/other")
    assert not expectations.satisfied("default/rs")
    expectations.delete("default/rs")
    assert expectations.satisfied("default/rs")


def test_expectations_are_safe_across_threads() -> None:
    expectations = Expectations()
    expectations.expect_creations("default/rs", 400)
    threads = [threading.Thread(target=lambda: [expectations.creation_observed("default/rs") for _ in range(100)])
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert expectations.satisfied("default/rs")


# --- keys -------------------------------------------------------------------------------------------

def test_keys_round_trip() -> None:
    assert key_of({"metadata": {"name": "web.v1", "namespace": "prod"}}) == "prod/web.v1"
    assert key_of({"metadata": {"name": "node-1"}}) == "node-1"
    assert split_key("prod/web.v1") == ("prod", "web.v1")
    assert split_key("node-1") == (None, "node-1")


@pytest.mark.parametrize("key", ["/a", "ns/", "a/b/c"])
def test_malformed_keys_are_rejected(key: str) -> None:
    with pytest.raises(ValueError):
        split_key(key)


def test_object_without_name_has_no_key() -> None:
    with pytest.raises(ValueError):
        key_of({"metadata": {"generateName": "web-"}})


def test_run_blocks_until_stop() -> None:
    controller = Controller("test", FakeSync())
    runner = threading.Thread(target=controller.run, daemon=True)
    runner.start()
    time.sleep(0.05)
    assert runner.is_alive()
    controller.stop()
    runner.join(5)
    assert not runner.is_alive()
