"""`GET /metrics`: what the server does, in Prometheus' text format, per database.

Gauges read the queue when scraped (waiting and running requests); counters and histograms are
updated as each request ends (by outcome: answered, no_answer, error, cancelled, refused; the
tokens its episode generated, evaluated as prompt and restored from a saved prefix; seconds it
ran and waited). Each server has a registry of its own, not prometheus-client's global one, so
several servers in one process (tests, benchmarks) never share or clash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from edge_sql.errors import Cancelled, RetryLater

if TYPE_CHECKING:
    from edge_sql.agent.stats import EpisodeStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUTCOMES = ("answered", "no_answer", "error", "cancelled", "refused")
EPISODE_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
QueueState = Callable[[], dict[str, tuple[int, int]]]  # database -> (waiting, running)


def outcome_of(result_stop: str | None, has_sql: bool, error: Exception | None) -> str:
    """One of OUTCOMES for a finished request (result_stop is None when there was no episode result)."""
    if result_stop == "cancelled" or isinstance(error, Cancelled):
        return "cancelled"
    if isinstance(error, RetryLater):
        return "refused"
    if result_stop is None or (result_stop == "error" and not has_sql):
        return "error"
    return "answered" if has_sql else "no_answer"


class _QueueCollector(Collector):
    def __init__(self, databases: list[str], state: QueueState) -> None:
        self.databases = databases
        self.state = state

    def collect(self) -> Iterator[Metric]:
        waiting = GaugeMetricFamily("edge_sql_queue_waiting", "Requests waiting in the queue", labels=["database"])
        running = GaugeMetricFamily("edge_sql_episodes_running", "Episodes running now", labels=["database"])
        state = self.state()
        for name in self.databases:
            queued, active = state.get(name, (0, 0))
            waiting.add_metric([name], queued)
            running.add_metric([name], active)
        yield waiting
        yield running


class ServeMetrics:
    """The server's registry and the few calls that update it."""

    def __init__(self, databases: list[str], queue_state: QueueState) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_QueueCollector(databases, queue_state))
        labels = ["database"]
        self.episodes = Counter(
            "edge_sql_episodes", "Requests ended, by outcome", [*labels, "outcome"], registry=self.registry
        )
        self.generated = Counter(
            "edge_sql_generated_tokens", "Tokens the model generated", labels, registry=self.registry
        )
        self.prompt = Counter("edge_sql_prompt_tokens", "Prompt tokens evaluated", labels, registry=self.registry)
        self.restored = Counter(
            "edge_sql_prefix_tokens_restored",
            "Prompt tokens restored from a saved prefix",
            labels,
            registry=self.registry,
        )
        self.episode_s = Histogram(
            "edge_sql_episode_seconds",
            "Seconds an episode ran",
            labels,
            buckets=EPISODE_BUCKETS,
            registry=self.registry,
        )
        self.wait_s = Histogram(
            "edge_sql_queue_wait_seconds",
            "Seconds a request waited before its episode started",
            labels,
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        for name in databases:  # every series from the start, at 0
            for outcome in OUTCOMES:
                self.episodes.labels(name, outcome)
            for family in (self.generated, self.prompt, self.restored, self.episode_s, self.wait_s):
                family.labels(name)

    def ended(
        self,
        database: str,
        outcome: str,
        stats: EpisodeStats | None = None,
        *,
        waited_s: float | None = None,
        ran_s: float | None = None,
    ) -> None:
        """A request ended: its outcome, its episode's token counts, how long it waited and ran."""
        self.episodes.labels(database, outcome).inc()
        if stats is not None and stats.figures is not None:
            timings = stats.figures.timings
            self.generated.labels(database).inc(timings.generated_tokens)
            self.prompt.labels(database).inc(timings.prompt_tokens)
            self.restored.labels(database).inc(timings.restored_tokens)
        if waited_s is not None:
            self.wait_s.labels(database).observe(waited_s)
        if ran_s is not None:
            self.episode_s.labels(database).observe(ran_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
