"""The event publisher: every committed change, in revision order, onto RabbitMQ.

It follows one etcd watch over ``/registry/`` and publishes each event with
publisher confirms to the topic exchange ``minik8s.events`` under
``<bus_topic>.<namespace>.<name>`` (``_`` for cluster-scoped objects). The last
confirmed revision is checkpointed in etcd, outside ``/registry/``; after any crash or broker outage it resumes from
the checkpoint, so consumers may see an event twice but never miss one.

Publishes are pipelined: up to ``PUBLISH_WINDOW`` messages wait for the broker's
confirm at once, and a revision counts as published only when it and every
revision before it are confirmed. Waiting for each confirm in turn would cap the
whole cluster's event rate at one broker round trip per event.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import aio_pika
import aio_pika.abc
import aiormq.exceptions
from prometheus_client import Counter, Gauge

from daemons.api.errors import Gone, ServiceUnavailable
from daemons.api.resources import RESOURCES
from daemons.apiserver.storage import Storage, StoredEvent

log = logging.getLogger(__name__)

EXCHANGE = "minik8s.events"
CHECKPOINT_KEY = "/minik8s/publisher/revision"
CLUSTER_SCOPE = "_"
# Messages awaiting the broker's confirm at once; more waits for the oldest to be confirmed.
PUBLISH_WINDOW = 256

PUBLISHED = Counter("apiserver_events_published_total", "Watch events published to the event bus", ["resource"])
PUBLISHED_REVISION = Gauge("apiserver_events_published_revision", "The last etcd revision confirmed by the broker")

_TOPIC_BY_STORAGE_NAME = {resource.qualified_name: resource.bus_topic for resource in RESOURCES}


def routing_key(storage_key: str) -> str | None:
    """``/registry/replicasets.apps/default/web`` → ``replicasets:apps.default.web``; None for unknown keys.

    The first word is the row's ``bus_topic``, so two kinds of one plural in different groups never share a key.
    """
    parts = storage_key.removeprefix("/registry/").split("/")
    topic = _TOPIC_BY_STORAGE_NAME.get(parts[0])
    if topic is None or len(parts) not in (2, 3):
        return None
    namespace, name = (parts[1], parts[2]) if len(parts) == 3 else (CLUSTER_SCOPE, parts[1])
    return f"{topic}.{namespace}.{name}"


def event_body(event: StoredEvent) -> bytes:
    return json.dumps({"type": event.type, "object": event.object}, separators=(",", ":")).encode()


class EventPublisher:
    """Runs until cancelled, reconnecting to etcd and RabbitMQ with back-off.

    The back-off stays short: every daemon waits on this one stream, so each second it sleeps after the broker
    or etcd is back is a second the whole cluster acts on stale events (a restart costs a few seconds).
    """

    def __init__(self, storage: Storage, amqp_url: str, checkpoint_interval: float = 0.5,
                 max_backoff: float = 2.0) -> None:
        self.storage = storage
        self.amqp_url = amqp_url
        self.checkpoint_interval = checkpoint_interval
        self.max_backoff = max_backoff
        self.published: int | None = None
        self._checkpointed: int | None = None

    async def _resume_point(self) -> int:
        """After the last confirmed revision; with no checkpoint (a first start, or an apiserver killed before
        its first checkpoint), from the beginning of etcd's history, so no write before this start is skipped.
        Consumers drop what they saw already; a compacted history falls back to the current revision."""
        if self.published is not None:
            return self.published + 1
        stored = await self.storage.get_raw(CHECKPOINT_KEY)
        if stored is not None:
            self.published = self._checkpointed = int(stored)
            return self.published + 1
        return 1

    async def _checkpoint(self) -> None:
        if self.published is not None and self.published != self._checkpointed:
            await self.storage.put_raw(CHECKPOINT_KEY, str(self.published).encode())
            self._checkpointed = self.published

    async def _checkpoint_loop(self) -> None:
        while True:
            await asyncio.sleep(self.checkpoint_interval)
            try:
                await self._checkpoint()
            except ServiceUnavailable as error:
                log.warning("cannot checkpoint the published revision: %s", error)

    async def run(self) -> None:
        backoff = 0.2
        checkpointer = asyncio.create_task(self._checkpoint_loop())
        try:
            while True:
                try:
                    await self._publish_from(await self._resume_point())
                except Gone as error:
                    current = await self.storage.revision()
                    log.error("event history before revision %s is compacted (%s); consumers must resync",
                              current, error)
                    self.published = current
                except (ServiceUnavailable, aio_pika.exceptions.AMQPException, aiormq.exceptions.AMQPError,
                        ConnectionError, OSError, TimeoutError) as error:
                    log.warning("event publishing interrupted (%s); retrying in %.1fs", error, backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                except Exception:
                    # A bug must not stop the event bus for good: log it and resume from the last confirmed event.
                    log.exception("event publishing failed unexpectedly; retrying in %.1fs", backoff)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, self.max_backoff)
                    continue
                backoff = 0.2
        finally:
            checkpointer.cancel()
            try:
                await self._checkpoint()
            except ServiceUnavailable:
                log.warning("could not write the final publisher checkpoint")

    async def _publish_from(self, start_revision: int) -> None:
        connection = await aio_pika.connect(self.amqp_url, timeout=10)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            exchange = await channel.declare_exchange(EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True)
            log.info("publishing events from revision %s to %s", start_revision, EXCHANGE)
            events = await self.storage.watch("/registry/", start_revision)
            pipeline = ConfirmPipeline(self._confirmed)
            last_log = time.monotonic()
            try:
                async for event in events:
                    pipeline.raise_failure()
                    await pipeline.add(event.revision, self._publish(exchange, event))
                    if time.monotonic() - last_log > 60:
                        log.info("published up to revision %s", self.published)
                        last_log = time.monotonic()
            finally:
                pipeline.cancel()

    def _confirmed(self, revision: int) -> None:
        self.published = revision
        PUBLISHED_REVISION.set(revision)

    async def _publish(self, exchange: aio_pika.abc.AbstractExchange, event: StoredEvent) -> None:
        key = routing_key(event.key)
        if key is None:
            return
        message = aio_pika.Message(
            event_body(event),
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            headers={"revision": event.revision},
        )
        await exchange.publish(message, routing_key=key)
        PUBLISHED.labels(key.split(".", 1)[0]).inc()


class ConfirmPipeline:
    """Publishes in flight, in revision order; ``on_confirmed`` hears the newest revision confirmed with all before it.

    A failed publish stops the advance at the revision before it; ``raise_failure``
    then raises its error, so the caller reconnects and resumes from what is confirmed.
    """

    def __init__(self, on_confirmed: Callable[[int], None], window: int = PUBLISH_WINDOW) -> None:
        self._on_confirmed = on_confirmed
        self._window = window
        self._in_flight: deque[tuple[int, asyncio.Task[None]]] = deque()
        self._failure: BaseException | None = None

    async def add(self, revision: int, publish: Coroutine[Any, Any, None]) -> None:
        """Start ``publish``; wait while the window is full."""
        task = asyncio.ensure_future(publish)
        self._in_flight.append((revision, task))
        task.add_done_callback(lambda _task: self._advance())
        while len(self._in_flight) >= self._window and self._failure is None:
            await asyncio.wait([self._in_flight[0][1]])
        self.raise_failure()

    def _advance(self) -> None:
        newest: int | None = None
        while self._in_flight and self._in_flight[0][1].done():
            revision, task = self._in_flight[0]
            if task.cancelled() or task.exception() is not None:
                self._failure = self._failure or (task.exception() if not task.cancelled()
                                                  else ConnectionError("publish cancelled"))
                break
            self._in_flight.popleft()
            newest = revision
        if newest is not None:
            self._on_confirmed(newest)

    def raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    def cancel(self) -> None:
        for _revision, task in self._in_flight:
            task.cancel()
