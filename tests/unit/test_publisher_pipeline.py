"""The publisher's confirm pipeline: a revision counts as published only with every revision before it."""

from __future__ import annotations

import asyncio

import pytest

from daemons.apiserver.publisher import ConfirmPipeline

pytestmark = pytest.mark.unit


async def settle() -> None:
    """Let the loop run what is ready: the publishes, their done callbacks, a waiting ``add``."""
    for _ in range(5):
        await asyncio.sleep(0)


class Broker:
    """Publishes that wait until the test confirms or fails them, in any order."""

    def __init__(self) -> None:
        self.pending: dict[int, asyncio.Future[None]] = {}

    async def publish(self, revision: int) -> None:
        self.pending[revision] = asyncio.get_running_loop().create_future()
        await self.pending[revision]

    async def confirm(self, revision: int) -> None:
        self.pending[revision].set_result(None)
        await settle()

    async def fail(self, revision: int, error: Exception) -> None:
        self.pending[revision].set_exception(error)
        await settle()


def run(test: object) -> None:
    asyncio.run(test())  # type: ignore[operator]


def test_a_revision_counts_only_once_every_earlier_one_is_confirmed() -> None:
    async def scenario() -> None:
        broker, confirmed = Broker(), []
        pipeline = ConfirmPipeline(confirmed.append, window=10)
        for revision in (5, 6, 7):
            await pipeline.add(revision, broker.publish(revision))
        await settle()
        await broker.confirm(7)
        await broker.confirm(6)
        assert confirmed == [], "5 is not confirmed yet"
        await broker.confirm(5)
        assert confirmed == [7]
    run(scenario)


def test_a_failed_publish_holds_the_advance_and_is_raised() -> None:
    async def scenario() -> None:
        broker, confirmed = Broker(), []
        pipeline = ConfirmPipeline(confirmed.append, window=10)
        for revision in (1, 2, 3):
            await pipeline.add(revision, broker.publish(revision))
        await settle()
        await broker.confirm(1)
        await broker.fail(2, ConnectionError("broker gone"))
        await broker.confirm(3)
        assert confirmed == [1], "nothing after the failed revision counts"
        with pytest.raises(ConnectionError, match="broker gone"):
            pipeline.raise_failure()
    run(scenario)


def test_a_full_window_waits_for_the_oldest_confirm() -> None:
    async def scenario() -> None:
        broker, confirmed = Broker(), []
        pipeline = ConfirmPipeline(confirmed.append, window=2)
        await pipeline.add(1, broker.publish(1))
        adding = asyncio.ensure_future(pipeline.add(2, broker.publish(2)))
        await settle()
        assert not adding.done(), "two in flight fill a window of two"
        await broker.confirm(1)
        await asyncio.wait_for(adding, 1)
        assert confirmed == [1]
        await broker.confirm(2)
        assert confirmed == [1, 2]
    run(scenario)


def test_cancel_stops_what_is_in_flight() -> None:
    async def scenario() -> None:
        broker, confirmed = Broker(), []
        pipeline = ConfirmPipeline(confirmed.append, window=10)
        await pipeline.add(1, broker.publish(1))
        await settle()
        pipeline.cancel()
        await settle()
        assert confirmed == []
        assert broker.pending[1].cancelled()
    run(scenario)
