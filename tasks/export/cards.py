"""A Hugging Face dataset card (``README.md``) in every export folder of a run (docs/ledger.md,
"Dataset cards").

The folders are those ``tasks/export/folders.py`` lists: each exported table's
``<table>/run_id=<run>/`` and the trainer folders ``artifacts/verl/<run>/`` and
``artifacts/llamafactory/<run>/``. A card's YAML header gives the source datasets' licences (those
``ragfactory/data/LICENSES`` states for the bundled samples), the task categories, the size
category and ``configs``/``data_files``, so ``datasets.load_dataset(folder)`` reads the rows; its
body says what the run was (config hash, models, strategy parameters), what it holds, what it
kept of what it expanded, what it cost (the ``run_cost`` view), the contamination check, where
its labels come from and how TRL, verl and LLaMA-Factory load it. Everything comes from the
warehouse; a card is rewritten whole each time its run exports.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import yaml

from ragfactory.tasks.export.registry import EXPORTS
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.exported import CARD
from ragfactory.warehouse.integrity import committed
from ragfactory.warehouse.store import Warehouse

# The bundled samples' licences (ragfactory/data/LICENSES/README.md), as Hub licence ids.
LICENSES = {"hotpotqa": "cc-by-sa-4.0", "musique": "cc-by-4.0", "2wikimultihopqa": "apache-2.0", "bamboogle": "mit"}
# Where each exported table's labels come from (docs/architecture.md, "The data flow").
LABEL_SOURCES = {
    "sft_examples": "kept reasoning chains whose final answer scores above 0 under the strategy's answer metric",
    "preference_pairs": "sibling decisions ranked by their Monte-Carlo rollout values (chosen: kept, rejected: pruned)",
    "grpo_prompts": "questions with their golden answers (and gold plans for the SEPR plan reward), rewarded online",
    "trajectories": "root-to-leaf paths with the outcome reward of their final answer and per-step advantages",
    "step_labels": "per-step Monte-Carlo values and process advantages from the valued tree",
    "verl_prompts": "questions with golden answers in verl's reward_model column, rewarded online",
}
LOADING = """## How to load

- **datasets / TRL:** `datasets.load_dataset("{folder}", split="train")`; SFT rows (`messages`) go to
  `trl.SFTTrainer`, preference rows (`prompt`, `chosen`, `rejected`) to `trl.DPOTrainer`, prompts to
  `trl.GRPOTrainer`.
- **verl:** `data.train_files=<folder>/<strategy>.parquet` (the files of `artifacts/verl/<run>/`).
- **LLaMA-Factory:** `dataset_dir: <folder>` (the `dataset_info.json` of `artifacts/llamafactory/<run>/`)
  and `dataset: <strategy>_sft` or `<strategy>_dpo`.
"""


def card_folders(wh: Warehouse, run_id: str) -> list[tuple[Path, str | None]]:
    """(folder, exported table or None for a trainer folder) of every export folder of the run."""
    folders = []
    for table in EXPORTS.tables():
        folder = wh.root / table / f"run_id={run_id}"
        if any(folder.glob("*.parquet")):
            folders.append((folder, table))
    for client in ("verl", "llamafactory"):
        folder = wh.root / "artifacts" / client / run_id
        if any(folder.glob("*.parquet")):
            folders.append((folder, None))
    return folders


def size_category(rows: int) -> str:
    """The Hub's size bucket for ``rows``."""
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if rows < limit:
            return name
    return "n>1M"


def _configs(folder: Path, table: str | None) -> list[dict]:
    """One config over the table's shards; a trainer folder's files differ in columns, one config each.

    Config names are unique across a run's folders (the table, or the trainer folder and file):
    ``datasets`` caches a local folder under its base name (``run_id=<run>``, or ``<run>``, the
    same for every table of a run) and the config name, so two tables under one name would read
    each other's cached rows."""
    if table is not None:
        return [{"config_name": table, "default": True, "data_files": [{"split": "train", "path": "*.parquet"}]}]
    files = sorted(folder.glob("*.parquet"))
    return [
        {
            "config_name": f"{folder.parent.name}-{path.stem}",
            "data_files": [{"split": "train", "path": path.name}],
            **({"default": True} if i == 0 else {}),
        }
        for i, path in enumerate(files)
    ]


def _run(wh: Warehouse, run_id: str) -> dict:
    rows = query(wh, "select config_hash, config, inputs from runs where run_id = $run", {"run": run_id}).to_pylist()
    row = rows[0] if rows else {"config_hash": None, "config": None, "inputs": None}
    config = row["config"]
    config = json.loads(config) if isinstance(config, str) and config else (config or {})
    sql = "select distinct q.dataset from nodes n join questions q using (question_id) where n.run_id = $run order by 1"
    datasets = (
        sorted({i["dataset"] for i in row["inputs"] or []})
        or query(wh, sql, {"run": run_id}).column("dataset").to_pylist()
    )
    return {"hash": row["config_hash"], "config": config, "datasets": datasets}


def header(folder: Path, table: str | None, datasets: list[str], rows: int) -> dict:
    """The card's YAML metadata."""
    licences = sorted({LICENSES.get(name, "other") for name in datasets}) or ["other"]
    return {
        "license": licences[0] if len(licences) == 1 else licences,
        "task_categories": ["question-answering", "text-generation"],
        "language": ["en"],
        "size_categories": [size_category(rows)],
        "tags": ["agentic-rag", "process-supervision", "ragfactory"],
        "configs": _configs(folder, table),
    }


def _table_md(rows: list[dict]) -> str:
    if not rows:
        return "(none)\n"
    names = list(rows[0])
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    lines += ["| " + " | ".join("" if r[n] is None else str(r[n]) for n in names) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _yield(wh: Warehouse, run_id: str, table: str | None) -> list[dict]:
    """Per strategy: questions expanded, and questions with a row in the folder's table."""
    if table is None:
        kept = "select null as strategy, null as kept where false"
    else:  # verl_prompts keeps its strategy inside extra_info, as verl's files do
        column = "extra_info.strategy" if table == "verl_prompts" else "strategy"
        kept = (
            f'select {column} as strategy, count(distinct question_id) as kept from "{table}" '
            "where run_id = $run group by 1"
        )
    sql = (
        f"with kept as ({kept}), expanded as (select strategy, count(distinct question_id) as expanded "
        "from nodes where run_id = $run group by strategy) "
        "select strategy, expanded, kept from expanded left join kept using (strategy) order by strategy"
    )
    return query(wh, sql, {"run": run_id}).to_pylist()


def body(wh: Warehouse, run_id: str, folder: Path, table: str | None, run: dict, rows: int) -> str:
    """The card's markdown: the run, its models and parameters, counts, yield, cost, labels, loading."""
    config = run["config"]
    llm, search = config.get("llm") or {}, config.get("search") or {}
    strategies = search.get("strategies") or []
    params = {name: search.get(name) for name in strategies if search.get(name) is not None}
    cost = query(wh, "select * exclude (run_id) from run_cost where run_id = $run", {"run": run_id}).to_pylist()
    dirty = query(
        wh,
        "select export_table, method, count(*) as rows from contamination where run_id = $run "
        "group by all order by all",
        {"run": run_id},
    ).to_pylist()
    what = f"the `{table}` table" if table else f"the {folder.parent.name} trainer files"
    return "\n".join(
        [
            f"# {run_id}: {what}\n",
            f"Exported by ragfactory from run `{run_id}` (config hash `{run['hash']}`), {rows} rows.\n",
            f"- **Source datasets:** {', '.join(run['datasets']) or 'unknown'}",
            f"- **Policy model:** `{(llm.get('policy') or {}).get('model')}`",
            f"- **Judge model:** `{(llm.get('judge') or llm.get('policy') or {}).get('model')}`",
            f"- **Strategies:** {', '.join(strategies)}\n",
            "## Strategy parameters\n",
            "```json",
            json.dumps(params, indent=2, sort_keys=True),
            "```\n",
            "## Yield (questions expanded, questions kept)\n",
            _table_md(_yield(wh, run_id, table)),
            "## Cost (the `run_cost` view)\n",
            _table_md(cost),
            "## Contamination\n",
            _table_md(dirty) if dirty else "No row matched an evaluation question.\n",
            "## Label sources\n",
            f"{LABEL_SOURCES.get(table, 'see each table of the run')}\n"
            if table
            else "".join(f"- `{t}`: {s}\n" for t, s in LABEL_SOURCES.items()),
            LOADING.format(folder=folder),
        ]
    )


def write_cards(wh: Warehouse, run_id: str) -> list[Path]:
    """Write (replace) the dataset card of every export folder of ``run_id``; their paths."""
    run, written = _run(wh, run_id), []
    for folder, table in card_folders(wh, run_id):
        rows = sum(pq.read_metadata(path).num_rows for path in folder.glob("*.parquet"))
        meta = yaml.safe_dump(header(folder, table, run["datasets"], rows), sort_keys=False)
        with committed(folder / CARD, wh.root) as tmp:  # with its manifest entry (warehouse.exported)
            tmp.write_text(f"---\n{meta}---\n\n{body(wh, run_id, folder, table, run, rows)}", encoding="utf-8")
        written.append(folder / CARD)
    return written


def card_metadata(path: Path) -> dict[str, Any]:
    """The YAML header of a card (for tests and checks)."""
    text = Path(path).read_text(encoding="utf-8")
    return yaml.safe_load(text.split("---\n", 2)[1])
