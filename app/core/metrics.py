"""Prometheus metrics, one registry per app (no process-global collectors)."""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,  # noqa: F401  (re-exported for the router)
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# Request latencies from 1 ms (catalog reads) to a minute (a plan at its time budget).
REQUEST_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Solve times from 10 ms (a small search) to two minutes (past the default 30 s budget).
SOLVE_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.request_duration_s = Histogram(
            "partitura_http_request_duration_seconds",
            "HTTP request latency by route template, method and status code.",
            ["method", "route", "status"],
            buckets=REQUEST_BUCKETS_S,
            registry=self.registry,
        )
        self.solve_duration_s = Histogram(
            "partitura_solve_duration_seconds",
            "Wall time of one search in the solver pool, by outcome.",
            ["outcome"],
            buckets=SOLVE_BUCKETS_S,
            registry=self.registry,
        )
        self.plans_created = Counter(
            "partitura_plans_created",
            "Plans this process stored, by status.",
            ["status"],
            registry=self.registry,
        )
        self.plans_stored = Gauge(
            "partitura_plans",
            "Plans in the database by status (read from the database at scrape time).",
            ["status"],
            registry=self.registry,
        )
        self.database_up = Gauge(
            "partitura_database_up",
            "1 when the last /metrics scrape could read the database, else 0.",
            registry=self.registry,
        )
        self.database_errors = Counter(
            "partitura_database_errors",
            "Requests answered 503 because the database failed them, by reason (unavailable: it did not"
            " answer in time or refused; not-migrated: its schema is not at the migrations' head).",
            ["reason"],
            registry=self.registry,
        )
        self.solver_slots_in_use = Gauge(
            "partitura_solver_slots_in_use",
            "Plan requests running or queued in the solver pool.",
            registry=self.registry,
        )
        self.plan_insert_races = Counter(
            "partitura_plan_insert_races",
            "Searches whose plan an identical concurrent request had already stored (unique key hit).",
            registry=self.registry,
        )
        self.plan_requests_coalesced = Counter(
            "partitura_plan_requests_coalesced",
            "Plan requests answered with the plan of an identical request that was searching when they came.",
            registry=self.registry,
        )
        self.solver_rejections = Counter(
            "partitura_solver_rejections",
            "Plan requests answered 503 because the solver pool was saturated.",
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
