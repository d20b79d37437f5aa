"""Event bus throughput: how fast committed changes reach a consumer's RabbitMQ queue, and how late.

Starts a private etcd, RabbitMQ and ``minik8s-apiserver`` (the process classes of ``tests/conftest.py``), binds
a queue to every routing key of the ``minik8s.events`` exchange, then creates N pods from several client threads
as fast as the apiserver takes them. It prints the write rate, the rate at which events reached the queue, and
each event's delay from its create request's answer to its arrival (p50/p99): the publisher must keep up with
the writes or every controller falls behind with it.

    .venv/bin/python bench/event_bus.py [--count 3000] [--writers 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pika
import pika.exceptions

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from bench.stats import percentile  # noqa: E402
from daemons.api.client import ApiClient  # noqa: E402
from daemons.api.resources import resolve  # noqa: E402
from daemons.apiserver.publisher import EXCHANGE  # noqa: E402
from tests.conftest import ApiServerProcess, EtcdProcess, RabbitMQProcess, make_pki  # noqa: E402

PODS = resolve("pods")
NAMESPACE = "default"


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}


class Consumer(threading.Thread):
    """Counts the pod events arriving on a queue bound to every routing key, with when each arrived."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.connection = pika.BlockingConnection(pika.URLParameters(url))
        self.channel = self.connection.channel()
        self.channel.exchange_declare(EXCHANGE, exchange_type="topic", durable=True)
        self.queue = self.channel.queue_declare("", exclusive=True).method.queue
        self.channel.queue_bind(self.queue, EXCHANGE, routing_key="pods.#")
        self.arrived: dict[str, float] = {}

    def run(self) -> None:
        try:
            for method, _properties, _body in self.channel.consume(self.queue, auto_ack=True):
                self.arrived.setdefault(method.routing_key.rsplit(".", 1)[-1], time.perf_counter())
        except pika.exceptions.AMQPError:
            return  # the broker stopped at the end of the run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--writers", type=int, default=8)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="minik8s-bench-bus-"))
    etcd, rabbitmq = EtcdProcess(workdir / "etcd"), RabbitMQProcess(workdir / "rabbitmq")
    server: ApiServerProcess | None = None
    try:
        print(f"starting etcd, RabbitMQ and the apiserver in {workdir} ...", flush=True)
        etcd.start()
        rabbitmq.start()
        server = ApiServerProcess(workdir / "apiserver", etcd.endpoint, rabbitmq.url, make_pki(workdir / "pki"))
        server.start()
        consumer = Consumer(rabbitmq.url)
        consumer.start()
        written: dict[str, float] = {}
        client = server.client()

        def create(index: int) -> None:
            name = f"bus-{index}"
            with ApiClient(client.connection) as own:
                own.create(PODS, pod(name), NAMESPACE)
            written[name] = time.perf_counter()

        started = time.perf_counter()
        with ThreadPoolExecutor(args.writers) as pool:
            list(pool.map(create, range(args.count)))
        writes_done = time.perf_counter()
        deadline = time.monotonic() + 600
        while len(consumer.arrived) < args.count and time.monotonic() < deadline:
            time.sleep(0.1)
        received = sorted(consumer.arrived.values())
        delays = [consumer.arrived[name] - written[name] for name in written if name in consumer.arrived]
        print(f"{args.count} pods from {args.writers} writers; {len(received)} events arrived")
        print(f"writes      {args.count / (writes_done - started):8.0f} /s")
        print(f"events      {len(received) / (received[-1] - started):8.0f} /s (first write to last event)")
        print(f"delay       p50 {statistics.median(delays) * 1000:8.0f} ms   p99 "
              f"{percentile(delays, 99) * 1000:8.0f} ms   max {max(delays) * 1000:8.0f} ms")
    finally:
        if server is not None:
            server.stop()
        rabbitmq.terminate()
        etcd.stop()


if __name__ == "__main__":
    main()
