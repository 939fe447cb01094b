"""What the dashboard reads: the SQL files beside this module, run with parameters.

Every query here is one of ``sql/*.sql`` with ``$name`` parameters bound by DuckDB
(``export_rows`` alone names a table, taken from the method registry); no text a person typed is
ever put into SQL (the console is the one place a person's SQL runs, and it goes through
``warehouse.catalog.user_query``). Each request opens one connection over the catalog's
views (``Reader``), which sees every file written up to then, and closes it: the dashboard never
writes to the warehouse and holds nothing open between requests.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources

from ragfactory.warehouse.store import Warehouse

STOCK_TABLES = {"sft": "sft_examples", "dpo": "preference_pairs", "grpo": "grpo_prompts"}


@cache
def sql_text(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return (resources.files("ragfactory.dashboard") / "sql" / f"{name}.sql").read_text(encoding="utf-8").strip()


def literal_sql(name: str, params: dict) -> str:
    """The query with its parameters written in as literals: shown to a person, to copy into the
    console or ``ragfactory sql``; never executed by the dashboard (which binds them)."""
    text = "\n".join(line for line in sql_text(name).splitlines() if not line.startswith("--"))
    for key in sorted(params, key=len, reverse=True):
        text = text.replace(f"${key}", _literal(params[key]))
    return text


def _literal(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def jsonable(value):
    """A DuckDB value as JSON: NaN and infinities become None, timestamps ISO text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


@dataclass
class Reader:
    """One request's read-only view of the warehouse: ``rows(name, **params)`` runs ``sql/name.sql``."""

    con: object

    def rows(self, name: str, **params) -> list[dict]:
        table = self.con.sql(sql_text(name), params=params or None).to_arrow_table()
        return [jsonable(row) for row in table.to_pylist()]

    def columns(self, name: str, **params) -> dict[str, list]:
        table = self.con.sql(sql_text(name), params=params or None).to_arrow_table()
        return {column: jsonable(table.column(column).to_pylist()) for column in table.column_names}


@contextlib.contextmanager
def reading(warehouse: Warehouse) -> Iterator[Reader]:
    """A ``Reader`` over the warehouse's current files, closed afterwards."""
    from ragfactory.warehouse.catalog import connect

    con = connect(warehouse)
    try:
        yield Reader(con)
    finally:
        con.close()


def build_ids(reader: Reader) -> list[str]:
    """The builds' run ids, newest first."""
    return [row["run_id"] for row in reader.rows("build_ids")]


def builds(reader: Reader) -> list[dict]:
    """Every build with its per-strategy figures and export counts (the runs page)."""
    runs = reader.rows("builds")
    strategies: dict[str, list[dict]] = {}
    for row in reader.rows("strategy_rows"):
        strategies.setdefault(row["run_id"], []).append(row)
    exports: dict[str, dict[str, int]] = {}
    for row in reader.rows("exports"):
        exports.setdefault(row["run_id"], {})[row["export_table"]] = row["n"]
    return [run | {"strategies": strategies.get(run["run_id"], []), "exports": exports.get(run["run_id"], {})}
            for run in runs]


def tree(reader: Reader, run: str, strategy: str, question: str) -> dict:
    """One question's tree in columns (compact for 10,000 nodes): ids, parents and what a node
    shows before it is clicked."""
    return reader.columns("tree", run=run, strategy=strategy, question=question)


def node_detail(reader: Reader, run: str, node_id: str) -> dict | None:
    """Everything about one node: its row (parsed fields read), its LLM call, its rewards and
    rollouts, and the preference pairs and SFT examples that came from it. Passages are fetched
    apart (``passages``), on demand."""
    found = reader.rows("node", run=run, node=node_id)
    if not found:
        return None
    node = found[0]
    try:
        node["parsed"] = json.loads(node["parsed"]) if node.get("parsed") else None
    except json.JSONDecodeError:
        pass  # shown as the text it is
    call = reader.rows("node_call", run=run, call=node["llm_call_id"]) if node.get("llm_call_id") else []
    if call and call[0].get("sampling"):
        call[0]["sampling"] = json.loads(call[0]["sampling"])
    return {
        "node": node,
        "llm_call": call[0] if call else None,
        "rewards": reader.rows("node_rewards", run=run, node=node_id),
        "rollouts": reader.rows("node_rollouts", run=run, node=node_id),
        "pairs": reader.rows("node_pairs", run=run, node=node_id),
        "sft_examples": reader.rows("node_sft", run=run, node=node_id),
    }


def passages(reader: Reader, ids: list[str]) -> list[dict]:
    return reader.rows("node_passages", ids=list(ids)) if ids else []


@dataclass(frozen=True)
class RewardPlot:
    key: str
    title: str
    column: str  # the plotted value; ``strategy`` names the trace


REWARD_PLOTS = (
    RewardPlot("node_values", "Node values (Monte-Carlo)", "value"),
    RewardPlot("advantages", "Advantages", "advantage"),
    RewardPlot("leaf_rewards", "Leaf rewards", "reward"),
    RewardPlot("pair_gaps", "Preference pair value gaps", "gap"),
    RewardPlot("sepr_f1", "SEPR plan F1", "f1"),
    RewardPlot("process", "Process rewards (scaled)", "scaled"),
)


def reward_plots(reader: Reader, run: str, strategy: str | None) -> list[dict]:
    """Each reward plot's values per strategy, with the SQL behind it (parameters written in)."""
    params = {"run": run, "strategy": strategy}
    plots = []
    for plot in REWARD_PLOTS:
        name = f"reward_{plot.key}"
        series: dict[str, list[float]] = {}
        for row in reader.rows(name, **params):
            series.setdefault(row["strategy"], []).append(row[plot.column])
        plots.append({"key": plot.key, "title": plot.title, "column": plot.column, "series": series,
                      "n": sum(len(v) for v in series.values()), "sql": literal_sql(name, params)})
    return plots


def export_rows(reader: Reader, run: str, table: str) -> int:
    """Rows of one export table in one build; ``table`` comes from the method registry, never
    from a request (a table name cannot be a bound parameter)."""
    from ragfactory.schemas.tables import TABLES

    if table not in TABLES:
        raise ValueError(f"unknown export table {table!r}")
    return reader.con.sql(f'select count(*) from "{table}" where run_id = $run',
                          params={"run": run}).fetchall()[0][0]
