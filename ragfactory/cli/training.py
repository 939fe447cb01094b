"""The ``train`` command: train a model on a build's export and register it."""

from __future__ import annotations

import json
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
    run_flow,
)

MethodOption = Annotated[
    str,
    typer.Option(
        "--method",
        help="sft, dpo, grpo; grpo-agentic (the build's retriever answers <search>), "
        "tree-advantage (TreePS trajectories), prm (a step reward model on step_labels)",
    ),
]
RunIdOption = Annotated[str | None, typer.Option("--run-id", help="Build run whose export is trained on")]
ParquetOption = Annotated[str | None, typer.Option(help="A parquet file or folder instead of a run's export")]
BaseModelOption = Annotated[
    str, typer.Option(help="'embedded' (SmolLM2-135M), a checkpoint folder, a model id or latest:NAME")
]
TaskOption = Annotated[str | None, typer.Option(help="GRPO only: qa (answers) or plan (APEX planner, SEPR)")]
RewardsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--reward",
        help="GRPO reward function (repeatable): answer_em, answer_f1, format, sepr; grpo-agentic also r3_process",
    ),
]
TrlOption = Annotated[
    list[str] | None, typer.Option("--trl", help="TRL config override key=value (repeatable), e.g. max_steps=100")
]
MethodSettingsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--option",
        help="Method setting key=value (repeatable): grpo-agentic max_turns, top_k; prm heldout_fraction, "
        "max_length; any method trackers=tensorboard,mlflow,wandb (files under the model's trackers/)",
    ),
]
LoraOption = Annotated[bool, typer.Option("--lora/--no-lora", help="Train LoRA adapters (peft)")]
NameOption = Annotated[str | None, typer.Option(help="Lineage name (default: the method)")]
OutputDirOption = Annotated[str | None, typer.Option(help="Where the model goes")]
AllowDownloadsOption = Annotated[
    bool,
    typer.Option(
        "--allow-downloads", help="Let a base model not on this machine be fetched from the hub (default: offline)"
    ),
]


@app.command()
def train(
    method: MethodOption,
    run_id: RunIdOption = None,
    parquet: ParquetOption = None,
    base_model: BaseModelOption = "embedded",
    task: TaskOption = None,
    rewards: RewardsOption = None,
    trl: TrlOption = None,
    options: MethodSettingsOption = None,
    lora: LoraOption = False,
    name: NameOption = None,
    output_dir: OutputDirOption = None,
    allow_downloads: AllowDownloadsOption = False,
    root: RootOption = None,
) -> None:
    """Run the `train` flow (SFT / DPO / GRPO, agentic GRPO, tree advantages, a PRM); register the model.

    An identical request (same export snapshot, method, config and base model) is a cache hit
    and trains nothing. The model lands in the `models` table; evaluate it with
    `ragfactory evaluate --model <model id>`, or build on it with policy model `latest:<name>`.

    Example: `ragfactory train --method dpo --run-id demo-0123abcd --trl max_steps=50 --lora`
    """
    result = _run_training(
        root,
        method=method,
        run_id=run_id,
        parquet=parquet,
        base_model=base_model,
        task=task,
        rewards=rewards,
        trl=key_values(trl or [], "--trl"),
        options=key_values(options or [], "--option"),
        name=name,
        lora={"enabled": lora},
        output_dir=output_dir,
        allow_downloads=allow_downloads or None,
    )
    _print_trained(result)


def _run_training(root: Path | None, **options) -> dict:
    """The train flow's result for the command's options (a ``TrainConfig``), once its preflight
    checks pass; the run logs to the warehouse's ``logs/`` folder."""
    from ragfactory.flows.config import TrainConfig
    from ragfactory.tasks.preflight import apply_network_policy, check_training

    cfg = options_config(TrainConfig, root, **options)
    wh = open_warehouse(root)
    apply_network_policy(cfg.allow_downloads)
    preflight(lambda: check_training(cfg, wh))
    cleanup = prefect_local_defaults(root=wh.root)
    from ragfactory.flows.train import train as train_flow

    with logged_run(wh.root, "train"):
        return run_flow(lambda: train_flow(cfg, return_state=True), cleanup)


def _print_trained(result: dict) -> None:
    """The trained model's metrics as a table titled with its id and status, then where its
    weights are."""
    import pyarrow as pa

    metrics = result.get("metrics") or json.loads(result["row"]["metrics"])
    rows = [{"metric": k, "value": str(v)} for k, v in sorted(metrics.items()) if v is not None]
    print_arrow(pa.Table.from_pylist(rows), title=f"{result['model_id']} ({result['status']})")
    console.print(f"weights: {result['path']}")
