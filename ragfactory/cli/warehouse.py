"""The commands that read and verify the warehouse: ``sql``, ``tables`` and ``check``."""

from __future__ import annotations

import datetime as dt
import errno
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ragfactory.cli.common import (
    RootOption,
    app,
    console,
    fail,
    logged_run,
    open_warehouse,
    prefect_local_defaults,
    preflight,
    print_arrow,
    run_flow,
)


def _mark_abandoned_runs(wh) -> None:
    """``mark_abandoned_runs`` for ``tables`` and ``check``. Runs another machine holds exist
    only in an object store's warehouse, and only there is Prefect asked about them (through
    ``flows.runs``, whose import costs seconds that a local warehouse's commands do not pay)."""
    from ragfactory.warehouse.runs import mark_abandoned_runs

    ended = None
    if wh.store is not None:
        from ragfactory.flows.runs import shared_flow_runs

        ended = shared_flow_runs()
    mark_abandoned_runs(wh, ended=ended)


MemoryLimitOption = Annotated[
    str | None,
    typer.Option(
        "--memory-limit",
        help="Memory the query may use, e.g. 8GiB, from 64MiB to the machine's RAM (default "
        "$RAGFACTORY_SQL_MEMORY_LIMIT, else an eighth of RAM, 1-4 GiB); nothing spills to disk",
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout", help="Seconds the query may run, 0.1 to 86400 (default $RAGFACTORY_SQL_TIMEOUT_S, else 120)"
    ),
]


# ignore_unknown_options: a query may open with a `--` comment, which click would take for an option
@app.command(context_settings={"ignore_unknown_options": True})
def sql(
    query: Annotated[str, typer.Argument(help="A read-only SQL query over the warehouse views")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, csv or json")] = "table",
    memory_limit: MemoryLimitOption = None,
    timeout: TimeoutOption = None,
    root: RootOption = None,
) -> None:
    """Run a read-only SQL query over the warehouse and print the result.

    Every table is a view (questions, passages, nodes, llm_calls, ...), plus the views shipped in
    warehouse/sql/. The query reads the warehouse and nothing else: files only as
    `warehouse://<path under the root>` (e.g. `read_parquet('warehouse://questions/*/*.parquet')`),
    no writes, settings, attachments or extensions; within a memory and a time limit
    (`--memory-limit`, `--timeout`). `duckdb -readonly <root>/catalog.duckdb` is the unrestricted
    way in. On an object store's root, the mirror pulls only the tables the
    query reads.

    Example: `ragfactory sql "select dataset, count(*) from questions group by 1" --format csv`
    """
    from ragfactory.warehouse.catalog import Refused, tables_read
    from ragfactory.warehouse.catalog import user_query as run_query

    _register_strategy_views()
    from ragfactory.warehouse.guard import first_line

    if fmt not in {"table", "csv", "json"}:
        fail(f"--format must be table, csv or json, not {fmt!r}")
    limits = _sql_limits(memory_limit, timeout)
    wh = open_warehouse(root, tables=tables_read(query))  # a mirror pulls what the query reads
    try:
        result = run_query(wh, query, limits=limits)
    except Refused as exc:
        fail(str(exc))
    except Exception as exc:  # DuckDB's whole message: its candidate bindings, LINE and caret
        fail(f"query failed: {str(exc).strip() or type(exc).__name__}")
    try:
        print_arrow(result, fmt=fmt)
    except (ArithmeticError, ValueError) as exc:  # values Python has no type for, e.g. year 32103
        fail(f"could not print the result as {fmt}: {first_line(exc)}")


def _sql_limits(memory_limit: str | None, timeout: float | None):
    """The query's limits: the options, else the environment's, else the defaults."""
    from ragfactory.warehouse.catalog import Refused, SqlLimits

    try:
        return SqlLimits.from_env(memory_limit=memory_limit, timeout_s=timeout)
    except Refused as exc:  # a limit out of its range, naming the option or variable
        fail(str(exc))


@app.command()
def tables(root: RootOption = None) -> None:
    """List the warehouse tables and views with their row counts, and the catalog path.

    A table with a damaged file, or a shard quarantined or missing, shows `damaged` and the file;
    the others are still counted (exit code 1 when any is damaged). On a root this user cannot write, the catalog file is left as it
    is and the counts come from the Parquet files.

    Example: `ragfactory tables --root /data/ragfactory`
    """
    wh = open_warehouse(root)
    if not wh.root.is_dir():
        fail(f"no warehouse at {wh.root} (build one with `ragfactory build --config <file>`)")
    _mark_abandoned_runs(wh)
    refreshed = _refresh_catalog(wh)
    view, damaged = _table_counts(wh)
    console.print(view)
    if refreshed:
        console.print(f"catalog: {wh.catalog_path}  (open with: duckdb -readonly {wh.catalog_path})")
    else:
        console.print(f"catalog: {wh.catalog_path} not refreshed: {wh.root} is read-only for this user", soft_wrap=True)
    for message in damaged:
        console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    if damaged:
        raise typer.Exit(code=1)


def _register_strategy_views() -> None:
    """Register the search strategies, whose views (``tasks/search/<name>/views/``) the catalog
    shows beside its own."""
    import ragfactory.tasks.search.registry  # noqa: F401


def _refresh_catalog(wh) -> bool:
    """Whether the catalog file could be refreshed: False on a root this user cannot write (no
    permission, or a read-only file system), where ``tables`` still counts from the Parquet files."""
    from ragfactory.warehouse.catalog import refresh_catalog

    _register_strategy_views()

    try:
        refresh_catalog(wh)
    except PermissionError:
        return False
    except OSError as exc:
        if exc.errno != errno.EROFS:
            raise
        return False
    return True


def _table_counts(wh) -> tuple[Table, list[str]]:
    """The rich table of every warehouse table (rows, files) and view, and one message per table
    that a damaged file keeps from being counted; the other tables are counted all the same."""
    import duckdb

    from ragfactory.schemas.tables import TABLES
    from ragfactory.warehouse.catalog import connect, sql_views
    from ragfactory.warehouse.guard import first_line

    _register_strategy_views()

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
    return view, damaged


RepairOption = Annotated[bool, typer.Option("--repair", help="Quarantine damaged files and rebuild what they held")]
AdoptOption = Annotated[
    bool,
    typer.Option(
        "--adopt",
        help="Record entries for unrecorded files that read as Parquet, and trainer files and dataset cards "
        "(a warehouse written before they were recorded)",
    ),
]
ExportsOption = Annotated[
    bool,
    typer.Option("--exports", help="Also load every export folder with datasets.load_dataset, as the trainers do"),
]


@app.command("check")
def check_command(
    repair: RepairOption = False,
    adopt: AdoptOption = False,
    exports: ExportsOption = False,
    root: RootOption = None,
) -> None:
    """Verify every shard file of the warehouse against its manifest entry (rows, bytes, sha256).

    Prints one line per damaged, unrecorded or missing file and exits 1 when there is any.
    `--repair` first checks that the builds and evaluations that wrote the damaged files can run
    again here, moves the files to `<root>/_quarantine/<time>/` (their entries stay, marked
    quarantined, so `check` names them until they are rebuilt), runs those runs again (only their
    lost shards do work), and checks again.
    Trainer files (`artifacts/verl/`, `artifacts/llamafactory/`) and dataset cards are verified
    the same way. `--adopt` vouches for files written before the warehouse recorded them.
    `--exports` then loads every export folder (its dataset card included) and trainer file with
    `datasets.load_dataset`, one line per one that does not load (docs/clients.md).

    Example: `ragfactory check --root /data/ragfactory` then `ragfactory check --repair --root /data/ragfactory`
    """
    from ragfactory.warehouse.integrity import check

    wh = open_warehouse(root)
    if not wh.root.is_dir():
        fail(f"no warehouse at {wh.root}")
    _mark_abandoned_runs(wh)
    problems = check(wh)
    _print_problems(problems)
    if adopt:
        problems = _adopt(wh, problems)
    if problems and repair:
        _repair(wh, problems, dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"))
        problems = check(wh)
        _print_problems(problems, prefix="still: ")
    if problems:
        _refuse_untrusted(wh, problems, repair)
    console.print(f"ok: every shard file under {wh.root} matches its manifest entry", soft_wrap=True, highlight=False)
    if exports:
        _check_exports(wh)


def _check_exports(wh) -> None:
    """One line per export folder or file ``datasets`` does not load (exit 1 when any), a note per
    empty one, then how many loaded."""
    from ragfactory.tasks.export.folders import unloadable

    problems, loaded = unloadable(wh)
    for problem in problems:
        console.print(
            escape(f"{'empty' if problem.empty else 'unloadable'}: {problem}"), soft_wrap=True, highlight=False
        )
    broken = [p for p in problems if not p.empty]
    if broken:
        console.print(
            f"{len(broken)} export(s) under {wh.root} do not load with datasets.load_dataset",
            soft_wrap=True,
            highlight=False,
        )
        raise typer.Exit(code=1)
    console.print(
        f"ok: {loaded} export folder(s) and file(s) load with datasets.load_dataset", soft_wrap=True, highlight=False
    )


def _print_problems(problems, prefix: str = "") -> None:
    """One line per file that ``check`` cannot trust, each after ``prefix``."""
    for problem in problems:
        console.print(escape(f"{prefix}{problem}"), soft_wrap=True, highlight=False)


def _adopt(wh, problems) -> list:
    """The problems left once the unrecorded files that read (as Parquet; a card as text) have
    manifest entries (``check --adopt``), after a line saying how many were adopted."""
    from ragfactory.warehouse.integrity import adopt as adopt_files

    adopted = adopt_files(wh, problems)
    console.print(f"adopted {len(adopted)} unrecorded file(s)", soft_wrap=True)
    return [p for p in problems if p not in adopted]


def _refuse_untrusted(wh, problems, repaired: bool) -> None:
    """Say how many files cannot be trusted, how many of them hold rows the warehouse lacks, and
    the command that deals with them; exit with code 1; never returns."""
    from ragfactory.warehouse.quarantine import lost

    hint = ""
    if gone := lost(problems):
        hint += f"; {len(gone)} of them quarantined or missing: their rows are not in the warehouse"
    if any(not (p.kind == "unrecorded" and p.readable) for p in problems):
        hint += (
            f"; `ragfactory check --repair --root {wh.root}` finishes the repair once the cause above is fixed"
            if repaired
            else f"; `ragfactory check --repair --root {wh.root}` rebuilds the damaged ones"
        )
    if any(p.kind == "unrecorded" and p.readable for p in problems):
        hint += (
            f"; `ragfactory check --adopt --root {wh.root}` records the unrecorded ones "
            "if they were written before manifests"
        )
    console.print(f"{len(problems)} file(s) under {wh.root} cannot be trusted{hint}", soft_wrap=True, highlight=False)
    raise typer.Exit(code=1)


def _repair(wh, problems, stamp: str) -> None:
    """Check that the runs that wrote the files of ``problems`` can run again here (before
    anything moves or Prefect starts), quarantine the files under ``_quarantine/<stamp>`` (their
    entries stay, marked, until rebuilt: ``warehouse/quarantine.py``), then run those runs again
    and ingest again the bundled datasets they held. A file no run can rebuild gets a line saying
    what to do; a repair that fails says which shards are still set aside."""
    from ragfactory.tasks.repair_plan import check_repair, plan_repair
    from ragfactory.warehouse.quarantine import QUARANTINE_DIR, quarantine

    plan = plan_repair(wh, [p for p in problems if not (p.kind == "unrecorded" and p.readable)])
    preflight(lambda: check_repair(wh, plan["runs"]), prefix="nothing was moved: ")
    moved = quarantine(wh, problems, stamp)
    console.print(f"quarantined {len(moved)} file(s) in {wh.root / QUARANTINE_DIR / stamp}", soft_wrap=True)
    for line in plan["manual"]:
        console.print(f"[yellow]cannot rebuild:[/yellow] {escape(line)}", soft_wrap=True)
    if not (plan["runs"] or plan["ingest"]):
        return
    console.print(
        f"rebuilding: runs {', '.join(plan['runs']) or '-'}; ingest {', '.join(plan['ingest']) or '-'}", soft_wrap=True
    )
    cleanup = prefect_local_defaults(root=wh.root)
    from ragfactory.flows.repair import repair as repair_flow

    with logged_run(wh.root, "repair", after_failure=lambda: _left_behind(wh)):
        result = run_flow(lambda: repair_flow(wh.location, plan["runs"], plan["ingest"], return_state=True), cleanup)
    for run_id, status in result["runs"].items():
        console.print(f"run {run_id}: {status}", soft_wrap=True)


def _left_behind(wh) -> str:
    """What a failed repair leaves: the shards still set aside, and the command that finishes."""
    from ragfactory.warehouse.integrity import check
    from ragfactory.warehouse.quarantine import lost

    gone = lost(check(wh))
    if not gone:
        return ""
    names = ", ".join(p.path for p in gone[:3]) + (f" and {len(gone) - 3} more" if len(gone) > 3 else "")
    return (
        f"; the repair did not finish: {len(gone)} shard(s) quarantined or missing ({names}), "
        f"their rows not in the warehouse; `ragfactory check --repair --root {wh.root}` finishes it"
    )
