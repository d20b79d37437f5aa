"""Smoke tests of the service fixtures: etcd and RabbitMQ really run, keep data and survive restarts."""

from __future__ import annotations

import uuid

import aetcd
import pika

from tests.conftest import EtcdProcess, RabbitMQProcess


async def _put(etcd: EtcdProcess, key: bytes, value: bytes) -> None:
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        await client.put(key, value)


async def _get(etcd: EtcdProcess, key: bytes) -> bytes | None:
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        result = await client.get(key)
        return result.value if result else None


async def test_etcd_put_get(etcd: EtcdProcess) -> None:
    key = f"/smoke/{uuid.uuid4().hex}".encode()
    await _put(etcd, key, b"hello")
    assert await _get(etcd, key) == b"hello"


async def test_etcd_keeps_data_across_kill_and_start(etcd: EtcdProcess) -> None:
    key = f"/smoke/{uuid.uuid4().hex}".encode()
    await _put(etcd, key, b"durable")
    etcd.kill()
    assert not etcd.running
    etcd.start()
    assert await _get(etcd, key) == b"durable"
    etcd.stop()
    etcd.start()
    assert await _get(etcd, key) == b"durable"


def _connect(rabbitmq: RabbitMQProcess) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(rabbitmq.url))


def test_rabbitmq_publish_consume(rabbitmq: RabbitMQProcess) -> None:
    queue = f"smoke-{uuid.uuid4().hex}"
    connection = _connect(rabbitmq)
    try:
        channel = connection.channel()
        channel.queue_declare(queue, auto_delete=True)
        channel.basic_publish("", queue, b"ping")
        method, _properties, body = next(channel.consume(queue, inactivity_timeout=10))
        assert method is not None, "no message within 10 s"
        assert body == b"ping"
        channel.basic_ack(method.delivery_tag)
        channel.cancel()
    finally:
        connection.close()


def test_rabbitmq_durable_queue_survives_restart(rabbitmq: RabbitMQProcess) -> None:
    queue = f"smoke-durable-{uuid.uuid4().hex}"
    connection = _connect(rabbitmq)
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"kept", properties=pika.BasicProperties(delivery_mode=2))
    connection.close()

    rabbitmq.stop()
    assert not rabbitmq.running
    rabbitmq.start()

    connection = _connect(rabbitmq)
    try:
        channel = connection.channel()
        _method, _properties, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"kept"
        channel.queue_delete(queue)
    finally:
        connection.close()
