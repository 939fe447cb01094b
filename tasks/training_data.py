"""Prefect task for the export stage: a run's search trees -> training-data tables.

Which tables a strategy's trees feed, and which tables those exporters read, the export
registry declares under the strategy's name (``tasks/export/registry.py``). One shard per (run,
tree strategy), named after it, so re-exporting replaces it exactly. The rows keep the node ids
they came from and read with ``datasets.load_dataset("parquet", ...)``; a ``verl_prompts`` table
is also written as a standalone verl parquet under ``artifacts/verl/<run>/`` that verl reads
without our columns, and ``sft_examples`` / ``preference_pairs`` as LLaMA-Factory datasets with
their ``dataset_info.json`` under ``artifacts/llamafactory/<run>/``.

Every table is decontaminated before it is written (``tasks/export/contamination.py``): its rows'
questions are checked against the warehouse's held-out questions (``valid`` and ``test`` of every
dataset) and the configured evaluation files; the matches land in the ``contamination`` table
(one shard per run and strategy) and, in ``drop`` mode, the rows stay out of the export, the verl
parquet included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prefect import get_run_logger, task

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.data.loaders import load_questions
from ragfactory.tasks.export.config import DecontaminationConfig, ExportConfig
from ragfactory.tasks.export.contamination import EvalSet, contaminated_rows, screen_questions
from ragfactory.tasks.export.gold_recall import GOLD_RECALL_SQL, keep_gold_recall
from ragfactory.tasks.export.lengths import length_warnings
from ragfactory.tasks.export.llamafactory import KINDS as LLAMAFACTORY_TABLES
from ragfactory.tasks.export.llamafactory import write_llamafactory
from ragfactory.tasks.export.registry import EXPORTS, SCREENED_QUESTION_COLUMNS
from ragfactory.tasks.export.skips import TABLE as SKIPS
from ragfactory.tasks.export.skips import recording, skip_rows
from ragfactory.tasks.export.verl import verl_command, write_verl_parquet
from ragfactory.tasks.ingest import dataset_file
from ragfactory.tasks.llm.cache import CallCache
from ragfactory.tasks.llm.config import LLMConfig
from ragfactory.tasks.llm.engine import make_batcher
from ragfactory.tasks.retrieval.dense import LazyEmbedder
from ragfactory.tasks.retry import retry_unless_permanent
from ragfactory.tasks.rewards.embedding_cache import EmbeddingCache
from ragfactory.tasks.search.registry import STRATEGIES
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse

TREE_SQL = sql_file("ragfactory.tasks", "export_tree")
QUESTIONS_SQL = sql_file("ragfactory.tasks", "export_questions")
CALLS_SQL = sql_file("ragfactory.tasks", "export_calls")
HELD_OUT_SQL = sql_file("ragfactory.tasks", "held_out_questions")


def export_inputs(
    wh: Warehouse, run_id: str, strategy: str, reads: Mapping[str, Sequence[str]]
) -> dict[str, list[dict]]:
    """The run's rows of each table an export reads, with the declared columns only: ``nodes`` of
    the tree strategy (by question and path), the ``questions`` those nodes answer (always, with
    at least their text: decontamination screens it), the ``llm_calls`` behind those nodes, and
    any other table whole for the run."""
    params = {"run_id": run_id, "strategy": strategy}
    wanted = dict(reads) | {
        "questions": _columns("questions", [*reads.get("questions", ()), *SCREENED_QUESTION_COLUMNS])
    }
    inputs = {}
    for table, columns in wanted.items():
        if table == "nodes":
            rows = query(wh, TREE_SQL, params)
        elif table == "questions":
            rows = query(wh, QUESTIONS_SQL, params)
        elif table == "llm_calls":
            rows = query(wh, CALLS_SQL, params)
        else:
            rows = wh.read(table, run_id=run_id)
        inputs[table] = rows.select(list(columns)).to_pylist()
    return inputs


def _columns(table: str, columns: Sequence[str]) -> tuple[str, ...]:
    return tuple(c for c in table_spec(table).schema.names if c in set(columns))


def eval_set(wh: Warehouse, config: DecontaminationConfig) -> EvalSet:
    """The held-out questions of the warehouse and the configured evaluation files."""
    rows = query(wh, HELD_OUT_SQL, {"partitions": list(config.against)}).to_pylist()
    for dataset in config.eval_files:
        path = dataset_file(dataset)
        loaded = load_questions(path, dataset.name, dataset.resolved_format, dataset.split, dataset.limit)
        rows += [
            {"question_id": q["question_id"], "question": q["question"], "source": str(path)} for q in loaded.questions
        ]
    return EvalSet(
        tuple(r["question_id"] for r in rows), tuple(r["question"] for r in rows), tuple(r["source"] for r in rows)
    )


def decontaminate(
    wh: Warehouse,
    run_id: str,
    strategy: str,
    tables: dict[str, list[dict]],
    questions: list[dict],
    config: DecontaminationConfig,
    llm: LLMConfig | None,
) -> tuple[dict[str, list[dict]], list[dict]]:
    """(tables without their contaminated rows in drop mode, ``contamination`` rows); the judge's
    calls, when it is asked, land in ``llm_calls`` as the shard ``contamination-<strategy>``."""
    params = config.params()
    texts = {q["question_id"]: q["question"] for q in questions}
    if params.mode == "off" or not any(tables.values()):
        return tables, []
    cache = EmbeddingCache(LazyEmbedder(config.embedder), wh.artifacts_dir("embeddings")) if params.embedding else None
    judge = None
    if params.judge:
        judge = make_batcher(llm or LLMConfig(), CallCache.from_warehouse(wh, run_id), wh.artifacts_dir("models"))
    found = screen_questions(texts, eval_set(wh, config), params, cache, judge)
    if cache is not None:
        cache.flush()
    if judge is not None:
        judge.cache.write(wh, f"contamination-{strategy}")
    kept, flagged = {}, []
    for table, rows in tables.items():
        kept[table], found_rows = contaminated_rows(table, table_spec(table).key[0], rows, texts, found, params.mode)
        flagged += found_rows
    return kept, flagged


def write_trainer_files(wh: Warehouse, run_id: str, strategy: str, tables: Mapping) -> None:
    """The files verl and LLaMA-Factory read as they are, beside the warehouse's shards."""
    if "verl_prompts" in tables:
        folder = wh.artifacts_dir("verl", run_id)
        path = write_verl_parquet(tables["verl_prompts"], folder / f"{strategy}.parquet", root=wh.root)
        get_run_logger().info("verl: %s", verl_command(path))
    if set(LLAMAFACTORY_TABLES.values()) & set(tables):
        folder = wh.artifacts_dir("llamafactory", run_id)
        write_llamafactory(folder, strategy, tables, root=wh.root)
        get_run_logger().info("LLaMA-Factory: dataset_dir: %s", folder)
    for line in length_warnings(tables):  # rows a trainer would drop or cut at its default length
        get_run_logger().warning("%s: %s", strategy, line)


@task(retries=1, retry_delay_seconds=5, retry_condition_fn=retry_unless_permanent, task_run_name="export-{strategy}")
def write_training_data(
    root: str, run_id: str, strategy: str, config: ExportConfig, run_seed: int = 0, llm: LLMConfig | None = None
) -> dict:
    """Write the run's decontaminated training-data shards for one tree strategy (``nodes.strategy``)
    with the exporters registered for its strategy; returns rows per table and the
    contaminated rows found."""
    wh = Warehouse(root)
    exports = EXPORTS.get(STRATEGIES.by_tree_name(strategy).name)
    inputs = export_inputs(wh, run_id, strategy, exports.reads)
    with recording() as skips:  # why an exporter gave a question no row
        tables = exports.export(inputs, config, run_seed)
        if config.require_gold_recall is not None and "sft_examples" in tables:
            found = {
                r["node_id"]: r
                for r in query(wh, GOLD_RECALL_SQL, {"run_id": run_id, "strategy": strategy}).to_pylist()
            }
            tables["sft_examples"] = keep_gold_recall(tables["sft_examples"], found, config.require_gold_recall)
    wh.write(SKIPS, skip_rows(skips), strategy, partition={"run_id": run_id})
    tables, contaminated = decontaminate(wh, run_id, strategy, tables, inputs["questions"], config.decontamination, llm)
    wh.write("contamination", contaminated, strategy, partition={"run_id": run_id})
    for table, rows in tables.items():
        wh.write(table, rows, strategy, partition={"run_id": run_id})
    write_trainer_files(wh, run_id, strategy, tables)
    counts = {table: len(rows) for table, rows in tables.items()}
    get_run_logger().info(
        "%s exports: %s; %d contaminated rows (%s)", strategy, counts, len(contaminated), config.decontamination.mode
    )
    return {"strategy": strategy, **counts, "contaminated": len(contaminated)}
