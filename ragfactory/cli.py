"""The `ragfactory` command line: build data, query the warehouse, serve retrieval."""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(
    help="ragfactory: build process-supervised training data for agentic RAG, then query it.\n\n"
    "Example:\n\n    ragfactory build --config configs/demo.yaml\n\n"
    "    ragfactory sql \"select dataset, count(*) from questions group by 1\"",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
retrieval_app = typer.Typer(
    help="Retrieval over the warehouse's passages, and the Search-R1-compatible server.\n\n"
    "Example: `ragfactory retrieval search \"Who directed Jaws?\" -k 5`",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(retrieval_app, name="retrieval")

# Piped output (CI logs, `make demo | tee`) gets wide tables instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)

DEBUG_ENV = "RAGFACTORY_DEBUG"


@app.callback()
def main(
    debug: Annotated[bool, typer.Option(
        "--debug", help="Print the traceback of a failure on screen too (it always goes to the run's log)")] = False,
) -> None:
    """ragfactory: build process-supervised training data for agentic RAG, then query it."""
    if debug:  # the environment, not a global: a flow run in a subprocess or worker sees it too
        os.environ[DEBUG_ENV] = "1"


RootOption = Annotated[
    Path | None,
    typer.Option("--root", help="Warehouse root (default: $RAGFACTORY_HOME, else ~/.ragfactory)"),
]


def _warehouse(root: Path | None):
    from ragfactory.warehouse.store import Warehouse

    return Warehouse(root)


def _fail(message: str) -> None:
    # soft_wrap: one line however long, so a refusal reads (and greps) as one line
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=1)


def _debug() -> bool:
    """Whether the global ``--debug`` option (or ``RAGFACTORY_DEBUG=1``) was given."""
    return os.environ.get(DEBUG_ENV, "") not in {"", "0"}


def _preflight(check, prefix: str = "") -> None:
    """Run a preflight check; a permanent error (missing file, unknown model, invalid config)
    exits with its one-line message, before any work or any run is recorded."""
    from ragfactory.schemas.errors import PermanentError

    try:
        check()
    except PermanentError as exc:
        if _debug():
            console.print_exception()
        _fail(prefix + " ".join(str(exc).split()))


class _ScreenWithoutTraceback(logging.Filter):
    """Drop a log record's traceback before a console handler prints it (the run's log file,
    which sees the record first, keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


@contextmanager
def logged_run(root: Path, command: str) -> Iterator[Path]:
    """Log everything the run logs (Prefect's task and flow logs, tracebacks included) to
    ``<root>/logs/<command>-<UTC time>-<pid>.log``, and keep tracebacks off the screen unless
    ``--debug``. An exception escaping the run exits with one line naming it and the log file.
    """
    import traceback

    from ragfactory.warehouse.guard import first_line

    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = Path(root) / "logs" / f"{command}-{stamp}-{os.getpid()}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    screen = logging.getLogger()
    consoles, quiet = list(screen.handlers), _ScreenWithoutTraceback()
    screen.handlers.insert(0, handler)  # first, so it writes each traceback before a console drops it
    for console_handler in consoles if not _debug() else []:
        console_handler.addFilter(quiet)
    try:
        yield path
    except Exception as exc:
        handler.stream.write("".join(traceback.format_exception(exc)))
        if _debug():
            traceback.print_exception(exc, file=sys.stderr)
        _fail(f"{first_line(exc)} (log: {path})")
    finally:
        screen.removeHandler(handler)
        handler.close()
        for console_handler in consoles:
            console_handler.removeFilter(quiet)


def print_failures(summary: dict, log: Path, noun: str = "shard") -> None:
    """One ``error:`` line per failed shard of a run: what failed, why, and where the traceback is."""
    errors = summary.get("errors", {})
    for name in summary["failed_shards"]:
        reason = " ".join(str(errors.get(name) or "see the log").split())
        console.print(f"[red]error:[/red] {escape(f'{noun} {name} failed: {reason} (log: {log})')}",
                      soft_wrap=True, highlight=False)


def print_arrow(table, title: str | None = None, fmt: str = "table") -> None:
    """Print an arrow table as a rich table, CSV or JSON lines (``ragfactory.output``)."""
    from ragfactory.output import print_arrow as render

    render(table, console, title=title, fmt=fmt)


# ignore_unknown_options: a query may open with a `--` comment, which click would take for an option
@app.command(context_settings={"ignore_unknown_options": True})
def sql(
    query: Annotated[str, typer.Argument(help="A read-only SQL query over the warehouse views")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json")] = "table",
    root: RootOption = None,
) -> None:
    """Run a read-only SQL query over the warehouse and print the result.

    Every table is a view (questions, passages, nodes, llm_calls, ...), plus the views shipped in
    warehouse/sql/. The query reads the warehouse and nothing else: files only as
    `warehouse://<path under the root>` (e.g. `read_parquet('warehouse://questions/*/*.parquet')`),
    no writes, settings, attachments or extensions. `duckdb -readonly <root>/catalog.duckdb` is
    the unrestricted way in.

    Example: `ragfactory sql "select dataset, count(*) from questions group by 1" --format csv`
    """
    from ragfactory.warehouse.catalog import Refused, user_query as run_query
    from ragfactory.warehouse.guard import first_line

    if fmt not in {"table", "csv", "json"}:
        _fail(f"--format must be table, csv or json, not {fmt!r}")
    try:
        result = run_query(_warehouse(root), query)
    except Refused as exc:
        _fail(str(exc))
    except Exception as exc:  # duckdb errors carry the useful message in their first line
        _fail(f"query failed: {first_line(exc)}")
    try:
        print_arrow(result, fmt=fmt)
    except (ArithmeticError, ValueError) as exc:  # values Python has no type for, e.g. year 32103
        _fail(f"could not print the result as {fmt}: {first_line(exc)}")


@app.command()
def tables(root: RootOption = None) -> None:
    """List the warehouse tables and views with their row counts, and the catalog path.

    A table with a damaged file shows `damaged` and the file; the others are still counted (exit
    code 1 when any is damaged). On a root this user cannot write, the catalog file is left as it
    is and the counts come from the Parquet files.

    Example: `ragfactory tables --root /data/ragfactory`
    """
    import duckdb

    from ragfactory.schemas.tables import TABLES
    from ragfactory.warehouse.catalog import connect, refresh_catalog, sql_views
    from ragfactory.warehouse.guard import first_line
    from ragfactory.warehouse.runs import mark_abandoned_runs

    wh = _warehouse(root)
    if not wh.root.is_dir():
        _fail(f"no warehouse at {wh.root} (build one with `ragfactory build --config <file>`)")
    mark_abandoned_runs(wh)
    try:
        refresh_catalog(wh)
        refreshed = True
    except PermissionError:
        refreshed = False
    except OSError as exc:
        if exc.errno != errno.EROFS:
            raise
        refreshed = False
    view = Table(title=f"warehouse {wh.root}")
    for column in ("name", "kind", "rows", "files"):
        view.add_column(column)
    damaged = []
    con = connect(wh)
    try:
        for name in TABLES:
            try:
                count = con.sql(f'select count(*) from "{name}"').fetchall()[0][0]
                rows = f"{count:,}"
            except duckdb.Error as exc:  # a damaged file: this table only, named in the line below
                rows = "[red]damaged[/red]"
                damaged.append(first_line(exc).removeprefix("Invalid Input Error: "))
            view.add_row(name, "table", rows, str(len(wh.files(name))))
    finally:
        con.close()
    for name in sql_views():
        view.add_row(name, "view", "", "")
    console.print(view)
    if refreshed:
        console.print(f"catalog: {wh.catalog_path}  (open with: duckdb -readonly {wh.catalog_path})")
    else:
        console.print(f"catalog: {wh.catalog_path} not refreshed: {wh.root} is read-only for this user", soft_wrap=True)
    for message in damaged:
        console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    if damaged:
        raise typer.Exit(code=1)


@app.command("check")
def check_command(
    repair: Annotated[bool, typer.Option("--repair", help="Quarantine damaged files and rebuild what they held")] = False,
    adopt: Annotated[bool, typer.Option("--adopt", help="Record entries for unrecorded files that read as Parquet "
                                        "(a warehouse written before manifests)")] = False,
    root: RootOption = None,
) -> None:
    """Verify every shard file of the warehouse against its manifest entry (rows, bytes, sha256).

    Prints one line per damaged, unrecorded or missing file and exits 1 when there is any.
    `--repair` moves damaged files (and their entries) to `<root>/_quarantine/<time>/`, runs again
    the builds and evaluations that wrote them (only their lost shards do work), and checks again.
    `--adopt` vouches for files written before the warehouse kept manifests.

    Example: `ragfactory check --root /data/ragfactory` then `ragfactory check --repair --root /data/ragfactory`
    """
    import datetime as dt

    from ragfactory.warehouse.integrity import adopt as adopt_files
    from ragfactory.warehouse.integrity import check
    from ragfactory.warehouse.runs import mark_abandoned_runs

    wh = _warehouse(root)
    if not wh.root.is_dir():
        _fail(f"no warehouse at {wh.root}")
    mark_abandoned_runs(wh)
    problems = check(wh)
    for problem in problems:
        console.print(escape(str(problem)), soft_wrap=True, highlight=False)
    if adopt:
        adopted = adopt_files(wh, problems)
        problems = [p for p in problems if p not in adopted]
        console.print(f"adopted {len(adopted)} unrecorded file(s) that read as Parquet", soft_wrap=True)
    if problems and repair:
        _repair(wh, problems, dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
        problems = check(wh)
        for problem in problems:
            console.print(escape(f"still: {problem}"), soft_wrap=True, highlight=False)
    if problems:
        hint = ""
        if not repair and any(not (p.kind == "unrecorded" and p.readable) for p in problems):
            hint += f"; `ragfactory check --repair --root {wh.root}` rebuilds the damaged ones"
        if any(p.kind == "unrecorded" and p.readable for p in problems):
            hint += (f"; `ragfactory check --adopt --root {wh.root}` records the unrecorded ones "
                     "if they were written before manifests")
        console.print(f"{len(problems)} file(s) under {wh.root} cannot be trusted{hint}", soft_wrap=True,
                      highlight=False)
        raise typer.Exit(code=1)
    console.print(f"ok: every shard file under {wh.root} matches its manifest entry", soft_wrap=True, highlight=False)


def _repair(wh, problems, stamp: str) -> None:
    from ragfactory.flows.repair import plan_repair
    from ragfactory.flows.repair import repair as repair_flow
    from ragfactory.warehouse.integrity import QUARANTINE_DIR, quarantine

    plan = plan_repair(wh, [p for p in problems if not (p.kind == "unrecorded" and p.readable)])
    moved = quarantine(wh, problems, stamp)
    console.print(f"quarantined {len(moved)} file(s) in {wh.root / QUARANTINE_DIR / stamp}", soft_wrap=True)
    for line in plan["manual"]:
        console.print(f"[yellow]cannot rebuild:[/yellow] {escape(line)}", soft_wrap=True)
    if plan["runs"] or plan["ingest"]:
        console.print(f"rebuilding: runs {', '.join(plan['runs']) or '-'}; ingest {', '.join(plan['ingest']) or '-'}",
                      soft_wrap=True)
        cleanup = _prefect_local_defaults()
        result = _run_flow(lambda: repair_flow(str(wh.root), plan["runs"], plan["ingest"], return_state=True), cleanup)
        for run_id, status in result["runs"].items():
            console.print(f"run {run_id}: {status}", soft_wrap=True)


@app.command()
def build(
    config: Annotated[Path, typer.Option("--config", "-c", help="Build config YAML")],
    run_id: Annotated[str | None, typer.Option(help="Run id (default: <name>-<config hash>)")] = None,
    root: RootOption = None,
) -> None:
    """Run the `build` flow locally (Prefect local mode; no server to start) and print a summary.

    Exits 1 when a shard failed (the run is `partial` or `failed`), 130 on Ctrl-C and 143 on
    SIGTERM: the run is then recorded `interrupted`, every process the build started is
    stopped, and the same command goes on from the shards already written.

    Example: `ragfactory build --config configs/demo.yaml`
    """
    from ragfactory.flows.config import ConfigError, load_build_config
    from ragfactory.tasks.preflight import apply_network_policy, check_build

    if not config.is_file():
        _fail(f"{config}: no such config file" if not config.exists() else f"{config}: not a file")
    try:
        cfg = load_build_config(config)
    except ConfigError as exc:
        _fail(str(exc))
    if root is not None:
        cfg = cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(update={"root": str(root)})})
    wh = _warehouse(Path(cfg.warehouse.root) if cfg.warehouse.root else None)
    apply_network_policy(cfg.allow_downloads)
    _preflight(lambda: check_build(cfg, wh), prefix=f"{config}: ")
    cleanup = _prefect_local_defaults()
    from ragfactory.flows.build import build as build_flow

    with logged_run(wh.root, "build") as log:
        summary = _run_flow(lambda: build_flow(cfg, run_id=run_id, return_state=True), cleanup)
    print_build_summary(summary)
    print_failures(summary, log)
    if summary["status"] != "completed":
        raise typer.Exit(code=1)


def _trl_overrides(pairs: list[str]) -> dict:
    """``key=value`` pairs, each value read as YAML (numbers, booleans, lists)."""
    import yaml

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"--trl {pair!r}: expected key=value, e.g. --trl max_steps=100")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def _options_config(model_cls, root: Path | None, **fields):
    """A flow's pydantic config from command options (unset ones keep the model's defaults) and
    the warehouse root; a value that does not validate exits with the field named."""
    from pydantic import ValidationError

    fields["warehouse"] = {"root": str(root)} if root is not None else None
    try:
        return model_cls.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        _fail("; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()))


@app.command()
def train(
    method: Annotated[str, typer.Option("--method", help="sft, dpo or grpo")],
    run_id: Annotated[str | None, typer.Option("--run-id", help="Build run whose export is trained on")] = None,
    parquet: Annotated[str | None, typer.Option(help="A parquet file or folder instead of a run's export")] = None,
    base_model: Annotated[str, typer.Option(
        help="'embedded' (SmolLM2-135M), a checkpoint folder, a model id or latest:NAME")] = "embedded",
    task: Annotated[str | None, typer.Option(help="GRPO only: qa (answers) or plan (APEX planner, SEPR)")] = None,
    rewards: Annotated[list[str] | None, typer.Option(
        "--reward", help="GRPO reward function (repeatable): answer_em, answer_f1, format, sepr")] = None,
    trl: Annotated[list[str] | None, typer.Option(
        "--trl", help="TRL config override key=value (repeatable), e.g. max_steps=100")] = None,
    lora: Annotated[bool, typer.Option("--lora/--no-lora", help="Train LoRA adapters (peft)")] = False,
    name: Annotated[str | None, typer.Option(help="Lineage name (default: the method)")] = None,
    output_dir: Annotated[str | None, typer.Option(help="Where the model goes")] = None,
    allow_downloads: Annotated[bool, typer.Option(
        "--allow-downloads", help="Let a base model not on this machine be fetched from the hub (default: offline)")] = False,
    root: RootOption = None,
) -> None:
    """Run the `train` flow (TRL SFT / DPO / GRPO) on a build's export and register the model.

    An identical request (same export snapshot, method, config and base model) is a cache hit
    and trains nothing. The model lands in the `models` table; evaluate it with
    `ragfactory evaluate --model <model id>`, or build on it with policy model `latest:<name>`.

    Example: `ragfactory train --method dpo --run-id demo-0123abcd --trl max_steps=50 --lora`
    """
    from ragfactory.flows.config import TrainConfig

    cfg = _options_config(TrainConfig, root, method=method, run_id=run_id, parquet=parquet,
                          base_model=base_model, task=task, rewards=rewards,
                          trl=_trl_overrides(trl or []), name=name, lora={"enabled": lora},
                          output_dir=output_dir, allow_downloads=allow_downloads or None)
    from ragfactory.tasks.preflight import apply_network_policy, check_training

    wh = _warehouse(root)
    apply_network_policy(cfg.allow_downloads)
    _preflight(lambda: check_training(cfg, wh))
    _prefect_local_defaults()
    from ragfactory.flows.train import train as train_flow

    with logged_run(wh.root, "train"):
        result = train_flow(cfg)
    import pyarrow as pa

    metrics = result.get("metrics") or json.loads(result["row"]["metrics"])
    rows = [{"metric": k, "value": str(v)} for k, v in sorted(metrics.items()) if v is not None]
    print_arrow(pa.Table.from_pylist(rows), title=f"{result['model_id']} ({result['status']})")
    console.print(f"weights: {result['path']}")


@app.command()
def evaluate(
    model: Annotated[str, typer.Option(
        "--model", "-m", help="'embedded', a model id or latest:NAME (newest of a lineage) from the "
        "models table, or a checkpoint folder")] = "embedded",
    datasets: Annotated[list[str] | None, typer.Option(
        "--dataset", "-d", help="Dataset to answer (repeatable; default hotpotqa)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="First N questions of each dataset")] = None,
    modes: Annotated[list[str] | None, typer.Option(
        "--mode", help="agentic, direct or rag (repeatable; default all three)")] = None,
    max_rounds: Annotated[int | None, typer.Option(
        min=1, help="Model calls per agentic question at most (default 11)")] = None,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Tokens per model call (default 256)")] = None,
    partition: Annotated[str | None, typer.Option(
        help="Questions of this partition: test (default), valid (model selection) or train")] = None,
    compare: Annotated[str | None, typer.Option(
        "--compare", help="A base model to compare with on the same questions and modes (eval_compare)")] = None,
    allow_downloads: Annotated[bool, typer.Option(
        "--allow-downloads", help="Let a model not on this machine be fetched from the hub (default: offline)")] = False,
    root: RootOption = None,
) -> None:
    """Evaluate a model on held-out questions and print mean EM / F1 / cover-EM per dataset and mode.

    Modes: `agentic` (ReasonRAG's Reasoning / Grounding / Terminal loop), `direct` (the question
    alone) and `rag` (top-k documents, then answer). Rows go to the `evals` table; bundled
    datasets the warehouse lacks are ingested first. Compare every model evaluated with
    `ragfactory sql "select * from eval_summary"`.

    Questions come from each dataset's test partition (`--partition`), the first `--limit` in
    hash order; a question the model trained on is marked in `evals.is_seen` and warned about.
    `--compare BASE` evaluates BASE the same way and prints the paired comparison: EM / F1 of
    each, the deltas with bootstrap 95% intervals, McNemar's exact p on EM (table `eval_compare`).

    Example: `ragfactory evaluate --model latest:sft --compare embedded --dataset hotpotqa --limit 50`
    """
    import pyarrow as pa

    from ragfactory.flows.config import EvalConfig

    from ragfactory.tasks.preflight import apply_network_policy, check_evaluation

    cfg = _options_config(EvalConfig, root, model=model, datasets=datasets, limit=limit, modes=modes,
                          max_rounds=max_rounds, max_tokens=max_tokens, partition=partition, compare=compare,
                          allow_downloads=allow_downloads or None)
    wh = _warehouse(root)
    apply_network_policy(cfg.allow_downloads)
    _preflight(lambda: check_evaluation(cfg, wh))
    cleanup = _prefect_local_defaults()
    from ragfactory.flows.evaluate import evaluate as evaluate_flow

    with logged_run(wh.root, "evaluate") as log:
        summary = _run_flow(lambda: evaluate_flow(cfg, return_state=True), cleanup)
    print_arrow(pa.Table.from_pylist(summary["aggregates"]) if summary["aggregates"] else pa.table({"mode": []}),
                title=f"{summary['model_id']} (run {summary['run_id']})")
    if summary["failed_shards"]:
        console.print(f"[red]failed datasets:[/red] {', '.join(summary['failed_shards'])}")
    print_failures(summary, log, "dataset")
    for warning in summary["warnings"] + summary.get("base", {}).get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if "comparison" in summary:
        print_comparison(summary["comparison"])
    console.print('compare models: ragfactory sql "select * from eval_summary"')
    if summary["status"] != "completed":
        raise typer.Exit(code=1)


COMPARISON_COLUMNS = ("dataset", "mode", "n", "em_a", "em_b", "em_delta", "em_delta_low", "em_delta_high",
                      "f1_a", "f1_b", "f1_delta", "f1_delta_low", "f1_delta_high", "n_a_only", "n_b_only",
                      "mcnemar_p")


def print_comparison(rows: list[dict]) -> None:
    """The eval_compare rows of one comparison as a table: a is the evaluated model, b the base."""
    import pyarrow as pa

    if not rows:
        console.print("[yellow]comparison:[/yellow] the two models share no evaluated question")
        return
    table = pa.Table.from_pylist([{c: row[c] for c in COMPARISON_COLUMNS} for row in rows])
    print_arrow(table, title=f"a = {rows[0]['model_a']} vs b = {rows[0]['model_b']} "
                             f"({rows[0]['partition']} questions; {rows[0]['confidence']:.0%} paired bootstrap "
                             "intervals, McNemar exact p on EM)")
    console.print(f'the same in SQL: ragfactory sql "select * from eval_compare where run_id = \'{rows[0]["run_id"]}\'"')


def _corpus_retriever(root: Path | None, kind: str, sources: list[str] | None):
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.index import open_retriever
    from ragfactory.warehouse.catalog import query

    wh = _warehouse(root)
    known = query(wh, "select distinct source from passages order by 1").column("source").to_pylist()
    if not known:
        _fail(f"no passages in {wh.root}: run `ragfactory build` first")
    unknown = sorted(set(sources or []) - set(known))
    if unknown:
        _fail(f"unknown passage sources {unknown}; known: {known}")
    return open_retriever(wh, sources or known, RetrievalConfig(), kind)


KindOption = Annotated[str, typer.Option("--kind", help="bm25 or dense")]
SourcesOption = Annotated[
    list[str] | None, typer.Option("--source", help="Passage source to index (repeatable; default all)")
]


@retrieval_app.command("serve")
def retrieval_serve(
    kind: KindOption = "bm25",
    host: Annotated[str, typer.Option(help="Interface to bind; 127.0.0.1 keeps it local")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    sources: SourcesOption = None,
    root: RootOption = None,
) -> None:
    """Serve the warehouse's passages over the Search-R1 retrieval API (POST /retrieve).

    Example: `ragfactory retrieval serve --kind bm25 --port 8000`, then
    `curl -s localhost:8000/retrieve -d '{"queries": ["Who wrote Hamlet?"], "topk": 3, "return_scores": true}'`
    """
    from ragfactory.tasks.retrieval.server import serve

    retriever = _corpus_retriever(root, kind, sources)
    console.print(f"serving {kind} over http://{host}:{port}/retrieve")
    serve(retriever, host=host, port=port)


@retrieval_app.command("search")
def retrieval_search(
    queries: Annotated[list[str], typer.Argument(help="One or more queries")],
    k: Annotated[int, typer.Option("-k", help="Passages per query")] = 3,
    kind: KindOption = "bm25",
    sources: SourcesOption = None,
    root: RootOption = None,
) -> None:
    """Search the warehouse's passages and print the top hits per query.

    Example: `ragfactory retrieval search "Who directed Jaws?" -k 5 --kind dense`
    """
    import pyarrow as pa

    retriever = _corpus_retriever(root, kind, sources)
    for query_text, hits in zip(queries, retriever.search(list(queries), k)):
        rows = [{"rank": i + 1, "score": h.score, "passage_id": h.passage_id, "title": h.title,
                 "text": h.text} for i, h in enumerate(hits)]
        print_arrow(pa.Table.from_pylist(rows) if rows else pa.table({"rank": []}), title=query_text)


@app.command()
def serve(
    port: Annotated[int, typer.Option(help="Port of the Prefect server and UI (on 127.0.0.1)")] = 4200,
    root: RootOption = None,
    timezone: Annotated[
        str | None,
        typer.Option(help="IANA timezone of the 02:00 nightly build (default: the one set before, else UTC)"),
    ] = None,
    pools: Annotated[
        list[str] | None,
        typer.Option("--pool", help="Work pool to start a worker for (repeatable): cpu, gpu"),
    ] = None,
) -> None:
    """Start a local Prefect server with the work pools, prefect.yaml's deployments and workers.

    Prints the UI address; Ctrl-C stops the workers and the server. Flow runs write to the
    warehouse at --root. Start a `gpu` worker on the machine with the GPU.

    Example: `ragfactory serve --port 4200 --timezone Europe/Paris --pool cpu --pool gpu`
    """
    from ragfactory.serve import POOLS, StackError, serve as serve_stack

    pools = pools or ["cpu"]
    if unknown := sorted(set(pools) - set(POOLS)):
        _fail(f"unknown work pools {unknown}; known: {list(POOLS)}")
    try:
        serve_stack(port=port, root=root, timezone=timezone, pools=pools, echo=console.print)
    except StackError as exc:
        _fail(str(exc))


def _run_flow(call: Callable, cleanup: Callable[[], None]) -> dict:
    """The summary of the flow run that ``call`` starts (``ragfactory/local_flows.py``)."""
    from ragfactory.local_flows import run_flow

    def echo(line: str) -> None:
        console.print(f"[red]error:[/red] {escape(line)}", soft_wrap=True, highlight=False)

    return run_flow(call, echo, cleanup)


def _prefect_local_defaults() -> Callable[[], None]:
    from ragfactory.local_flows import prefect_local_defaults

    return prefect_local_defaults()


def print_build_summary(summary: dict) -> None:
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(summary["root"])
    counts = query(wh, _COUNTS_SQL)
    print_arrow(counts, title=f"warehouse rows per table (after run {summary['run_id']})")
    rejects = query(wh, "select dataset, reason, count(*) as n from rejects group by 1, 2 order by 1, 3 desc")
    if rejects.num_rows:
        print_arrow(rejects, title="rejects")
    else:
        console.print("rejects: none")
    print_arrow(query(wh, "select * from question_partitions"),
                title="questions per partition (builds expand train; evaluations answer test)")
    contaminated = query(wh, _CONTAMINATION_SQL, {"run_id": summary["run_id"]})
    if contaminated.num_rows:
        print_arrow(contaminated, title="training rows matching held-out or evaluation questions (contamination)")
    for warning in summary.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}")
    strategies = query(wh, "select * exclude (run_id) from strategy_summary where run_id = $run_id",
                       {"run_id": summary["run_id"]})
    if strategies.num_rows:
        print_arrow(strategies, title="search trees and training data per strategy")
    figures = {row["item"]: row["value"] for row in summary.get("report", [])}
    if figures:
        console.print(f"shards: {figures['shards']} ({figures['cached shards']} cached from an earlier run), "
                      f"engine calls: {figures['engine calls']}, cached samples: {figures['engine cache hits']}")
    for name, info in summary.get("indexes", {}).items():
        console.print(f"index {name}: {info}")
    if summary["failed_shards"]:
        console.print(f"[red]failed shards:[/red] {', '.join(summary['failed_shards'])}")
    console.print(f"status: {summary['status']}")
    console.print(f"catalog: {summary['catalog']}")
    console.print('try: ragfactory sql "select dataset, count(*) from questions group by 1"')


_CONTAMINATION_SQL = """
select export_table, method, action, count(*) as n_rows, count(distinct question_id) as n_questions
from contamination
where run_id = $run_id
group by 1, 2, 3
order by 1, 2, 3
"""

_COUNTS_SQL = """
with counts as (
    select 'questions' as "table", count(*) as n_rows from questions
    union all select 'passages', count(*) from passages
    union all select 'rejects', count(*) from rejects
    union all select 'runs', count(*) from runs
    union all select 'nodes', count(*) from nodes
    union all select 'rollouts', count(*) from rollouts
    union all select 'llm_calls', count(*) from llm_calls
    union all select 'sft_examples', count(*) from sft_examples
    union all select 'preference_pairs', count(*) from preference_pairs
)
select * from counts
"""


if __name__ == "__main__":
    app()
