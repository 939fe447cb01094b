"""The ``evaluate`` command: score a model on held-out questions, alone or against a base model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragfactory.cli.common import (
    RootOption,
    app,
    console,
    key_values,
    logged_run,
    open_warehouse,
    options_config,
    prefect_local_defaults,
    preflight,
    print_arrow,
    print_failures,
    run_flow,
)

ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="'embedded', a model id or latest:NAME (newest of a lineage) from the "
        "models table, or a checkpoint folder",
    ),
]
DatasetsOption = Annotated[
    list[str] | None, typer.Option("--dataset", "-d", help="Dataset to answer (repeatable; default hotpotqa)")
]
LimitOption = Annotated[int | None, typer.Option(min=1, help="First N questions of each dataset")]
ModesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mode",
        help="agentic, direct, rag, or a mode a strategy adds (repeatable; default the first three)",
    ),
]
SourcesOption = Annotated[
    list[str] | None,
    typer.Option(
        "--source", help="Passage source searched (repeatable; default each dataset's own passages), e.g. corpus"
    ),
]
MaxRoundsOption = Annotated[
    int | None, typer.Option(min=1, help="Model calls per agentic question at most (default 11)")
]
MaxTokensOption = Annotated[int | None, typer.Option(min=1, help="Tokens per model call (default 256)")]
PartitionOption = Annotated[
    str | None, typer.Option(help="Questions of this partition: test (default), valid (model selection) or train")
]
CompareOption = Annotated[
    str | None,
    typer.Option("--compare", help="A base model to compare with on the same questions and modes (eval_compare)"),
]
EngineOption = Annotated[
    list[str] | None,
    typer.Option(
        "--engine-option",
        help="Engine setting key=value (repeatable), e.g. kv_cache_mb=1024: more rows per decode chunk, more memory",
    ),
]
AllowDownloadsOption = Annotated[
    bool,
    typer.Option(
        "--allow-downloads", help="Let a model not on this machine be fetched from the hub (default: offline)"
    ),
]


@app.command()
def evaluate(
    model: ModelOption = "embedded",
    datasets: DatasetsOption = None,
    limit: LimitOption = None,
    modes: ModesOption = None,
    max_rounds: MaxRoundsOption = None,
    max_tokens: MaxTokensOption = None,
    partition: PartitionOption = None,
    compare: CompareOption = None,
    sources: SourcesOption = None,
    engine_options: EngineOption = None,
    allow_downloads: AllowDownloadsOption = False,
    root: RootOption = None,
) -> None:
    """Evaluate a model on held-out questions and print mean EM / F1 / cover-EM per dataset and mode.

    Modes: `agentic` (ReasonRAG's Reasoning / Grounding / Terminal loop), `direct` (the question
    alone), `rag` (top-k documents, then answer), and those strategies add (docs/evaluation.md).
    Rows go to the `evals` table; bundled
    datasets the warehouse lacks are ingested first. Compare every model evaluated with
    `ragfactory sql "select * from eval_summary"`.

    Questions come from each dataset's test partition (`--partition`), the first `--limit` in
    hash order; a question the model trained on is marked in `evals.is_seen` and warned about.
    `--compare BASE` evaluates BASE the same way and prints the paired comparison: EM / F1 of
    each, the deltas with bootstrap 95% intervals, McNemar's exact p on EM (table `eval_compare`).

    Example: `ragfactory evaluate --model latest:sft --compare embedded --dataset hotpotqa --limit 50`
    """
    engine = {"policy": {"options": key_values(engine_options, "--engine-option")}} if engine_options else None
    options = {"model": model, "datasets": datasets, "limit": limit, "modes": modes, "max_rounds": max_rounds}
    options |= {"max_tokens": max_tokens, "partition": partition, "compare": compare, "sources": sources}
    summary, log = _run_evaluation(root, llm=engine, allow_downloads=allow_downloads or None, **options)
    _report_evaluation(summary, log)


def _run_evaluation(root: Path | None, **options) -> tuple[dict, Path]:
    """The evaluate flow's summary for the command's options (an ``EvalConfig``), once its
    preflight checks pass, and the log file the run wrote (the failure lines name it)."""
    from ragfactory.flows.config import EvalConfig
    from ragfactory.tasks.preflight import apply_network_policy, check_evaluation

    cfg = options_config(EvalConfig, root, **options)
    wh = open_warehouse(root)
    apply_network_policy(cfg.allow_downloads)
    preflight(lambda: check_evaluation(cfg, wh))
    cleanup = prefect_local_defaults(root=wh.root)
    from ragfactory.flows.evaluate import evaluate as evaluate_flow

    with logged_run(wh.root, "evaluate") as log:
        summary = run_flow(lambda: evaluate_flow(cfg, return_state=True), cleanup)
    return summary, log


def _report_evaluation(summary: dict, log: Path) -> None:
    """The mean scores per dataset and mode, the datasets that failed and why, the warnings (the
    base model's too), and the comparison with the base model when there is one; exit 1 when the
    run did not complete."""
    import pyarrow as pa

    print_arrow(
        pa.Table.from_pylist(summary["aggregates"]) if summary["aggregates"] else pa.table({"mode": []}),
        title=f"{summary['model_id']} (run {summary['run_id']})",
    )
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


COMPARISON_COLUMNS = (
    "dataset",
    "mode",
    "n",
    "em_a",
    "em_b",
    "em_delta",
    "em_delta_low",
    "em_delta_high",
    "f1_a",
    "f1_b",
    "f1_delta",
    "f1_delta_low",
    "f1_delta_high",
    "n_a_only",
    "n_b_only",
    "mcnemar_p",
)


def print_comparison(rows: list[dict]) -> None:
    """The eval_compare rows of one comparison as a table: a is the evaluated model, b the base."""
    import pyarrow as pa

    if not rows:
        console.print("[yellow]comparison:[/yellow] the two models share no evaluated question")
        return
    table = pa.Table.from_pylist([{c: row[c] for c in COMPARISON_COLUMNS} for row in rows])
    print_arrow(
        table,
        title=f"a = {rows[0]['model_a']} vs b = {rows[0]['model_b']} "
        f"({rows[0]['partition']} questions; {rows[0]['confidence']:.0%} paired bootstrap "
        "intervals, McNemar exact p on EM)",
    )
    console.print(
        f"the same in SQL: ragfactory sql \"select * from eval_compare where run_id = '{rows[0]['run_id']}'\""
    )
