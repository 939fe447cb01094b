"""The ``build`` command: run the build flow locally, then summarise what it wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
    print_failures,
    run_flow,
)


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
    from ragfactory.warehouse.store import folder_name_problem

    if run_id is not None and (problem := folder_name_problem(run_id, "run_id", "a run id")):
        fail(f"--run-id: {problem}")
    if not config.is_file():
        fail(f"{config}: no such config file" if not config.exists() else f"{config}: not a file")
    try:
        cfg = load_build_config(config)
    except ConfigError as exc:
        fail(str(exc))
    if root is not None:
        cfg = cfg.model_copy(update={"warehouse": cfg.warehouse.model_copy(update={"root": str(root)})})
    wh = open_warehouse(cfg.warehouse.root or None)
    apply_network_policy(cfg.allow_downloads)
    preflight(lambda: check_build(cfg, wh), prefix=f"{config}: ")
    cleanup = prefect_local_defaults(root=wh.root)
    from ragfactory.flows.build import build as build_flow

    with logged_run(wh.root, "build") as log:
        summary = run_flow(lambda: build_flow(cfg, run_id=run_id, checked=True, return_state=True), cleanup)
    print_build_summary(summary)
    print_failures(summary, log)
    if summary["status"] != "completed":
        raise typer.Exit(code=1)


def print_build_summary(summary: dict) -> None:
    """What a build run left in the warehouse: rows per table, rejects, partitions, contaminated
    training rows, warnings, search trees per strategy, cache use, indexes and the run's status."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(summary["root"])
    _print_warehouse_rows(wh, summary["run_id"])
    for warning in summary.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {warning}")
    strategies = query(
        wh, "select * exclude (run_id) from strategy_summary where run_id = $run_id", {"run_id": summary["run_id"]}
    )
    if strategies.num_rows:
        print_arrow(strategies, title="search trees and training data per strategy")
    _print_run_figures(summary)


def _print_warehouse_rows(wh, run_id: str) -> None:
    """Rows per table, rejects, questions per partition and the run's contaminated training rows."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.sql_files import sql_file

    counts = query(wh, sql_file("ragfactory.cli", "build_counts"))
    print_arrow(counts, title=f"warehouse rows per table (after run {run_id})")
    rejects = query(wh, "select dataset, reason, count(*) as n from rejects group by 1, 2 order by 1, 3 desc")
    if rejects.num_rows:
        print_arrow(rejects, title="rejects")
    else:
        console.print("rejects: none")
    print_arrow(
        query(wh, "select * from question_partitions"),
        title="questions per partition (builds expand train; evaluations answer test)",
    )
    contaminated = query(wh, sql_file("ragfactory.cli", "build_contamination"), {"run_id": run_id})
    if contaminated.num_rows:
        print_arrow(contaminated, title="training rows matching held-out or evaluation questions (contamination)")


def _print_run_figures(summary: dict) -> None:
    """Shards and cache use, the indexes, failed shards, status, peak memory and the catalog."""
    from ragfactory.memory import peak_rss_mb

    figures = {row["item"]: row["value"] for row in summary.get("report", [])}
    if figures:
        console.print(
            f"shards: {figures['shards']} ({figures['cached shards']} cached from an earlier run), "
            f"engine calls: {figures['engine calls']}, cached samples: {figures['engine cache hits']}"
        )
    for name, info in summary.get("indexes", {}).items():
        console.print(f"index {name}: {info}")
    if summary["failed_shards"]:
        console.print(f"[red]failed shards:[/red] {', '.join(summary['failed_shards'])}")
    console.print(f"status: {summary['status']}")
    own, child = peak_rss_mb()
    console.print(f"peak memory: {own:,.0f} MB (this process), {child:,.0f} MB (its largest child process)")
    console.print(f"catalog: {summary['catalog']}")
    console.print('try: ragfactory sql "select dataset, count(*) from questions group by 1"')
