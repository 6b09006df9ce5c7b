"""The ``partitura`` command: serve the API, migrate the database, and answer plan, evaluation
and catalog questions without a server (the same JSON in and out as the API), and export a
stored plan as a framework's launch config.

The profiler's commands (``profile``, ``compare-profile``, ``calibrate``, ``gemm-shapes``, ``import-pipedream``)
are added by ``profiler.commands.register``; their parsers set ``handler=callable(args) -> exit code``
with ``set_defaults`` (torch is imported only when one of them runs). Each command imports the
service modules it needs (database, solver pool, uvicorn) when it runs, so a command that needs
none of them starts without loading them; none of these imports avoids an import circle.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from app.core.config import Settings, SettingsError
from app.core.problems import Problem, validation_errors
from profiler.commands import register as register_profiler_commands

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

EXIT_INVALID_INPUT = 2
EXIT_FAILURE = 1
# Sweeps with at least this many points plan in a solver pool (about 1 s to start on 2 cores).
SWEEP_POOL_MIN_POINTS = 8


def _write_json(stream: IO[str], document: Any) -> None:
    stream.write(json.dumps(document, indent=2, default=str) + "\n")


def _read_body(source: str, stdin: IO[str]) -> str:
    if source == "-":
        return stdin.read()
    return Path(source).read_text()


def _parse(schema: type[BaseModel], text: str) -> BaseModel:
    try:
        return schema.model_validate_json(text)
    except ValidationError as error:
        errors = validation_errors([{**e, "loc": ("body", *e["loc"])} for e in error.errors()])
        detail = "; ".join(f"{e['field']}: {e['reason']}" for e in errors)
        raise Problem(422, "Invalid request", detail, slug="invalid-request", errors=errors) from None


def _cache_dir(env: dict[str, str]) -> Path:
    return Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "partitura"


def keep_alive_s() -> int:
    """How long the server keeps an idle connection open: longer than any Retry-After the service
    sends (uvicorn's default is 5 s, the old Retry-After: clients that waited as told met a reset
    connection). Read when the server starts: the solver pool's module (multiprocessing) is no
    part of a plan's start-up."""
    from app.core.solver_pool import RETRY_AFTER_MAX_S

    return RETRY_AFTER_MAX_S + 15


def _scratch_database(path: Path, env: dict[str, str]) -> None:
    """A SQLite database at path built by the migrations. The migrated database is kept in the
    user's cache, named by the migrations' digest, and copied: a command that finds it there
    neither imports Alembic nor runs a migration (0.25 s of CPU of `partitura plan`, bench/cli.py)."""
    import shutil

    from app.core.migration_files import migrations_digest, migrations_dir

    template = _cache_dir(env) / f"scratch-{migrations_digest(migrations_dir(env))[:16]}.db"
    if not template.is_file():
        from app.core.migrate import upgrade

        building = template.with_name(f"{template.name}.{os.getpid()}.tmp")
        try:
            template.parent.mkdir(parents=True, exist_ok=True)
            building.touch()
        except OSError:  # no writable cache: migrate the scratch database itself
            upgrade(f"sqlite:///{path}")
            return
        try:
            upgrade(f"sqlite:///{building}")
            os.replace(building, template)  # whole or absent, whatever runs beside
        finally:
            building.unlink(missing_ok=True)
    shutil.copyfile(template, path)


@contextmanager
def _database(settings: Settings, use_configured: bool) -> Iterator[tuple[Settings, Session]]:
    """A session on the configured database (``--db``: custom entries resolve, plans are stored)
    or on a throwaway SQLite database built by the same migrations."""
    import tempfile

    from app.core.db import make_engine, make_sessionmaker

    with tempfile.TemporaryDirectory(prefix="partitura-cli-") as scratch:
        if not use_configured:
            path = Path(scratch) / "scratch.db"
            _scratch_database(path, dict(os.environ))
            url = f"sqlite:///{path}"
            settings = dataclasses.replace(settings, database_url=url)
        engine = make_engine(settings.database_url)
        session = make_sessionmaker(engine)()
        try:
            yield settings, session
        finally:
            session.close()
            engine.dispose()


def _command_serve(args: argparse.Namespace, settings: Settings, out: IO[str]) -> int:
    import uvicorn

    uvicorn.run(
        "app.main:create_app", factory=True, host=args.host, port=args.port, workers=args.workers,
        timeout_keep_alive=keep_alive_s(),
    )
    return 0


def _command_worker(args: argparse.Namespace, settings: Settings, out: IO[str]) -> int:
    """Run jobs' points from the queue on DATABASE_URL (Postgres) until SIGINT/SIGTERM."""
    import asyncio
    import logging

    from app.core.db import make_engine, make_sessionmaker
    from app.core.metrics import Metrics
    from app.core.single_flight import SingleFlight
    from app.core.solver_pool import SolverPool
    from app.core.versions import current_versions
    from app.jobs.queue import run_worker, worker_app
    from app.jobs.work import Runtime

    if settings.database_url.startswith("sqlite"):
        out.write("partitura worker: jobs on SQLite run inside `partitura serve`; a worker needs a Postgres DATABASE_URL\n")
        return EXIT_FAILURE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    concurrency = args.concurrency or settings.solver_workers
    engine = make_engine(settings.database_url, settings.database_timeout_s)
    pool = SolverPool(concurrency, settings.solver_queue_depth, settings.retry_after_s)
    runtime = Runtime(make_sessionmaker(engine), pool, Metrics(), settings, current_versions(), SingleFlight())
    try:
        asyncio.run(run_worker(worker_app(settings.database_url, runtime), concurrency, args.heartbeat_s))
    finally:
        pool.shutdown()
        engine.dispose()
    return 0


def _command_db(args: argparse.Namespace, settings: Settings, out: IO[str]) -> int:
    from app.core import migrate

    if args.db_command == "upgrade":
        migrate.upgrade(settings.database_url, args.revision)
    elif args.db_command == "downgrade":
        migrate.downgrade(settings.database_url, args.revision)
    from app.core.db import make_engine

    engine = make_engine(settings.database_url)
    try:
        current = migrate.current_revision(engine)
    finally:
        engine.dispose()
    _write_json(out, {"database_revision": current, "head": migrate.head_revision()})
    return 0


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector does not run inside: importing the solver and the schemas
    allocates hundreds of thousands of long-lived objects, and every few hundred allocations the
    collector would look through them for cycles it never finds."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def _loaded_modules_frozen() -> Iterator[None]:
    """Inside, the collector leaves alone every object that exists on entry (``gc.freeze``): the
    loaded modules' objects, which live as long as the process, so the search's collections
    traverse the search's objects only. They are handed back on exit (``gc.unfreeze``), so a
    process that runs commands in its own interpreter (the tests) still collects them."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _command_plan(args: argparse.Namespace, settings: Settings, out: IO[str], stdin: IO[str]) -> int:
    # Without both, a plan of GPT-3 175B on 1024 GPUs runs 0.14 G more of its 4.2 G instructions
    # (bench/cli.py; the collector's passes over the modules a plan loads).
    with _collector_paused():
        from app.core.versions import current_versions
        from app.plans import answer
        from app.plans.schemas import PlanRequest

    with _loaded_modules_frozen():
        body = _parse(PlanRequest, _read_body(args.file, stdin))
        if not args.db:
            # Nothing is stored and nothing stored is read: the plan is computed without a database,
            # and neither SQLAlchemy nor a scratch database is loaded (most of a CLI plan's time).
            document = answer.plan_unstored(settings, current_versions(), body)
        else:
            from app.core.metrics import Metrics
            from app.core.solver_pool import InlineSolver
            from app.plans import service

            with _database(settings, args.db) as (settings, session):
                outcome = service.create_plan(session, InlineSolver(), Metrics(), settings, current_versions(), body)
                session.commit()
            document = outcome.document
        _write_json(out, document.model_dump(mode="json"))  # as the API writes it (created_at in ISO 8601)
    return 0


def _command_evaluate(args: argparse.Namespace, settings: Settings, out: IO[str], stdin: IO[str]) -> int:
    from app.evaluations.schemas import EvaluationRequest
    from app.evaluations.service import evaluate_configuration

    body = _parse(EvaluationRequest, _read_body(args.file, stdin))
    with _database(settings, args.db) as (_settings, session):
        _write_json(out, evaluate_configuration(session, body).model_dump(mode="json"))
    return 0


def _command_catalog(args: argparse.Namespace, settings: Settings, out: IO[str]) -> int:
    from app.catalog import service

    if args.kind == "stacks":  # built in only: no database needed
        _write_json(out, {"items": service.list_stacks()} if args.name is None else service.get_stack(args.name))
        return 0
    with _database(settings, args.db) as (_settings, session):
        if args.name is None:
            _write_json(out, {"items": service.list_entries(session, args.kind)})
        else:
            _write_json(out, service.get_entry(session, args.kind, args.name))
    return 0


def _command_hf_config(args: argparse.Namespace, settings: Settings, out: IO[str], stdin: IO[str]) -> int:
    """A model from a Hugging Face config.json: what ``POST /v1/catalog/models/from-hf-config``
    answers, its ``model`` ready to go inline into a plan or evaluation body."""
    from app.catalog import service
    from app.catalog.schemas import HfConfigIn

    text = _read_body(args.file, stdin)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise Problem(422, "Invalid config", f"config: not JSON ({error})", slug="invalid-request",
                      errors=[{"field": "config", "reason": f"not JSON ({error})"}]) from None
    request = {"name": args.name, "config": config, **({"seq_length": args.seq_length} if args.seq_length else {})}
    body = _parse(HfConfigIn, json.dumps(request))
    _write_json(out, service.convert_hf_config(body))
    return 0


def _command_sweep(args: argparse.Namespace, settings: Settings, out: IO[str], stdin: IO[str]) -> int:
    from sqlalchemy.orm import sessionmaker

    from app.core.metrics import Metrics
    from app.core.solver_pool import InlineSolver, SolverPool
    from app.core.versions import current_versions
    from app.sweeps import service
    from app.sweeps.schemas import SweepRequest
    from app.sweeps.table import sweep_table
    from solver.sweep.chart import pareto_chart, scaling_chart

    body = _parse(SweepRequest, _read_body(args.file, stdin))
    # Many points are planned in PARTITURA_SOLVER_WORKERS processes, as the API does; a few are
    # planned here (starting the processes would cost more than they save).
    pool: SolverPool | InlineSolver = InlineSolver()
    if service.point_count(body) >= SWEEP_POOL_MIN_POINTS:
        pool = SolverPool(settings.solver_workers, settings.solver_queue_depth, settings.retry_after_s)
    try:
        with _database(settings, args.db) as (settings, session):
            points = sessionmaker(bind=session.get_bind(), expire_on_commit=False, autoflush=False)
            document = service.create_sweep(session, points, pool, Metrics(), settings, current_versions(), body)
            session.commit()
    finally:
        pool.shutdown()
    if args.charts is not None:
        args.charts.mkdir(parents=True, exist_ok=True)
        analysis, results = service.analysis_of(document)
        (args.charts / "scaling.svg").write_text(scaling_chart(analysis, service.model_name(document)))
        (args.charts / "pareto.svg").write_text(pareto_chart(results, document.pareto_front, service.model_name(document)))
    if args.json:
        _write_json(out, document.model_dump(mode="json"))
    else:
        out.write(sweep_table(document))
    return 0


def _command_sizing(args: argparse.Namespace, settings: Settings, out: IO[str], stdin: IO[str]) -> int:
    from app.core.metrics import Metrics
    from app.core.solver_pool import InlineSolver
    from app.core.versions import current_versions
    from app.sizing import service
    from app.sizing.schemas import SizingRequest

    body = _parse(SizingRequest, _read_body(args.file, stdin))
    with _database(settings, args.db) as (settings, session):
        document, release = service.create_sizing(session, InlineSolver(), Metrics(), settings, current_versions(), body)
        session.commit()
        release()
    _write_json(out, document.model_dump(mode="json"))
    return 0


def _command_export(args: argparse.Namespace, settings: Settings, out: IO[str]) -> int:
    """A stored plan's candidate as a framework's launch config: the JSON the API answers, one
    file of it (``--file``), or every file written into a directory (``--write``)."""
    from app.plans import service

    with _database(settings, use_configured=True) as (_settings, session):
        document = service.export_candidate(session, args.plan_id, args.format, args.candidate)
    if args.file is not None:
        out.write(service.export_file(document, args.file).content)
    elif args.write is not None:
        directory = Path(args.write)
        directory.mkdir(parents=True, exist_ok=True)
        for file in document.files:
            (directory / file.name).write_text(file.content)
        _write_json(out, {"exact": document.exact, "files": [str(directory / f.name) for f in document.files],
                          "differences": [d.model_dump() for d in document.differences]})
    else:
        _write_json(out, document.model_dump(mode="json"))
    return 0


def _command_token(args: argparse.Namespace, settings: Settings, out: IO[str]) -> int:
    """API tokens in DATABASE_URL (docs/auth.md): ``create`` prints the new token once (only its
    SHA-256 is stored), ``list`` shows them without it, ``revoke`` makes one answer 401."""
    from app.tokens import service
    from app.tokens.scopes import Scope

    with _database(settings, use_configured=True) as (_settings, session):
        if args.token_command == "create":
            document = service.create_token(session, args.name, [Scope(s) for s in args.scope], args.plans_per_minute)
            session.commit()
            _write_json(out, document.model_dump(mode="json"))
        elif args.token_command == "list":
            _write_json(out, service.list_tokens(session).model_dump(mode="json"))
        else:
            document = service.revoke_token(session, args.token_id)
            session.commit()
            _write_json(out, document.model_dump(mode="json"))
    return 0


def _token_name(text: str) -> str:
    from app.tokens.schemas import TokenRequest

    try:
        TokenRequest.model_validate({"name": text, "scopes": ["read"]})
    except ValidationError:
        raise argparse.ArgumentTypeError("1-64 letters, digits, '.', '_' or '-', starting with a letter or digit") from None
    return text


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="partitura", description="Plan hybrid-parallel transformer training.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the HTTP API (run `partitura db upgrade` first)")
    serve.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    serve.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.set_defaults(action=_command_serve)

    worker = commands.add_parser("worker", help="run jobs (sweeps, async plans) from the queue on DATABASE_URL (Postgres)")
    worker.add_argument("--concurrency", type=int, default=0, help="points run at once (default: PARTITURA_SOLVER_WORKERS)")
    worker.add_argument(
        "--heartbeat-s", type=float, default=10.0, help="seconds between heartbeats; a worker silent for 3 is taken for dead",
    )
    worker.set_defaults(action=_command_worker)

    db = commands.add_parser("db", help="database migrations on DATABASE_URL")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    upgrade = db_commands.add_parser("upgrade", help="apply the migrations")
    upgrade.add_argument("revision", nargs="?", default="head")
    downgrade = db_commands.add_parser("downgrade", help="revert migrations down to REVISION")
    downgrade.add_argument("revision")
    db_commands.add_parser("current", help="show the database's revision")
    db.set_defaults(action=_command_db)

    db_help = "use DATABASE_URL (custom entries resolve, plans are stored) instead of a scratch database"
    plan = commands.add_parser("plan", help="search for plans: a POST /v1/plans body from FILE or - (stdin)")
    plan.add_argument("file", metavar="FILE|-")
    plan.add_argument("--db", action="store_true", help=db_help)
    plan.set_defaults(action_with_input=_command_plan)

    evaluate = commands.add_parser("evaluate", help="evaluate one configuration: a POST /v1/evaluations body")
    evaluate.add_argument("file", metavar="FILE|-")
    evaluate.add_argument("--db", action="store_true", help=db_help)
    evaluate.set_defaults(action_with_input=_command_evaluate)

    catalog = commands.add_parser("catalog", help="list or show catalog entries")
    catalog.add_argument("kind", choices=["gpus", "models", "clusters", "nodes", "stacks"])
    catalog.add_argument("name", nargs="?", help="show this entry (default: list all)")
    catalog.add_argument("--db", action="store_true", help="include custom entries from DATABASE_URL")
    catalog.set_defaults(action=_command_catalog)

    hf = commands.add_parser(
        "hf-config", help="a model from a Hugging Face config.json (FILE or -): the spec to use inline as a request's model",
    )
    hf.add_argument("file", metavar="FILE|-")
    hf.add_argument("--name", required=True, help="the model's name in requests")
    hf.add_argument("--seq-length", type=int, help="the model's sequence length (default: the config's longest position)")
    hf.set_defaults(action_with_input=_command_hf_config)

    sweep = commands.add_parser("sweep", help="plan a grid of GPU counts, clusters and batch sizes: a POST /v1/sweeps body")
    sweep.add_argument("file", metavar="FILE|-")
    sweep.add_argument("--db", action="store_true", help=db_help)
    sweep.add_argument("--json", action="store_true", help="print the sweep document instead of the table")
    sweep.add_argument("--charts", type=Path, metavar="DIR", help="also write scaling.svg and pareto.svg into DIR")
    sweep.set_defaults(action_with_input=_command_sweep)

    sizing = commands.add_parser("sizing", help="compute-optimal model for a budget, or tokens for a model: a POST /v1/sizing body")
    sizing.add_argument("file", metavar="FILE|-")
    sizing.add_argument("--db", action="store_true", help=db_help)
    sizing.set_defaults(action_with_input=_command_sizing)

    export = commands.add_parser(
        "export", help="a stored plan (DATABASE_URL) as a framework's launch config; exact=false names what differs",
    )
    export.add_argument("plan_id", metavar="PLAN_ID")
    export.add_argument("--format", required=True, choices=["megatron", "deepspeed", "torchtitan", "nemo"])
    export.add_argument("--candidate", type=int, default=0, help="index into the plan's candidates (default 0, the best)")
    output = export.add_mutually_exclusive_group()
    output.add_argument("--file", metavar="NAME", help="print only this file of the export (e.g. ds_config.json)")
    output.add_argument("--write", metavar="DIR", help="write every file of the export into DIR")
    export.set_defaults(action=_command_export)

    token = commands.add_parser("token", help="API tokens in DATABASE_URL: create (printed once), list, revoke")
    token_commands = token.add_subparsers(dest="token_command", required=True, metavar="TOKEN_COMMAND")
    token_create = token_commands.add_parser("create", help="create a token and print it (it is shown this once)")
    token_create.add_argument("name", type=_token_name, metavar="NAME")
    token_create.add_argument(
        "--scope", action="append", required=True, choices=["read", "plan", "admin"],
        help="read: GET; plan: also POST and DELETE; admin: also tokens and every owner's resources (repeatable)",
    )
    token_create.add_argument(
        "--plans-per-minute", type=_non_negative_int, default=None, metavar="N",
        help="this token's plan requests a minute (default: PARTITURA_QUOTA_PLANS_PER_MINUTE; 0: no limit)",
    )
    token_commands.add_parser("list", help="every token (never the token itself)")
    token_revoke = token_commands.add_parser("revoke", help="revoke a token: it is answered 401 from now on")
    token_revoke.add_argument("token_id", metavar="TOKEN_ID")
    token.set_defaults(action=_command_token)

    register_profiler_commands(commands)
    return parser


def main(
    argv: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    out: IO[str] | None = None,
    err: IO[str] | None = None,
    stdin: IO[str] | None = None,
) -> int:
    """Run the command ``argv`` (default: the process's own arguments) and return its exit code.

    Called without ``argv`` it is the ``partitura`` program itself (the console script, ``python
    -m app.cli``): the process is the command's, and a plan without ``--db`` ends it as soon as
    its output is written (``_end_process``)."""
    out, err, stdin = out or sys.stdout, err or sys.stderr, stdin or sys.stdin
    args = build_parser().parse_args(argv)
    code = _run(args, env, out, err, stdin)
    if argv is None and args.command == "plan" and not args.db:
        _end_process(code, out, err)
    return code


def _end_process(code: int, *streams: IO[str]) -> None:
    """End the process with ``code`` once ``streams`` are flushed, without the interpreter's
    teardown, which frees every loaded module's objects one by one for a process about to end
    (0.14 G of the 4.2 G instructions of `partitura plan` for GPT-3 175B on 1024 GPUs,
    bench/cli.py). A plan without a database registers no exit handlers and leaves no file,
    connection or process behind. Where a stream cannot be flushed (a closed pipe) it returns,
    and the interpreter ends the process and reports as usual."""
    try:
        for stream in streams:
            stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _run(args: argparse.Namespace, env: dict[str, str] | None, out: IO[str], err: IO[str], stdin: IO[str]) -> int:
    try:
        settings = Settings.from_env(env)
    except SettingsError as error:
        err.write(f"partitura: {error}\n")
        return EXIT_FAILURE
    try:
        if getattr(args, "action_with_input", None) is not None:
            return args.action_with_input(args, settings, out, stdin)
        if getattr(args, "action", None) is not None:
            return args.action(args, settings, out)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return int(handler(args) or 0)
    except Problem as problem:
        _write_json(err, problem.to_dict())
        return EXIT_INVALID_INPUT if problem.status in (404, 409, 422) else EXIT_FAILURE
    except OSError as error:
        err.write(f"partitura: {error}\n")
        return EXIT_FAILURE
    except Exception as error:
        if not _is_database_error(error):
            raise
        err.write(f"partitura: database error ({type(error).__name__}); is DATABASE_URL migrated? run `partitura db upgrade`\n")
        return EXIT_FAILURE


def _is_database_error(error: Exception) -> bool:
    """Whether ``error`` is SQLAlchemy's. SQLAlchemy is imported only by commands that open a
    database, and an error of it can only come from one that has."""
    exc = sys.modules.get("sqlalchemy.exc")
    return exc is not None and isinstance(error, exc.SQLAlchemyError)


if __name__ == "__main__":
    sys.exit(main())
