"""Informers: a local cache of one resource kept current by LIST, events, and periodic resync.

The cache is filled by a LIST over HTTP and then follows events, either from
the component's durable RabbitMQ queue on the ``minik8s.events`` exchange or,
without a broker, from the apiserver's HTTP watch. Events arrive at least once
and possibly late, so every one is judged by resourceVersion against what the
cache holds (``decide_event``). A full re-LIST every ``resync_seconds`` repairs
whatever was lost and tells the handlers about every object again, which keeps
level-triggered controllers correct even when events go missing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx
import pika
import pika.exceptions

from daemons.api.client import ApiClient
from daemons.api.errors import APIError, Gone, MiniK8sError
from daemons.api.resources import Resource
from daemons.api.selectors import FieldSelectorQuery, LabelSelectorQuery
from daemons.machinery.keys import key_of, make_key, resource_version

logger = logging.getLogger(__name__)

EXCHANGE = "minik8s.events"
EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED")
RETRY_MIN_SECONDS = 0.5
# A broker or apiserver restart should cost a consumer seconds, not a long sleep after the peer is back.
RETRY_MAX_SECONDS = 2.0
PREFETCH = 200
SYNC_POLL_SECONDS = 1.0  # how often a daemon waiting for its caches looks whether it is told to stop

Obj = dict[str, Any]
DeltaType = Literal["add", "update", "delete"]
AddHandler = Callable[[Obj], None]
UpdateHandler = Callable[[Obj, Obj], None]
DeleteHandler = Callable[[Obj], None]


@dataclass(frozen=True)
class Delta:
    """One change to the cache: ``obj`` is the new state (for a delete, the final one), ``old`` what was cached.

    A delete with ``old=None`` changes nothing visible; it only records that the key
    was absent at ``obj``'s resourceVersion, so that a late event cannot bring it back.
    """

    type: DeltaType
    key: str
    obj: Obj
    old: Obj | None = None


def decide_event(
    event_type: str,
    obj: Obj,
    cached: Obj | None,
    absent_rv: int | None = None,
    floor_rv: int = 0,
    matches: bool = True,
) -> Delta | None:
    """What one event does to the cache entry of its object; ``None`` for a stale or duplicate event.

    ``cached`` is the entry held for the object's key, ``absent_rv`` the newest revision at
    which the key was seen gone (deleted, or no longer matching the selectors), ``floor_rv``
    the revision of the last LIST, which already reflects every event up to it. ``matches``
    says whether the object passes the informer's selectors: an object that stops matching
    leaves the cache as if it had been deleted, as it does from a Kubernetes watch.
    """
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    revision = resource_version(obj)
    if revision <= floor_rv:
        return None
    if cached is not None:
        if revision <= resource_version(cached):
            return None
    elif absent_rv is not None and revision <= absent_rv:
        return None
    key = key_of(obj)
    if event_type == "DELETED" or not matches:
        return Delta("delete", key, obj, cached)
    if cached is None:
        return Delta("add", key, obj)
    return Delta("update", key, obj, cached)


def diff_relist(
    cached: Mapping[str, Obj], absent: Mapping[str, int], items: Iterable[Obj], list_rv: int
) -> list[Delta]:
    """How a fresh LIST (taken at revision ``list_rv``) changes the cache.

    Every object that stays gets an update, even when unchanged, so that
    level-triggered handlers look at it again. Entries newer than the LIST come from
    events applied while it was in flight and are kept; likewise an object the LIST
    still shows is not re-added when a newer deletion of it has been seen.
    """
    deltas: list[Delta] = []
    listed: set[str] = set()
    for obj in items:
        key = key_of(obj)
        listed.add(key)
        current = cached.get(key)
        if current is None:
            if absent.get(key, 0) < resource_version(obj):
                deltas.append(Delta("add", key, obj))
        elif resource_version(current) > resource_version(obj):
            deltas.append(Delta("update", key, current, current))
        else:
            deltas.append(Delta("update", key, obj, current))
    for key, current in cached.items():
        if key in listed:
            continue
        if resource_version(current) > list_rv:
            deltas.append(Delta("update", key, current, current))
        else:
            deltas.append(Delta("delete", key, current, current))
    return deltas


class Store:
    """The cache behind an informer, readable from any thread.

    Objects are shared with every reader and handler: treat them as read-only and
    deep-copy one before changing it to write it back.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._objects: dict[str, Obj] = {}
        self._absent: dict[str, int] = {}  # key -> newest revision at which it was seen gone
        self._floor = 0  # revision of the last LIST

    def get(self, namespace: str | None, name: str) -> Obj | None:
        return self.get_by_key(make_key(namespace, name))

    def get_by_key(self, key: str) -> Obj | None:
        with self._lock:
            return self._objects.get(key)

    def list(self, namespace: str | None = None) -> list[Obj]:
        """Every cached object, or those in ``namespace``."""
        with self._lock:
            objects = list(self._objects.values())
        if namespace is None:
            return objects
        return [obj for obj in objects if (obj.get("metadata") or {}).get("namespace") == namespace]

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._objects)

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._objects

    @property
    def resource_version(self) -> int:
        """The revision of the last LIST the cache was reconciled with."""
        with self._lock:
            return self._floor

    def decide(self, event_type: str, obj: Obj, matches: bool = True) -> Delta | None:
        """``decide_event`` against the current state of the cache."""
        key = key_of(obj)
        with self._lock:
            return decide_event(event_type, obj, self._objects.get(key), self._absent.get(key), self._floor, matches)

    def apply(self, delta: Delta) -> None:
        with self._lock:
            if delta.type == "delete":
                self._objects.pop(delta.key, None)
                revision = resource_version(delta.obj)
                if revision > self._absent.get(delta.key, 0):
                    self._absent[delta.key] = revision
            else:
                self._objects[delta.key] = delta.obj
                self._absent.pop(delta.key, None)

    def replace(self, items: Iterable[Obj], list_rv: int) -> list[Delta]:
        """Reconcile with a LIST taken at ``list_rv`` and return what changed (see ``diff_relist``)."""
        with self._lock:
            deltas = diff_relist(self._objects, self._absent, items, list_rv)
            for delta in deltas:
                self.apply(delta)
            # The LIST reflects everything up to list_rv; older tombstones can no longer matter.
            self._floor = list_rv
            self._absent = {key: revision for key, revision in self._absent.items() if revision > list_rv}
            return deltas


class Informer:
    """Keeps a ``Store`` of one resource current and calls handlers for every change.

    With ``amqp_url`` it consumes the durable queue ``queue_name`` (one per component
    and resource: informers sharing a queue would split its messages); without, it
    follows the apiserver's HTTP watch. Handlers run on the informer's threads, one
    change at a time, in order: keep them short (enqueue a key and return).
    """

    def __init__(
        self,
        client: ApiClient,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        amqp_url: str | None = None,
        queue_name: str | None = None,
        resync_seconds: float = 30.0,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
        exchange: str = EXCHANGE,
        watch_timeout_seconds: int = 60,
    ) -> None:
        if amqp_url and not queue_name:
            raise ValueError("an informer reading from RabbitMQ needs a queue_name")
        self.client = client
        self.resource = resource
        self.namespace = namespace if resource.namespaced else None
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.amqp_url = amqp_url
        self.queue_name = queue_name
        self.exchange = exchange
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.name = f"{resource.plural}/{self.namespace}" if self.namespace else resource.plural
        self.store = Store()
        self._labels = LabelSelectorQuery.parse(label_selector)
        self._fields = FieldSelectorQuery.parse(field_selector)
        self._handlers: list[tuple[AddHandler | None, UpdateHandler | None, DeleteHandler | None]] = []
        if on_add or on_update or on_delete:
            self._handlers.append((on_add, on_update, on_delete))
        self._lock = threading.RLock()  # one change at a time: applied to the store, then handed to handlers
        self._relist_lock = threading.Lock()  # LISTs never overlap, so an older one never lands after a newer
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lifecycle = threading.Lock()  # start and stop may race from different threads
        self._watch_rv = 0
        self._failing = False  # a LIST or the event feed failed and no LIST has succeeded since
        self.listed_at: float | None = None
        self.recovered_at: float | None = None

    # --- handlers -----------------------------------------------------------------------------------

    def add_handlers(
        self,
        on_add: AddHandler | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: DeleteHandler | None = None,
    ) -> None:
        """Subscribe another consumer; it is first told about every object already cached, as adds."""
        with self._lock:
            self._handlers.append((on_add, on_update, on_delete))
            if on_add:
                for obj in self.store.list():
                    self._call(on_add, "add", key_of(obj), obj)

    def _notify(self, delta: Delta) -> None:
        for on_add, on_update, on_delete in self._handlers:
            if delta.type == "add" and on_add:
                self._call(on_add, "add", delta.key, delta.obj)
            elif delta.type == "update" and on_update and delta.old is not None:
                self._call(on_update, "update", delta.key, delta.old, delta.obj)
            elif delta.type == "delete" and on_delete and delta.old is not None:
                self._call(on_delete, "delete", delta.key, delta.obj)

    def _call(self, handler: Callable[..., None], kind: str, key: str, *objects: Obj) -> None:
        try:
            handler(*objects)
        except Exception:
            logger.exception("%s: %s handler failed for %s", self.name, kind, key)

    # --- applying changes ---------------------------------------------------------------------------

    def matches(self, obj: Obj) -> bool:
        """Whether ``obj`` belongs in this informer's cache (namespace and selectors)."""
        metadata = obj.get("metadata") or {}
        if self.namespace and metadata.get("namespace") != self.namespace:
            return False
        return self._labels.matches(metadata.get("labels")) and self._fields.matches(obj)

    def handle_event(self, event: Mapping[str, Any]) -> Delta | None:
        """Apply one ``{"type", "object"}`` event; return the change it made, ``None`` when dropped."""
        event_type, obj = event.get("type"), event.get("object")
        if event_type not in EVENT_TYPES or not isinstance(obj, dict):
            logger.warning("%s: ignoring malformed event of type %r", self.name, event_type)
            return None
        self._complete(obj)
        with self._lock:
            try:
                delta = self.store.decide(str(event_type), obj, self.matches(obj))
            except ValueError as error:
                logger.warning("%s: ignoring %s event: %s", self.name, event_type, error)
                return None
            if delta is None:
                logger.debug("%s: dropping stale %s of %s at resourceVersion %s", self.name, event_type,
                             key_of(obj), resource_version(obj))
                return None
            self.store.apply(delta)
            self._notify(delta)
            return delta

    def handle_message(self, routing_key: str, body: bytes) -> Delta | None:
        """Apply one message from the event exchange."""
        if routing_key.split(".", 1)[0] != self.resource.bus_topic:
            logger.debug("%s: ignoring message routed %s", self.name, routing_key)
            return None
        try:
            event = json.loads(body)
        except ValueError as error:
            logger.warning("%s: dropping undecodable message routed %s: %s", self.name, routing_key, error)
            return None
        if not isinstance(event, dict):
            logger.warning("%s: dropping message routed %s: not a JSON object", self.name, routing_key)
            return None
        return self.handle_event(event)

    def relist(self) -> list[Delta]:
        """LIST the resource and reconcile the cache with it; API and connection errors propagate.

        ``listed_at`` becomes the (monotonic) time of this LIST, and ``recovered_at`` too when
        a LIST or the event feed had failed since the previous one: from then on the cache is
        known current again, which is what a reader judging the silence of objects needs.
        """
        with self._relist_lock:
            try:
                answer = self.client.list(
                    self.resource,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    all_namespaces=self.namespace is None,
                )
            except Exception:
                self._failing = True
                raise
            items = [self._complete(obj) for obj in answer.get("items") or []]
            items = [obj for obj in items if self.matches(obj)]
            # An apiserver that leaves the list's resourceVersion out still lets us bound it from below.
            list_rv = resource_version(answer) or max(
                [self.store.resource_version, *(resource_version(obj) for obj in items)]
            )
            with self._lock:
                deltas = self.store.replace(items, list_rv)
                self.listed_at = time.monotonic()
                if self._failing:
                    self.recovered_at = self.listed_at
                    self._failing = False
                for delta in deltas:
                    self._notify(delta)
        logger.debug("%s: listed %d objects at resourceVersion %d, %d added or deleted", self.name, len(items),
                     list_rv, sum(delta.type != "update" for delta in deltas))
        return deltas

    def _complete(self, obj: Obj) -> Obj:
        """LIST items may omit kind and apiVersion; fill them in so cached objects look alike."""
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        return obj

    # --- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start following the resource in background threads; ``wait_synced`` tells when the cache is filled."""
        with self._lifecycle:
            if self._threads:
                return
            feed = self._amqp_loop if self.amqp_url else self._watch_loop
            threads = [threading.Thread(target=feed, name=f"informer-{self.name}", daemon=True)]
            if self.resync_seconds > 0:
                threads.append(
                    threading.Thread(target=self._resync_loop, name=f"informer-{self.name}-resync", daemon=True)
                )
            for thread in threads:
                thread.start()
            self._threads = threads

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following; a watch blocked on a quiet stream ends when its server timeout does."""
        self._stopping.set()
        with self._lifecycle:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first LIST has filled the cache; False if ``timeout`` passed first."""
        return self._synced.wait(timeout)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    def _retry_later(self, delay: float) -> float:
        """Sleep ``delay`` (unless stopping) and return the next, doubled, delay."""
        self._stopping.wait(delay)
        return min(delay * 2, RETRY_MAX_SECONDS)

    def _resync_loop(self) -> None:
        while not self._stopping.wait(self.resync_seconds):
            if not self._synced.is_set():
                continue  # the feed thread is still retrying the first LIST
            try:
                self.relist()
            except (MiniK8sError, httpx.HTTPError, ValueError) as error:
                logger.warning("%s: resync failed: %s", self.name, error)
            except Exception:
                logger.exception("%s: resync failed", self.name)

    @property
    def binding_key(self) -> str:
        """The topic pattern for this informer's objects: ``<bus_topic>.#``, narrowed to one namespace if it has one."""
        if self.namespace:
            return f"{self.resource.bus_topic}.{self.namespace}.#"
        return f"{self.resource.bus_topic}.#"

    def _amqp_loop(self) -> None:
        delay = RETRY_MIN_SECONDS
        while not self._stopping.is_set():
            connection: pika.BlockingConnection | None = None
            try:
                connection = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
                channel = connection.channel()
                channel.exchange_declare(self.exchange, exchange_type="topic", durable=True)
                channel.queue_declare(self.queue_name, durable=True)
                channel.queue_bind(self.queue_name, self.exchange, routing_key=self.binding_key)
                channel.basic_qos(prefetch_count=PREFETCH)
                # The queue catches every change from here on, so a LIST taken now misses nothing.
                self.relist()
                self._synced.set()
                logger.info("%s: synced %d objects; consuming queue %s", self.name, len(self.store), self.queue_name)
                delay = RETRY_MIN_SECONDS
                for method, _properties, body in channel.consume(self.queue_name, inactivity_timeout=1.0):
                    if self._stopping.is_set():
                        break
                    if method is None:
                        continue
                    self.handle_message(method.routing_key, body)
                    channel.basic_ack(method.delivery_tag)
                channel.cancel()
            except pika.exceptions.AMQPError as error:
                self._failing = True  # events may be lost until the LIST after reconnecting
                logger.warning("%s: message bus unavailable (%r); reconnecting in %.1fs", self.name, error, delay)
            except (MiniK8sError, httpx.HTTPError, ValueError) as error:
                logger.warning("%s: LIST failed (%s); retrying in %.1fs", self.name, error, delay)
            except Exception:
                logger.exception("%s: event consumer failed; restarting in %.1fs", self.name, delay)
            finally:
                if connection is not None and connection.is_open:
                    try:
                        connection.close()
                    except pika.exceptions.AMQPError:
                        logger.debug("%s: closing the broken connection failed", self.name)
            if not self._stopping.is_set():
                delay = self._retry_later(delay)

    def _watch_loop(self) -> None:
        delay = RETRY_MIN_SECONDS
        need_list = True
        while not self._stopping.is_set():
            try:
                if need_list:
                    self.relist()
                    need_list = False
                    if not self._synced.is_set():
                        self._synced.set()
                        logger.info("%s: synced %d objects; watching", self.name, len(self.store))
                if self._watch_once():
                    delay = RETRY_MIN_SECONDS
                    continue
            except Gone:
                logger.info("%s: watch position %d expired; relisting", self.name, self._watch_rv)
                need_list = True
                continue
            except (MiniK8sError, httpx.HTTPError, ValueError) as error:
                logger.warning("%s: watch failed (%s); retrying in %.1fs", self.name, error, delay)
            except Exception:
                logger.exception("%s: watch failed; retrying in %.1fs", self.name, delay)
            self._failing = True
            delay = self._retry_later(delay)

    def _watch_once(self) -> bool:
        """Follow one watch stream from the newest revision known; False if it ended at once and empty."""
        self._watch_rv = max(self._watch_rv, self.store.resource_version)
        started = time.monotonic()
        received = False
        for event in self.client.watch(
            self.resource,
            namespace=self.namespace,
            resource_version=str(self._watch_rv),
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            all_namespaces=self.namespace is None,
            timeout_seconds=self.watch_timeout_seconds,
        ):
            if self._stopping.is_set():
                return True
            received = True
            event_type, obj = event.get("type"), event.get("object") or {}
            if event_type == "ERROR":
                raise APIError.from_status(int(obj.get("code") or 500), obj)
            if event_type != "BOOKMARK":
                self.handle_event(event)
            self._watch_rv = max(self._watch_rv, resource_version(obj))
        return received or time.monotonic() - started >= 1.0


def wait_all_synced(informers: Iterable[Informer], stopping: threading.Event) -> bool:
    """Block until every informer has filled its cache; False if ``stopping`` was set first.

    Daemons start working only on full caches, so nothing is decided on a half-known cluster.
    """
    for informer in informers:
        while not informer.wait_synced(SYNC_POLL_SECONDS):
            if stopping.is_set():
                return False
            logger.debug("waiting for the %s cache", informer.name)
    return True
