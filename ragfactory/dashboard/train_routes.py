"""The Train pages: the form drawn from the method's declared options (``train_form.py``), its
submission to Prefect (``training.py``), and a training flow run's page, which follows its state
and draws its curves (``curves.py``) while it runs and after.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from ragfactory.dashboard import curves, queries, train_form
from ragfactory.dashboard.training import Prefect, method_tables, parse_json_object, refusal, train_config

router = APIRouter()


def _dash(request: Request):
    return request.app.state.dashboard


async def _posted(request: Request) -> dict[str, str]:
    """Every posted form value by name (the generated fields beside the declared parameters)."""
    return {k: v for k, v in (await request.form()).items() if isinstance(v, str)}


@router.get("/train", response_class=HTMLResponse)
def train_page(request: Request, run: str | None = None, method: str = "dpo"):
    if method not in method_tables():
        raise HTTPException(404, f"unknown method {method!r}; known: {', '.join(method_tables())}")
    prefilled, rest = train_form.prefilled(method, _default_config(_dash(request).prefect, method))
    return _train_form(request, run, method, prefilled, json.dumps(rest, indent=2))


def _train_form(
    request: Request,
    run: str | None,
    method: str,
    groups: list,
    config_text: str,
    message: str | None = None,
    jobs_text: str = "{}",
    status_code: int = 200,
) -> HTMLResponse:
    dash = _dash(request)
    with dash.reading() as reader:
        runs = queries.build_ids(reader)
    return dash.page(
        request,
        "train",
        runs=runs,
        run=run or (runs[0] if runs else None),
        method=method,
        methods=method_tables(),
        groups=groups,
        marker=train_form.MARKER,
        config_text=config_text,
        jobs_text=jobs_text,
        message=message,
        status_code=status_code,
    )


@router.post("/train", response_class=HTMLResponse)
def train_submit(
    request: Request,
    run: str = Form(...),
    method: str = Form(...),
    config: str = Form("{}"),
    job_variables: str = Form("{}"),
    posted: dict[str, str] = Depends(_posted),
):
    """Refuse (409) a build without the method's rows, (400) a field or config that does not
    validate, naming it; else submit the flow run and follow it."""
    dash = _dash(request)

    def again(message: str, status: int) -> HTMLResponse:
        known = method in method_tables()
        groups = train_form.as_typed(method, posted, train_form.refused_key(message)) if known else []
        return _train_form(request, run, method, groups, config, message, job_variables, status)

    with dash.reading() as reader:
        refused = refusal(reader, run, method)
    if refused:
        return again(f"refused: {refused}", 409)
    try:
        overrides = train_form.merged(train_form.submitted(method, posted), parse_json_object("config", config))
        overrides.setdefault("warehouse", {"root": dash.warehouse.location})
        parameters = train_config(method, run, overrides)
        if dash.prefect is None:
            return again("no Prefect server: start the dashboard with --prefect-api or through `ragfactory serve`", 503)
        flow_run_id = dash.prefect.submit(method, parameters, parse_json_object("job variables", job_variables))
    except ValueError as exc:
        return again(str(exc), 400)
    return RedirectResponse(f"/train/runs/{flow_run_id}", status_code=303)


@router.get("/train/runs/{flow_run_id}", response_class=HTMLResponse)
def train_run_page(request: Request, flow_run_id: str):
    dash = _dash(request)
    if dash.prefect is None:
        raise HTTPException(503, "no Prefect server configured")
    return dash.page(request, "train_run", flow_run_id=flow_run_id, url=dash.prefect.flow_run_url(flow_run_id))


@router.get("/api/flow-runs/{flow_run_id}")
def flow_run_state(request: Request, flow_run_id: str):
    prefect = _dash(request).prefect
    if prefect is None:
        raise HTTPException(503, "no Prefect server configured")
    return JSONResponse(prefect.state(flow_run_id))


@router.get("/train/runs/{flow_run_id}/curves", response_class=HTMLResponse)
def run_curves(request: Request, flow_run_id: str):
    """The run's curves as SVG (an HTML fragment the run page polls): its logged steps, and the
    per-question F1 delta of any evaluation of the model it trained."""
    dash = _dash(request)
    if dash.prefect is None:
        raise HTTPException(503, "no Prefect server configured")
    messages = dash.prefect.log_messages(flow_run_id)
    with dash.reading() as reader:
        model = reader.rows("train_run_model", flow_run_id=flow_run_id)
        deltas = reader.rows("eval_deltas", model=model[0]["model_id"]) if model else []
    drawn = curves.charts(messages, deltas)
    return HTMLResponse(drawn or '<p class="empty" id="no-curves">no step logged yet</p>')


def _default_config(prefect: Prefect | None, method: str) -> dict:
    """The deployment's ``config`` without what the form sets itself (method, build run)."""
    config = {}
    if prefect is not None:
        try:
            config = prefect.default_config(method)
        except Exception:  # noqa: BLE001 - no server, or no such deployment: start from nothing
            config = {}
    return {k: v for k, v in config.items() if k not in ("method", "run_id")}
