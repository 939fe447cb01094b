"""The warehouse explorer: a FastAPI app of server-rendered pages over the warehouse.

Pages (Jinja2 templates in ``templates/``): runs, the tree viewer, rewards, the SQL console,
models and evaluations, and Train (``train_routes.py``: the form drawn from each method's
declared options, and a training's page with its curves). The tree is drawn in the browser by
d3 (``static/tree.js``) from ``/api/tree``, in columns and gzipped (a 10,000-node tree: 0.6 MB);
a clicked node's whole row, LLM call, rewards, pairs and SFT rows come from ``/api/node``, its
passages from ``/api/passages`` on demand. Plots are Plotly (``static/plots.js``) over values the
page carries; a training's curves are SVG drawn on the server (``curves.py``).
d3 7.9.2 and Plotly's cartesian bundle 4.1.1 are served from ``static/vendor`` (their licences
beside them): the dashboard works on a machine with no way out.

The app reads the warehouse and nothing else (``queries.py``); it writes only to Prefect, and
only on the Train page's submit.
"""

from __future__ import annotations

import csv
import decimal
import io
import json
from dataclasses import dataclass
from importlib import resources

from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from ragfactory.dashboard import queries
from ragfactory.dashboard.labels import label_panel
from ragfactory.dashboard.security import Guard
from ragfactory.dashboard.train_routes import router as train_router
from ragfactory.dashboard.training import Prefect
from ragfactory.warehouse.store import Warehouse

PACKAGE = resources.files("ragfactory.dashboard")
CONSOLE_ROWS = 1000  # rows the console shows; the CSV download has them all, up to CONSOLE_MAX_ROWS
# A result is held in memory to be rendered or downloaded: past this, the query is refused by name.
CONSOLE_MAX_ROWS = 100_000
PAGES = (
    ("/", "Runs"),
    ("/tree", "Trees"),
    ("/rewards", "Rewards"),
    ("/sql", "SQL"),
    ("/models", "Models"),
    ("/train", "Train"),
    ("/flywheel", "Flywheel"),
)


@dataclass
class Dashboard:
    """What every route reads: the warehouse, the Prefect server (None: Train cannot submit) and
    the templates; kept on ``app.state`` rather than in module globals."""

    warehouse: Warehouse
    prefect: Prefect | None
    templates: Jinja2Templates

    def page(self, request: Request, name: str, status_code: int = 200, **context) -> HTMLResponse:
        context |= {"pages": PAGES, "root": self.warehouse.location, "prefect": self.prefect}
        return self.templates.TemplateResponse(request, f"{name}.html", context, status_code=status_code)

    def reading(self):
        return queries.reading(self.warehouse)


def _dash(request: Request) -> Dashboard:
    return request.app.state.dashboard


router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request):
    dash = _dash(request)
    with dash.reading() as reader:
        builds = queries.builds(reader)
    ids = [b["flow_run_id"] for b in builds if b.get("flow_run_id")]
    # None: no server to ask (or it did not answer); else the flow runs it still holds
    existing = dash.prefect.existing_flow_runs(ids) if dash.prefect and ids else None
    return dash.page(request, "runs", builds=builds, existing=existing)


@router.get("/tree", response_class=HTMLResponse)
def tree_page(request: Request, run: str | None = None, strategy: str | None = None, question: str | None = None):
    dash = _dash(request)
    with dash.reading() as reader:
        runs = queries.build_ids(reader)
        run = run or (runs[0] if runs else None)
        trees = reader.rows("tree_questions", run=run) if run else []
    if trees and not (strategy and question):
        strategy, question = trees[0]["strategy"], trees[0]["question_id"]
    text = next((t["question"] for t in trees if t["question_id"] == question), None)
    return dash.page(
        request, "tree", runs=runs, run=run, trees=trees, strategy=strategy, question=question, question_text=text
    )


@router.get("/api/tree")
def tree_json(request: Request, run: str, strategy: str, question: str):
    with _dash(request).reading() as reader:
        columns = queries.tree(reader, run, strategy, question)
    if not columns["node_id"]:
        raise HTTPException(404, f"no {strategy} tree for question {question} in run {run}")
    return JSONResponse(columns)


@router.get("/api/node")
def node_json(request: Request, run: str, node: str):
    with _dash(request).reading() as reader:
        detail = queries.node_detail(reader, run, node)
    if detail is None:
        raise HTTPException(404, f"no node {node} in run {run}")
    return JSONResponse(detail)


@router.get("/api/passages")
def passages_json(request: Request, ids: list[str] = Query(default=[])):
    with _dash(request).reading() as reader:
        return JSONResponse(queries.passages(reader, ids))


@router.get("/rewards", response_class=HTMLResponse)
def rewards_page(request: Request, run: str | None = None, split: str = "none"):
    dash = _dash(request)
    split = split if split in queries.SPLITS else "none"
    with dash.reading() as reader:
        runs = queries.build_ids(reader)
        run = run or (runs[0] if runs else None)
        plots = queries.reward_plots(reader, run, split) if run else []
        strategies = [row["strategy"] for row in reader.rows("run_strategies", run=run)] if run else []
        panel = label_panel(reader, run) if run else {"agreement": [], "search": []}
    return dash.page(
        request,
        "rewards",
        runs=runs,
        run=run,
        split=split,
        splits=queries.SPLITS,
        strategies=strategies,
        plots=plots,
        labels=panel,
    )


@router.get("/sql", response_class=HTMLResponse)
def sql_page(request: Request, q: str = ""):
    dash = _dash(request)
    result, error, status = None, None, 200
    if q.strip():
        try:
            result = _console(dash.warehouse, q)
        except ValueError as exc:
            error, status = str(exc), 400
    with dash.reading() as reader:
        relations = queries.schema(reader)
    return dash.page(
        request, "sql", q=q, result=result, error=error, limit=CONSOLE_ROWS, relations=relations, status_code=status
    )


@router.get("/sql.csv")
def sql_csv(request: Request, q: str):
    try:
        table = _console(_dash(request).warehouse, q, limit=None)
    except ValueError as exc:
        return Response(str(exc), status_code=400, media_type="text/plain")
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(table["columns"])
    writer.writerows(table["rows"])
    return Response(
        out.getvalue(), media_type="text/csv", headers={"Content-Disposition": 'attachment; filename="query.csv"'}
    )


@router.get("/models", response_class=HTMLResponse)
def models_page(request: Request):
    dash = _dash(request)
    with dash.reading() as reader:
        registry = reader.rows("models")
        scores = reader.rows("eval_scores")
    # a model's curves are its training flow run's logs: linked while the server holds that run
    ids = [m["flow_run_id"] for m in registry if m.get("flow_run_id")]
    existing = dash.prefect.existing_flow_runs(ids) if dash.prefect and ids else None
    return dash.page(request, "models", models=registry, scores=scores, existing=existing or set())


@router.get("/flywheel", response_class=HTMLResponse)
def flywheel_page(request: Request):
    """Each night of the nightly pipelines: built, exported, trained, decided (docs/flywheel.md)."""
    dash = _dash(request)
    with dash.reading() as reader:
        nights = reader.rows("flywheel")
        metrics = reader.rows("flywheel_metrics")
    return dash.page(request, "flywheel", nights=nights, metrics=metrics)


def create_app(warehouse: Warehouse, prefect_api_url: str | None = None, token: str | None = None) -> FastAPI:
    """The dashboard over ``warehouse``; Train submits to the Prefect server at ``prefect_api_url``."""
    app = FastAPI(title="ragfactory dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    # a 10,000-node tree: 2.0 MB of JSON, 0.57 MB at level 1 in 26 ms (level 9: 0.46 MB in 315 ms)
    app.add_middleware(GZipMiddleware, minimum_size=2048, compresslevel=1)
    app.add_middleware(Guard, token=token)
    app.mount("/static", StaticFiles(directory=str(PACKAGE / "static")), name="static")
    templates = Jinja2Templates(directory=str(PACKAGE / "templates"))
    templates.env.filters["when"] = _when
    templates.env.filters["duration"] = _duration
    app.state.dashboard = Dashboard(warehouse, Prefect(prefect_api_url) if prefect_api_url else None, templates)
    app.include_router(router)
    app.include_router(train_router)
    queries.answer_failures(app)
    return app


def _console(warehouse: Warehouse, sql: str, limit: int | None = CONSOLE_ROWS) -> dict:
    """A person's query through the confined catalog: columns and rows (ValueError: why not)."""
    from ragfactory.warehouse.catalog import Refused, SqlLimits, user_query

    try:  # the memory and time limits of `ragfactory sql`, and a row limit
        table = user_query(warehouse, sql, limits=SqlLimits.from_env({"max_rows": CONSOLE_MAX_ROWS, "flags": False}))
    except Refused as exc:
        raise ValueError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - the whole of DuckDB's message: candidates, LINE and caret
        raise ValueError(f"query failed: {str(exc).strip() or type(exc).__name__}") from None
    shown = table if limit is None else table.slice(0, limit)
    rows = [[_cell(v) for v in row.values()] for row in shown.to_pylist()]
    return {"columns": table.column_names, "rows": rows, "n_rows": table.num_rows}


def _when(value: str | None) -> str:
    """An ISO timestamp as ``2026-11-24 09:27:03 UTC`` (the warehouse writes UTC)."""
    if not value:
        return ""
    return value.replace("T", " ")[:19] + (" UTC" if value.endswith("+00:00") else "")


def _duration(seconds: float | None) -> str:
    """Seconds as ``1 h 02 min``, ``3 min 05 s`` or ``42.0 s``."""
    if seconds is None:
        return "unfinished"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes >= 60:
        return f"{minutes // 60} h {minutes % 60:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"


def _cell(value) -> str | int | float | None:
    """A console cell: numbers as numbers (a HUGEINT sum arrives as an integral Decimal), nested
    values as JSON."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return json.dumps(queries.jsonable(value), default=str)


def serve(
    warehouse: Warehouse,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    prefect_api_url: str | None = None,
) -> None:
    """Run the dashboard until interrupted (``check_bind`` first: no open bind without a token)."""
    import uvicorn

    from ragfactory.dashboard.security import check_bind

    check_bind(host, token)
    uvicorn.run(create_app(warehouse, prefect_api_url, token), host=host, port=port, log_level="warning")
