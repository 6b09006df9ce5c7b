"""The service under load and faults (issue 17, "How we know it works"), against the real server.

Run: ``python bench/load.py`` (``--backends sqlite``, ``--sizes 8,32`` to run less). For each
backend (SQLite, and Postgres at PARTITURA_TEST_POSTGRES_URL: a fresh database created, migrated
with ``partitura db upgrade`` and dropped afterwards) it starts ``partitura serve`` as a
subprocess on a free port and sends, for N = 8, 32, 100:

- N concurrent identical ``POST /v1/plans`` (a body no earlier round used): status counts, p50/p99
  latency, searches run (the service's solve-time histogram in ``/metrics``), plans stored (its
  ``partitura_plans`` gauge, read from the database). Target: exactly one search, one plan.
- N concurrent distinct requests: first-try status counts; beyond the solver pool's capacity the
  answer is 429/503 with ``Retry-After``, which the client honours (plus up to 50% jitter) until it
  succeeds. Target: every request succeeds, every 429/503 carries Retry-After.

Then two faults in the middle of a distinct load of 32 clients that retry (connection errors
too): ``kill -9`` of the server, which is started again on the same port and database (every plan
the client was answered 200/201 for must still be readable; no process of the killed server's
process group, its solver workers, may outlive it), and on Postgres a restart of the cluster
(``pg_ctlcluster ... restart``; no 5xx other than 503 with Retry-After, no acknowledged plan
lost). Every server is also stopped with SIGTERM at the end and must leave no process behind.

No 5xx at any N: a 503 with Retry-After is the service's overload and database-outage answer and
is counted as such; any other 5xx, or a 503 without Retry-After, breaks the target. The exit code
is 0 when every target holds, else 1 with the broken targets printed. The searches are GPT-3 13B
on 128 A100-80GB (about 0.2 s each alone); the servers run with the default 2 solver workers and
queue depth 4, and ``PARTITURA_RETRY_AFTER_S=1`` so that 100 clients drain in seconds rather
than minutes (the service still asks for longer when its backlog needs it).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
PARTITURA = Path(sys.executable).parent / "partitura"
POSTGRES_ADMIN_URL = os.environ.get(
    "PARTITURA_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
SIZES = (8, 32, 100)
FAULT_CLIENTS = 32
# The server as `make run` starts it, but a 1 s floor for Retry-After (the default 5 s would make
# 100 clients take minutes to drain two solver processes).
SERVER_ENV = {
    "PARTITURA_SOLVER_WORKERS": "2",
    "PARTITURA_SOLVER_QUEUE_DEPTH": "4",
    "PARTITURA_RETRY_AFTER_S": "1",
    "PARTITURA_PLAN_TIME_BUDGET_S": "10",
}
START_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 120.0
# A client gives up on a request (a failure) this long after its first attempt.
CLIENT_DEADLINE_S = 180.0
# After kill -9, how long the killed server's processes get to notice and exit.
ORPHAN_GRACE_S = 15.0
# Wait before retrying after a connection error (the server is down) or a 5xx without Retry-After.
RECONNECT_WAIT_S = 0.5
# A client waits Retry-After x (1 + up to this fraction), so refused clients do not return at once.
CLIENT_JITTER_FRACTION = 0.5

_bodies = itertools.count()


def plan_body() -> dict:
    """A plan request no earlier request used: GPT-3 13B on 128 A100-80GB (a search of about
    0.2 s); ``train_tokens`` makes it unique without changing the search."""
    number = next(_bodies)
    return {
        "model": "gpt3-13b",
        "cluster": "dgx-a100-80gb",
        "num_gpus": 128,
        "training": {"global_batch_size": 1024, "seq_length": 2048, "train_tokens": 3e11 + number * 1e6},
        "top_k": 1,
        "time_budget_s": 10,
        "objective": "max_throughput",
    }


# ----------------------------------------------------------------------------- databases


@contextmanager
def database(backend: str, scratch: Path) -> Iterator[str]:
    """A new database of ``backend`` migrated by ``partitura db upgrade``; dropped afterwards."""
    if backend == "sqlite":
        url = f"sqlite:///{scratch / 'load.db'}"
        _upgrade(url)
        yield url
        return
    name = f"partitura_load_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
        _upgrade(url)
        yield url
    finally:
        for _ in range(30):  # Postgres may be coming back from the restart fault
            try:
                with admin.connect() as connection:
                    connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                break
            except Exception:
                time.sleep(1)
        admin.dispose()


def _upgrade(url: str) -> None:
    subprocess.run([str(PARTITURA), "db", "upgrade"], cwd=ROOT, env={**os.environ, "DATABASE_URL": url},
                   check=True, stdout=subprocess.DEVNULL)


def restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True,
                   stdout=subprocess.DEVNULL)


# ----------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Server:
    """``partitura serve`` in a process group of its own (its solver workers join the group)."""

    database_url: str
    port: int
    log: Path
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, **SERVER_ENV, "DATABASE_URL": self.database_url}
        self.process = subprocess.Popen(
            [str(PARTITURA), "serve", "--host", "127.0.0.1", "--port", str(self.port)], cwd=ROOT, env=env,
            start_new_session=True, stdout=open(self.log, "a"), stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server was not ready in {START_TIMEOUT_S:g} s")
            time.sleep(0.2)

    def kill_9(self) -> int:
        """SIGKILL the server process alone (not its group); returns its pid."""
        assert self.process is not None
        pid = self.process.pid
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        return pid

    def stop(self) -> list[int]:
        """SIGTERM, as a supervisor stops it; returns the processes of its group still running
        after ORPHAN_GRACE_S (then kills them: they are this run's)."""
        if self.process is None or self.process.poll() is not None:
            return []
        group = self.process.pid
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return reap_group(group)


def group_members(group: int) -> list[int]:
    """Running (not zombie) processes whose process group is ``group``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        state, process_group = fields[0], int(fields[2])
        if process_group == group and state != "Z":
            members.append(int(entry.name))
    return members


def reap_group(group: int) -> list[int]:
    """Wait up to ORPHAN_GRACE_S for the group to empty; returns who was left (and kills them)."""
    deadline = time.monotonic() + ORPHAN_GRACE_S
    while (left := group_members(group)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


# ----------------------------------------------------------------------------- the client


@dataclass
class Outcome:
    """One logical request: its attempts until success or the deadline."""

    statuses: list[str] = field(default_factory=list)  # "201", "503", "503-no-retry-after", "conn-error"
    problems: list[str] = field(default_factory=list)  # the problem type of each error answer
    first_latency_s: float = 0.0
    total_latency_s: float = 0.0
    plan_id: str | None = None
    acknowledged_at: float = float("inf")  # time.monotonic() of the 200/201

    @property
    def first(self) -> str:
        return self.statuses[0]


def _problem_type(response: httpx.Response) -> str:
    """The last part of a problem document's type (``solver-saturated``, ``database-unavailable``)."""
    try:
        return f"{response.status_code} {str(response.json().get('type', '?')).rsplit(':', 1)[-1]}"
    except ValueError:
        return f"{response.status_code} (not JSON)"


def _is_bad_5xx(status: str) -> bool:
    """A 5xx that is not the service's retryable answer (503 with Retry-After)."""
    return status[0] == "5" and status != "503"


async def post_until_done(client: httpx.AsyncClient, body: dict) -> Outcome:
    outcome = Outcome()
    started = time.monotonic()
    while time.monotonic() - started < CLIENT_DEADLINE_S:
        attempt = time.monotonic()
        try:
            response = await client.post("/v1/plans", json=body)
        except httpx.TransportError:
            outcome.statuses.append("conn-error")
            if len(outcome.statuses) == 1:
                outcome.first_latency_s = time.monotonic() - attempt
            await asyncio.sleep(RECONNECT_WAIT_S * (1 + random.random()))
            continue
        if not outcome.statuses:
            outcome.first_latency_s = time.monotonic() - attempt
        status = str(response.status_code)
        if response.status_code in (200, 201):
            outcome.statuses.append(status)
            outcome.plan_id = response.json()["id"]
            outcome.acknowledged_at = time.monotonic()
            break
        retry_after = response.headers.get("retry-after")
        if retry_after is None and response.status_code in (429, 503):
            status += "-no-retry-after"
        outcome.statuses.append(status)
        outcome.problems.append(_problem_type(response))
        if response.status_code in (429, 503) or response.status_code >= 500:
            wait_s = float(retry_after) if retry_after is not None else RECONNECT_WAIT_S
            await asyncio.sleep(wait_s * (1 + CLIENT_JITTER_FRACTION * random.random()))
            continue
        break  # a 4xx other than 429: not retryable
    outcome.total_latency_s = time.monotonic() - started
    return outcome


async def send_all(base_url: str, bodies: list[dict]) -> list[Outcome]:
    limits = httpx.Limits(max_connections=len(bodies) + 4, max_keepalive_connections=len(bodies) + 4)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S, limits=limits) as client:
        return list(await asyncio.gather(*(post_until_done(client, body) for body in bodies)))


def scrape(base_url: str) -> tuple[float, float]:
    """(searches finished, plans in the database) from /metrics."""
    metrics = httpx.get(f"{base_url}/metrics", timeout=30).text
    searches = sum(float(v) for v in re.findall(r"^partitura_solve_duration_seconds_count\{[^}]*\} (\S+)$", metrics, re.M))
    plans = sum(float(v) for v in re.findall(r"^partitura_plans\{[^}]*\} (\S+)$", metrics, re.M))
    return searches, plans


def unreadable(base_url: str, plan_ids: set[str]) -> list[str]:
    """Acknowledged plans that GET /v1/plans/{id} no longer answers."""
    lost = []
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for plan_id in sorted(plan_ids):
            if client.get(f"/v1/plans/{plan_id}").status_code != 200:
                lost.append(plan_id)
    return lost


# ----------------------------------------------------------------------------- report


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))] if ordered else float("nan")


def counts(statuses: list[str]) -> str:
    return " ".join(f"{status}:{count}" for status, count in sorted(Counter(statuses).items()))


@dataclass
class Row:
    backend: str
    case: str
    clients: int
    first_try: str
    all_answers: str
    succeeded: int
    p50_s: float
    p99_s: float
    searches: float
    plans_stored: float
    extra: str = ""


def _figure(value: float) -> str:
    """A count, or "-" where the case does not measure it (the faults)."""
    return "-" if math.isnan(value) else f"{value:g}"


class Report:
    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.broken: list[str] = []

    def check(self, holds: bool, what: str) -> None:
        if not holds:
            self.broken.append(what)
            print(f"  TARGET BROKEN: {what}", flush=True)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"  {row.backend:8} {row.case:10} N={row.clients:<3} first try {row.first_try:24} ok {row.succeeded}/{row.clients}"
              f"  p50 {row.p50_s:.2f} s p99 {row.p99_s:.2f} s  searches {_figure(row.searches)}"
              f"  plans {_figure(row.plans_stored)}"
              f"  {row.extra}", flush=True)

    def print_table(self) -> None:
        header = ("backend", "case", "N", "first try", "all answers", "ok", "p50 s", "p99 s", "searches", "stored", "notes")
        lines = [header] + [
            (r.backend, r.case, str(r.clients), r.first_try, r.all_answers, f"{r.succeeded}/{r.clients}",
             f"{r.p50_s:.2f}", f"{r.p99_s:.2f}", _figure(r.searches), _figure(r.plans_stored), r.extra)
            for r in self.rows
        ]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        print()
        for index, line in enumerate(lines):
            print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
            if index == 0:
                print("  ".join("-" * width for width in widths))


# ----------------------------------------------------------------------------- cases


def run_round(report: Report, backend: str, server: Server, case: str, clients: int) -> None:
    if case == "identical":
        body = plan_body()
        bodies = [body] * clients
    else:
        bodies = [plan_body() for _ in range(clients)]
    searches_before, plans_before = scrape(server.base_url)
    outcomes = asyncio.run(send_all(server.base_url, bodies))
    searches_after, plans_after = scrape(server.base_url)
    searches, stored = searches_after - searches_before, plans_after - plans_before
    every = [status for outcome in outcomes for status in outcome.statuses]
    succeeded = sum(outcome.plan_id is not None for outcome in outcomes)
    latencies = [o.first_latency_s if case == "identical" else o.total_latency_s for o in outcomes]
    ids = {o.plan_id for o in outcomes if o.plan_id}
    bad = [s for s in every if _is_bad_5xx(s) or s.endswith("no-retry-after")]
    report.add(Row(backend, case, clients, counts([o.first for o in outcomes]), counts(every), succeeded,
                   percentile(latencies, 0.5), percentile(latencies, 0.99), searches, stored,
                   f"distinct plan ids {len(ids)}"))
    label = f"{backend} {case} N={clients}"
    report.check(not bad, f"{label}: no 5xx other than 503 with Retry-After, no 429/503 without it (got {counts(bad)})")
    report.check(succeeded == clients, f"{label}: every request succeeds (got {succeeded}/{clients})")
    if case == "identical":
        report.check(searches == 1, f"{label}: exactly one search (got {searches:g})")
        report.check(len(ids) == 1 and stored == 1, f"{label}: one plan stored (got {stored:g}, {len(ids)} ids)")
    else:
        report.check(len(ids) == clients and stored == clients,
                     f"{label}: one plan per distinct request (got {stored:g} stored, {len(ids)} ids)")


def _before(outcomes: list[Outcome], moment: float) -> int:
    return sum(o.acknowledged_at < moment for o in outcomes)


def _problem_counts(outcomes: list[Outcome]) -> str:
    return ", ".join(f"{kind} x{count}" for kind, count in sorted(Counter(p for o in outcomes for p in o.problems).items()))


@dataclass(frozen=True)
class FaultOutcome:
    """What a fault's clients saw, summed up the same way for every fault: the plans acknowledged
    (201/200 with an id) and which of them the restarted server cannot read back, every status
    answered, the 5xx that are not 503 with Retry-After, and the latencies."""

    outcomes: list[Outcome]
    acknowledged: set[str]
    lost: list[str]
    every: list[str]
    bad: list[str]

    @staticmethod
    def of(server: Server, outcomes: list[Outcome]) -> "FaultOutcome":
        acknowledged = {o.plan_id for o in outcomes if o.plan_id}
        every = [status for outcome in outcomes for status in outcome.statuses]
        return FaultOutcome(
            outcomes, acknowledged, unreadable(server.base_url, acknowledged), every,
            [s for s in every if _is_bad_5xx(s) or s.endswith("no-retry-after")],
        )

    @property
    def succeeded(self) -> int:
        return sum(o.plan_id is not None for o in self.outcomes)

    def row(self, backend: str, scenario: str, note: str) -> Row:
        latencies = [o.total_latency_s for o in self.outcomes]
        return Row(backend, scenario, FAULT_CLIENTS, counts([o.first for o in self.outcomes]), counts(self.every), self.succeeded,
                   percentile(latencies, 0.5), percentile(latencies, 0.99), float("nan"), float("nan"), note)


def kill_fault(report: Report, backend: str, server: Server) -> None:
    """kill -9 the server while FAULT_CLIENTS distinct requests are in flight, start it again."""
    orphans: list[int] = []
    group_at_kill: list[int] = []
    down_s = 0.0
    killed_at = 0.0

    async def load_and_kill() -> list[Outcome]:
        nonlocal orphans, group_at_kill, down_s, killed_at
        bodies = [plan_body() for _ in range(FAULT_CLIENTS)]
        load = asyncio.ensure_future(send_all(server.base_url, bodies))
        await asyncio.sleep(1.5)  # mid-load: searches running, some plans acknowledged
        assert server.process is not None
        group_at_kill = group_members(server.process.pid)  # the server and its solver workers
        killed_at = time.monotonic()
        group = await asyncio.to_thread(server.kill_9)
        orphans = await asyncio.to_thread(reap_group, group)
        await asyncio.to_thread(server.start)
        down_s = time.monotonic() - killed_at
        return await load

    fault = FaultOutcome.of(server, asyncio.run(load_and_kill()))
    report.add(fault.row(
        backend, "kill -9",
        f"acknowledged {len(fault.acknowledged)} ({_before(fault.outcomes, killed_at)} before the kill), lost {len(fault.lost)};"
        f" processes at the kill {len(group_at_kill)}, orphans {len(orphans)}; down {down_s:.1f} s;"
        f" {_problem_counts(fault.outcomes)}",
    ))
    label = f"{backend} kill -9"
    report.check(not fault.lost, f"{label}: acknowledged plans lost must be 0 (got {len(fault.lost)}: {fault.lost[:3]})")
    report.check(not orphans, f"{label}: orphan processes left must be 0 (got {orphans})")
    report.check(not fault.bad, f"{label}: no 5xx other than 503 with Retry-After (got {counts(fault.bad)})")
    report.check(
        fault.succeeded == FAULT_CLIENTS, f"{label}: every request succeeds when retried (got {fault.succeeded}/{FAULT_CLIENTS})"
    )


def postgres_restart_fault(report: Report, server: Server) -> None:
    """Restart the Postgres cluster while FAULT_CLIENTS distinct requests are in flight."""
    restart_s = 0.0
    restarted_at = 0.0

    async def load_and_restart() -> list[Outcome]:
        nonlocal restart_s, restarted_at
        bodies = [plan_body() for _ in range(FAULT_CLIENTS)]
        load = asyncio.ensure_future(send_all(server.base_url, bodies))
        await asyncio.sleep(1.5)
        started = restarted_at = time.monotonic()
        await asyncio.to_thread(restart_postgres)
        restart_s = time.monotonic() - started
        return await load

    fault = FaultOutcome.of(server, asyncio.run(load_and_restart()))
    report.add(fault.row(
        "postgres", "pg restart",
        f"acknowledged {len(fault.acknowledged)} ({_before(fault.outcomes, restarted_at)} before the restart), lost {len(fault.lost)};"
        f" bad 5xx {len(fault.bad)}; restart {restart_s:.1f} s; {_problem_counts(fault.outcomes)}",
    ))
    label = "postgres restart"
    report.check(not fault.bad, f"{label}: 5xx must be 0 (a database error is 503 with Retry-After; got {counts(fault.bad)})")
    report.check(not fault.lost, f"{label}: acknowledged plans lost must be 0 (got {len(fault.lost)}: {fault.lost[:3]})")
    report.check(
        fault.succeeded == FAULT_CLIENTS, f"{label}: every request succeeds when retried (got {fault.succeeded}/{FAULT_CLIENTS})"
    )


def run_backend(report: Report, backend: str, sizes: list[int], faults: bool, scratch: Path) -> None:
    print(f"{backend}: starting", flush=True)
    with database(backend, scratch) as url:
        server = Server(url, free_port(), scratch / f"server-{backend}.log")
        try:
            server.start()
            for clients in sizes:
                for case in ("identical", "distinct"):
                    run_round(report, backend, server, case, clients)
            if faults:
                kill_fault(report, backend, server)
                if backend == "postgres":
                    postgres_restart_fault(report, server)
        finally:
            left = server.stop()
            report.check(not left, f"{backend}: SIGTERM leaves no process behind (got {left})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres", help="comma-separated: sqlite, postgres")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="numbers of concurrent clients")
    parser.add_argument("--no-faults", action="store_true", help="skip the kill -9 and Postgres restart")
    args = parser.parse_args(argv)
    # A SIGTERM to the bench still runs the clean-up (servers stopped, databases dropped).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = Report()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="partitura-load-") as scratch:
        for backend in args.backends.split(","):
            run_backend(report, backend, [int(n) for n in args.sizes.split(",")], not args.no_faults, Path(scratch))
    report.print_table()
    print(f"\n{time.monotonic() - started:.0f} s in all; servers: {SERVER_ENV}")
    if report.broken:
        print(f"\n{len(report.broken)} target(s) broken:")
        for what in report.broken:
            print(f"  - {what}")
        return 1
    print("\nEvery target holds.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
