"""The reranker service's Prometheus metrics: requests by status, latency, batch sizes, model time, readiness,
queue and connections."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    """Prometheus metrics of one app (own registry, so several apps can live in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("hsp_reranker_requests", "rerank requests by HTTP status", ["status"],
                                registry=self.registry)
        self.latency = Histogram("hsp_reranker_request_seconds", "rerank request latency",
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                 registry=self.registry)
        self.batch_requests = Histogram("hsp_reranker_batch_requests", "requests per model call",
                                        buckets=(1, 2, 4, 8, 16, 32, 64), registry=self.registry)
        self.batch_pairs = Histogram("hsp_reranker_batch_pairs", "pairs per model call",
                                     buckets=(1, 8, 16, 32, 64, 128, 256, 512, 1024), registry=self.registry)
        self.model_seconds = Histogram("hsp_reranker_model_seconds", "seconds per model call",
                                       registry=self.registry)
        self.ready = Gauge("hsp_reranker_ready", "1 once the model is loaded", registry=self.registry)
        self.queued = Gauge("hsp_reranker_queued_requests", "requests waiting for the model", registry=self.registry)
        self.refused = Counter("hsp_reranker_refused", "requests refused with 503 because the queue was full",
                               registry=self.registry)
        self.connections = Gauge("hsp_reranker_connections", "client connections open", registry=self.registry)
        self.connections_refused = Gauge("hsp_reranker_connections_refused", "connections refused over "
                                         "max_connections since start", registry=self.registry)
        self.slow_clients = Gauge("hsp_reranker_slow_clients_cut", "connections cut off since start for sending "
                                  "headers slower than header_timeout", registry=self.registry)

    def on_batch(self, n_requests: int, n_pairs: int, seconds: float) -> None:
        self.batch_requests.observe(n_requests)
        self.batch_pairs.observe(n_pairs)
        self.model_seconds.observe(seconds)
