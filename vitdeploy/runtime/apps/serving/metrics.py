"""The server's Prometheus metrics, kept by ``prometheus_client`` in a registry of their own (one per service).

    vitdeploy_requests_total{route,status}      answers by route (healthz, metrics, embeddings, embedding, masks,
                                                concepts, page, unknown) and HTTP status
    vitdeploy_request_seconds{route}            handling time, a histogram (buckets :data:`BUCKETS`)
    vitdeploy_requests_in_flight                requests being answered now (the queue depth of the front door)
    vitdeploy_encoder_runs_total, vitdeploy_decoder_runs_total, vitdeploy_detector_runs_total (concept prompts),
    vitdeploy_cache_hits_total
    vitdeploy_rejected_total{reason}            503s: busy (admission), replica_lost (Ray Serve)
    vitdeploy_cache_embeddings, vitdeploy_cache_capacity, vitdeploy_encodes_in_flight   gauges, read when scraped
"""

from __future__ import annotations

#: Latency histogram buckets (seconds) of /metrics.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: The counters a service increments with :meth:`Metrics.count`, and their labels.
COUNTERS = {"requests": ("route", "status"), "encoder_runs": (), "decoder_runs": (), "detector_runs": (),
            "cache_hits": (), "rejected": ("reason",)}
#: The gauges set from the service's state when /metrics is scraped.
GAUGES = ("cache_embeddings", "cache_capacity", "encodes_in_flight", "requests_in_flight")


class Metrics:
    """Counters, the latency histogram and gauges of one service; :meth:`render` is the /metrics text."""

    def __init__(self) -> None:
        import prometheus_client as prom

        prom.disable_created_metrics()  # no *_created series: a scrape shows what the docs list
        self.registry = prom.CollectorRegistry(auto_describe=True)
        self._counters = {name: prom.Counter(f"vitdeploy_{name}", name.replace("_", " "), labels, registry=self.registry)
                          for name, labels in COUNTERS.items()}
        self._seconds = prom.Histogram("vitdeploy_request_seconds", "request handling time", ("route",),
                                       buckets=BUCKETS, registry=self.registry)
        self._gauges = {name: prom.Gauge(f"vitdeploy_{name}", name.replace("_", " "), registry=self.registry)
                        for name in GAUGES}
        self._in_flight = 0  # changed by the API's front door, on the event loop only
        self._gauges["requests_in_flight"].set_function(lambda: self._in_flight)

    def count(self, name: str, value: float = 1.0, **labels: str) -> None:
        """Add ``value`` to counter ``name`` (``requests_total`` and ``requests`` are the same counter)."""
        counter = self._counters[name.removesuffix("_total")]
        (counter.labels(**labels) if labels else counter).inc(value)

    def value(self, name: str, **labels: str) -> float:
        """A counter's or gauge's value now (0 where it has no sample yet), e.g. ``value("encoder_runs_total")``."""
        return self.registry.get_sample_value(f"vitdeploy_{name}", labels) or 0.0

    def observe(self, route: str, seconds: float) -> None:
        self._seconds.labels(route=route).observe(seconds)

    def in_flight(self, change: int) -> int:
        """One more (+1) or one fewer (-1) request being answered: how many are now."""
        self._in_flight += change
        return self._in_flight

    def render(self, gauges: dict[str, float]) -> str:
        """The Prometheus text exposition, with ``gauges`` (names of :data:`GAUGES`) set first."""
        import prometheus_client as prom

        for name, value in gauges.items():
            self._gauges[name].set(value)
        return prom.generate_latest(self.registry).decode()


def content_type() -> str:
    import prometheus_client as prom

    return prom.CONTENT_TYPE_LATEST


__all__ = ["BUCKETS", "Metrics", "content_type"]
