"""Prefect task that publishes a build's artifacts: a table of counts, a markdown SQL note, and a
dataset card in each of the run's export folders (``tasks/export/cards.py``)."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from ragfactory.tasks.export.cards import write_cards
from ragfactory.warehouse.report import artifact_key, report_markdown, report_rows
from ragfactory.warehouse.store import Warehouse


@task(task_run_name="report-{run_id}", cache_policy=NONE)
def publish_build_report(root: str, run_id: str, name: str, datasets: list[str], shards: list[dict]) -> list[dict]:
    """Create the build's table and markdown artifacts (keyed by config name); returns the rows."""
    wh = Warehouse(root)
    rows = report_rows(wh, run_id, datasets, shards)
    create_table_artifact(rows, key=artifact_key(name), description=f"What build {run_id} produced")
    create_markdown_artifact(
        report_markdown(run_id, str(wh.catalog_path), rows),
        key=artifact_key(name, "sql"),
        description=f"SQL to inspect build {run_id}",
    )
    write_cards(wh, run_id)
    return rows
