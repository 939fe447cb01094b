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
import decimal
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass

from ragfactory.dashboard import fates
from ragfactory.warehouse.sql_files import sql_file
from ragfactory.warehouse.store import Warehouse


def sql_text(name: str) -> str:
    """The text of ``sql/<name>.sql``."""
    return sql_file("ragfactory.dashboard", name)


def literal_sql(name: str, params: dict) -> str:
    """``sql/<name>.sql`` with its parameters written in as literals (``_written_in``)."""
    return _written_in(sql_text(name), params)


def _written_in(text: str, params: dict) -> str:
    """The query with its parameters written in as literals, for the console or ``ragfactory
    sql`` (which bind none); never executed by the dashboard, which binds them."""
    text = "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))
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


SAFE_INTEGER = 2**53 - 1  # JavaScript's largest exact integer: a 64-bit seed is past it


def jsonable(value):
    """A DuckDB value as JSON: NaN and infinities become None, timestamps ISO text, integers past
    2^53 their decimal text (a browser would round them), integral decimals (HUGEINT sums) ints."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) <= SAFE_INTEGER else str(value)
    if isinstance(value, decimal.Decimal):
        return jsonable(int(value)) if value == value.to_integral_value() else float(value)
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

    def query(self, text: str, params: dict) -> list[dict]:
        """Rows of a query this module composed from the SQL files (never a person's text)."""
        return [jsonable(row) for row in self.con.sql(text, params=params).to_arrow_table().to_pylist()]

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


def answer_failures(app) -> None:
    """Make a page whose query fails (a table with a damaged file, or a shard missing or
    quarantined: ``warehouse.catalog.create_views``) answer with that one line, status 500,
    rather than a bare "Internal Server Error" that names nothing."""
    import duckdb

    app.add_exception_handler(duckdb.Error, unanswered)


def unanswered(request, exc: Exception):
    """The response of a page whose query failed: why, in one line."""
    from fastapi.responses import PlainTextResponse

    from ragfactory.warehouse.guard import first_line

    return PlainTextResponse(f"this page cannot be answered: {first_line(exc)}", status_code=500)


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
    tokens: dict[str, list[dict]] = {}
    for row in reader.rows("run_tokens"):
        tokens.setdefault(row["run_id"], []).append(row)
    return [
        run
        | {
            "strategies": strategies.get(run["run_id"], []),
            "exports": exports.get(run["run_id"], {}),
            "tokens": tokens.get(run["run_id"], []),
        }
        for run in runs
    ]


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
    node["parsed"] = _parsed(node.get("parsed"))
    siblings = (
        reader.rows("node_siblings", run=run, parent=node["parent_id"], node=node_id) if node.get("parent_id") else []
    )
    for sibling in siblings:
        sibling["parsed"] = _parsed(sibling.get("parsed"))
    call = reader.rows("node_call", run=run, call=node["llm_call_id"]) if node.get("llm_call_id") else []
    if call and call[0].get("sampling"):
        call[0]["sampling"] = json.loads(call[0]["sampling"])
    return {
        "node": node,
        "status": fates.status(node),
        "fate": fates.fate(node, siblings),
        "llm_call": call[0] if call else None,
        "rewards": reader.rows("node_rewards", run=run, node=node_id),
        "rollouts": reader.rows("node_rollouts", run=run, node=node_id),
        "pairs": reader.rows("node_pairs", run=run, node=node_id),
        "sft_examples": reader.rows("node_sft", run=run, node=node_id),
    }


def _parsed(text):
    """A node's parsed fields as a dict; text that is not JSON is shown as the text it is."""
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return text


def passages(reader: Reader, ids: list[str]) -> list[dict]:
    return reader.rows("node_passages", ids=list(ids)) if ids else []


@dataclass(frozen=True)
class RewardPlot:
    key: str
    title: str
    sql: str  # sql/<sql>.sql, read after the ``outcomes`` CTE; columns strategy, depth, outcome, value
    params: tuple = ()  # extra bound parameters, as (name, value) pairs


REWARD_PLOTS = (
    RewardPlot("node_values", "Node values (Monte-Carlo)", "reward_node_values"),
    RewardPlot("advantages", "Advantages", "reward_advantages"),
    RewardPlot("leaf_rewards", "Leaf rewards", "reward_leaf_rewards"),
    RewardPlot("pair_gaps", "Preference pair value gaps", "reward_pair_gaps"),
    RewardPlot("sepr_f1", "SEPR plan F1", "reward_sepr_f1"),
)
SPLITS = ("none", "depth", "outcome")  # how each strategy's values split into stacked series


def reward_sql(name: str) -> str:
    """A reward plot's SQL as it runs: the trees' final outcomes as a CTE, then the plot's query."""
    return "\n".join(["with outcomes as (", _indented(sql_text("reward_outcomes")), ")", sql_text(name)])


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def reward_plots(reader: Reader, run: str, split: str = "none") -> list[dict]:
    """One panel per label source (each plot above, then each named reward of the rewards
    table), each with its values per strategy (small multiples) and per split group, and the
    SQL exactly as it ran with its bound parameters."""
    plots = list(REWARD_PLOTS)
    for row in reader.rows("reward_names", run=run):
        what = "scaled" if row["scaled"] else "raw"
        plots.append(
            RewardPlot(
                f"reward_{row['name']}", f"Reward: {row['name']} ({what})", "reward_process", (("name", row["name"]),)
            )
        )
    return [_reward_plot(reader, plot, run, split) for plot in plots]


def _reward_plot(reader: Reader, plot: RewardPlot, run: str, split: str) -> dict:
    params = {"run": run, **dict(plot.params)}
    text = reward_sql(plot.sql)
    series: dict[str, dict[str, list[float]]] = {}
    for row in reader.query(text, params):
        group = "all" if split == "none" else f"{split} {row[split]}" if split == "depth" else str(row[split])
        series.setdefault(row["strategy"], {}).setdefault(group, []).append(row["value"])
    return {
        "key": plot.key,
        "title": plot.title,
        "series": series,
        "n": sum(len(v) for groups in series.values() for v in groups.values()),
        "sql": "\n".join(line for line in text.splitlines() if not line.strip().startswith("--")),
        "params": params,
        "literal": _written_in(text, params),
    }


def schema(reader: Reader) -> list[dict]:
    """The warehouse's tables, then its views, each with its columns (name, type)."""
    from ragfactory.schemas.tables import TABLES

    relations: dict[str, dict] = {}
    for row in reader.rows("schema", tables=sorted(TABLES)):
        relation = relations.setdefault(
            row["table_name"], {"name": row["table_name"], "is_table": row["is_table"], "columns": []}
        )
        relation["columns"].append({"name": row["column_name"], "type": row["data_type"]})
    return list(relations.values())


def export_rows(reader: Reader, run: str, table: str) -> int:
    """Rows of one export table in one build; ``table`` comes from the method registry, never
    from a request (a table name cannot be a bound parameter)."""
    from ragfactory.schemas.tables import TABLES

    if table not in TABLES:
        raise ValueError(f"unknown export table {table!r}")
    return reader.con.sql(f'select count(*) from "{table}" where run_id = $run', params={"run": run}).fetchall()[0][0]
