"""What the broker metrics cost: broker CPU with and without ``metrics.listener``, and the time
of one scrape of a broker with 1,000 partitions.

Run from the repository root with the project's virtualenv::

    python bench/metrics_overhead.py [--records 2000000] [--rounds 3] [--partitions 1000]

1. **Produce CPU, same run.** Two one-broker dev clusters run side by side: ``off`` (no
   ``metrics.listener``, today's default) and ``on`` (``metrics.listener`` set, scraped every
   ``--scrape-interval`` seconds during its phases, as Prometheus would). Rounds alternate
   off/on; each phase produces ``--records`` records of ``--record-size`` bytes (acks=1,
   batching as bench/produce_consume.py) to a 1-partition topic and measures the broker's
   CPU seconds (utime + stime from /proc). Reported: the median broker CPU seconds per million
   records of each set-up and the difference in percent.
2. **Recording cost.** The recorders run in both set-ups (a broker records even without a
   listener, so recording needs no ``if``); their cost is measured apart: the per-request
   recording (``RequestTiming`` + ``RequestMetrics.record`` + ``BrokerTopicMetrics``) timed with
   ``timeit`` in process, times the Produce requests the ``on`` broker counted in its phases,
   as a percentage of that broker's CPU in those phases.
3. **Scrape time.** On the ``on`` broker, a topic with ``--partitions`` partitions gets a few
   records in every partition; then ``--scrapes`` scrapes of ``/metrics`` are timed end to end
   (HTTP GET to the last byte) one after the other. Reported: median and maximum, the body size
   and the number of samples.

Progress goes to stderr; the results table to stdout, and JSON to
``bench/results/metrics-overhead-<UTC timestamp>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
import timeit
from pathlib import Path
from typing import Any

import httpx
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from measure import BenchmarkError, PhaseResult, log, run_main, write_results
from producing import timed_produce
from prometheus_client.parser import text_string_to_metric_families

from loglake.broker.metrics.registry import BrokerMetrics
from loglake.broker.metrics.request_timing import RequestTiming
from loglake.catalog.zookeeper import ClusterCatalog
from loglake.dev.harness import DevCluster, wait_until

RESULTS_DIR = Path(__file__).parent / "results"
ADMIN_TIMEOUT_S = 60.0
TOPIC = "metrics-bench"
WIDE_TOPIC = "metrics-bench-wide"


def _broker_pid(cluster: DevCluster) -> int:
    for process in cluster.status():
        if process.role == "broker" and process.alive:
            return process.pid
    raise BenchmarkError("the dev cluster's broker is not running")


def _metrics_url(cluster: DevCluster) -> str:
    catalog = ClusterCatalog(cluster.zookeeper_connect, mode="tool")
    catalog.start()
    try:
        urls: dict[int, str] = wait_until(catalog.metrics_urls, 30, "the metrics URL")
        return urls[1]
    finally:
        catalog.stop()


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                            replication_factor=1)],
                                  operation_timeout=ADMIN_TIMEOUT_S)
    futures[name].result(timeout=ADMIN_TIMEOUT_S)

    def led() -> bool:
        topic = admin.list_topics(name, timeout=ADMIN_TIMEOUT_S).topics.get(name)
        return bool(topic is not None and topic.error is None
                    and len(topic.partitions) == partitions
                    and all(p.leader >= 0 for p in topic.partitions.values()))

    wait_until(led, ADMIN_TIMEOUT_S, f"leaders for every partition of {name}")


def _producer_settings(bootstrap: str) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "acks": "1", "compression.type": "none",
            "enable.idempotence": False, "linger.ms": 5, "batch.num.messages": 10000,
            "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
            "delivery.report.only.error": True}


def _scrape(url: str) -> tuple[float, str]:
    started = time.perf_counter()
    response = httpx.get(url, timeout=30)
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise BenchmarkError(f"scrape of {url}: HTTP {response.status_code}")
    return elapsed, response.text


def _produce_requests(text: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "kafka_network_requestmetrics_requests_total"
               and sample.labels.get("request") == "Produce")


class Scraper:
    """Scrapes ``url`` every ``interval`` seconds in a thread while in a ``with`` block."""

    def __init__(self, url: str, interval: float) -> None:
        self.url = url
        self.interval = interval
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            _scrape(self.url)
            self.count += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def recording_seconds_per_request(iterations: int = 200_000) -> float:
    """In process: one Produce request's recording (timing, phases, per-topic counters)."""
    metrics = BrokerMetrics(process_metrics=False)
    requests, topics = metrics.requests, metrics.topics

    def one() -> None:
        timing = RequestTiming()
        timing.start(0, "Produce", 9)
        topics.appended("t", 1000, 110_000)
        topics.produce_answered("t", False)
        timing.finish(None)
        timing.record(requests)

    return min(timeit.repeat(one, number=iterations, repeat=3)) / iterations


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    payload = b"x" * args.record_size
    results: dict[str, list[PhaseResult]] = {"off": [], "on": []}
    produce_requests_on = 0.0
    cpu_on = 0.0
    with DevCluster(work / "off", brokers=1) as off, DevCluster(
            work / "on", brokers=1,
            broker_overrides={"metrics.listener": "http://127.0.0.1:0"}) as on:
        clusters = {"off": off, "on": on}
        url = _metrics_url(on)
        log(f"  metrics at {url}")
        for cluster in clusters.values():
            _create_topic(cluster.bootstrap_servers, TOPIC, 1)
        for round_index in range(args.rounds):
            for name in ("off", "on"):
                cluster = clusters[name]
                pid = _broker_pid(cluster)
                label = f"round {round_index + 1} {name}"
                if name == "on":
                    before = _produce_requests(_scrape(url)[1])
                    with Scraper(url, args.scrape_interval):
                        result = timed_produce(
                            _producer_settings(cluster.bootstrap_servers), TOPIC, payload,
                            args.records, label=label, pids=[pid],
                            phase_timeout=args.phase_timeout)
                    produce_requests_on += _produce_requests(_scrape(url)[1]) - before
                    cpu_on += result.cpu_seconds or 0.0
                else:
                    result = timed_produce(
                        _producer_settings(cluster.bootstrap_servers), TOPIC, payload,
                        args.records, label=label, pids=[pid], phase_timeout=args.phase_timeout)
                results[name].append(result)
                log(f"  {label}: {result.records_per_s:,.0f} rec/s, broker CPU "
                    f"{result.cpu_s_per_million:.2f} s per million records")
        log(f"  creating {args.partitions} partitions for the scrape")
        _create_topic(on.bootstrap_servers, WIDE_TOPIC, args.partitions)
        producer = Producer(_producer_settings(on.bootstrap_servers))
        for index in range(args.partitions * 3):
            producer.produce(WIDE_TOPIC, payload, partition=index % args.partitions)
        if producer.flush(60) != 0:
            raise BenchmarkError("records for the wide topic were not delivered")
        del producer  # closed before the clusters stop
        _scrape(url)  # warm
        scrapes: list[float] = []
        text = ""
        for _ in range(args.scrapes):
            elapsed, text = _scrape(url)
            scrapes.append(elapsed)
        samples = sum(len(family.samples) for family in text_string_to_metric_families(text))
    per_request = recording_seconds_per_request()
    cpu = {name: statistics.median(r.cpu_s_per_million or 0.0 for r in rows)
           for name, rows in results.items()}
    rate = {name: statistics.median(r.records_per_s for r in rows)
            for name, rows in results.items()}
    return {
        "records_per_phase": args.records,
        "record_size": args.record_size,
        "rounds": args.rounds,
        "scrape_interval_s": args.scrape_interval,
        "records_per_s": rate,
        "broker_cpu_s_per_million": cpu,
        "listener_overhead_percent": 100.0 * (cpu["on"] - cpu["off"]) / cpu["off"],
        "recording_us_per_produce_request": per_request * 1e6,
        "produce_requests_on": produce_requests_on,
        "recording_percent_of_broker_cpu": 100.0 * per_request * produce_requests_on
        / max(cpu_on, 1e-9),
        "scrape_partitions": args.partitions,
        "scrape_ms_median": 1000 * statistics.median(scrapes),
        "scrape_ms_max": 1000 * max(scrapes),
        "scrape_bytes": len(text.encode()),
        "scrape_samples": samples,
        "phases": {name: [r.to_json() for r in rows] for name, rows in results.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scrape-interval", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--phase-timeout", type=float, default=300.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    if min(args.records, args.rounds, args.partitions, args.scrapes) < 1:
        parser.error("--records, --rounds, --partitions and --scrapes must be at least 1")
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as work:
        document = run(args, Path(work))
    print(f"{'':<38}{'off':>14}{'on':>14}")
    print(f"{'produce records/s (median)':<38}{document['records_per_s']['off']:>14,.0f}"
          f"{document['records_per_s']['on']:>14,.0f}")
    print(f"{'broker CPU s per million records':<38}"
          f"{document['broker_cpu_s_per_million']['off']:>14.3f}"
          f"{document['broker_cpu_s_per_million']['on']:>14.3f}")
    print(f"listener + scrapes overhead: {document['listener_overhead_percent']:+.1f} % "
          "(target < 3 %)")
    print(f"recording: {document['recording_us_per_produce_request']:.2f} us per Produce "
          f"request = {document['recording_percent_of_broker_cpu']:.2f} % of broker CPU "
          "(in both set-ups)")
    print(f"scrape of {document['scrape_partitions']} partitions: median "
          f"{document['scrape_ms_median']:.1f} ms, max {document['scrape_ms_max']:.1f} ms "
          f"({document['scrape_bytes']:,} bytes, {document['scrape_samples']:,} samples; "
          "target < 200 ms)")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    write_results(args.results_dir, f"metrics-overhead-{stamp}", document)
    return 0


if __name__ == "__main__":
    run_main(main)
