"""The serving commands: ``retrieval serve`` and ``retrieval search`` over the warehouse's
passages, and ``serve``, the local Prefect stack."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragfactory.cli.common import (
    RootOption,
    app,
    console,
    fail,
    open_warehouse,
    prefect_local_defaults,
    print_arrow,
    retrieval_app,
)


def _corpus_retriever(root: Path | None, kind: str, sources: list[str] | None):
    """A ``kind`` retriever over the passages of ``sources`` (default: every source in the
    warehouse); an empty warehouse or an unknown source exits naming what is there, and an id two
    sources give different passages is one warning line."""
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.retrieval.conflicts import conflicts_warning, source_files
    from ragfactory.tasks.retrieval.corpus import WarehousePassages, open_retriever
    from ragfactory.warehouse.catalog import query

    wh = open_warehouse(root)
    known = query(wh, "select distinct source from passages order by 1").column("source").to_pylist()
    if not known:
        fail(f"no passages in {wh.root}: run `ragfactory build` first")
    unknown = sorted(set(sources or []) - set(known))
    if unknown:
        fail(f"unknown passage sources {unknown}; known: {known}")
    passages = WarehousePassages(wh, sources or known)
    retriever = open_retriever(wh, sources or known, RetrievalConfig(), kind, passages)
    if conflicts := passages.conflicts():  # the build that indexed them wrote their rejects rows
        files = {source: file for source, (file, _) in source_files(wh, passages.sources).items()}
        console.print(f"[yellow]warning:[/yellow] {conflicts_warning(conflicts, files)}", soft_wrap=True)
    return retriever


KindOption = Annotated[str, typer.Option("--kind", help="bm25 or dense")]
SourcesOption = Annotated[
    list[str] | None, typer.Option("--source", help="Passage source to index (repeatable; default all)")
]


@retrieval_app.command("serve")
def retrieval_serve(
    kind: KindOption = "bm25",
    host: Annotated[str, typer.Option(help="Interface to bind; 127.0.0.1 keeps it local")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    sources: SourcesOption = None,
    root: RootOption = None,
) -> None:
    """Serve the warehouse's passages over the Search-R1 retrieval API (POST /retrieve).

    Example: `ragfactory retrieval serve --kind bm25 --port 8000`, then
    `curl -s localhost:8000/retrieve -H 'Content-Type: application/json' -d '{"queries": ["Who wrote Hamlet?"], "topk": 3, "return_scores": true}'`
    """
    from ragfactory.tasks.retrieval.server import serve

    retriever = _corpus_retriever(root, kind, sources)
    console.print(f"serving {kind} over http://{host}:{port}/retrieve")
    serve(retriever, host=host, port=port)


@retrieval_app.command("search")
def retrieval_search(
    queries: Annotated[list[str], typer.Argument(help="One or more queries")],
    k: Annotated[int, typer.Option("-k", help="Passages per query")] = 3,
    kind: KindOption = "bm25",
    sources: SourcesOption = None,
    root: RootOption = None,
) -> None:
    """Search the warehouse's passages and print the top hits per query.

    Example: `ragfactory retrieval search "Who directed Jaws?" -k 5 --kind dense`
    """
    import pyarrow as pa

    retriever = _corpus_retriever(root, kind, sources)
    for query_text, hits in zip(queries, retriever.search(list(queries), k)):
        rows = [
            {"rank": i + 1, "score": h.score, "passage_id": h.passage_id, "title": h.title, "text": h.text}
            for i, h in enumerate(hits)
        ]
        print_arrow(pa.Table.from_pylist(rows) if rows else pa.table({"rank": []}), title=query_text)


TimezoneOption = Annotated[
    str | None,
    typer.Option(help="IANA timezone of the 02:00 nightly build (default: the one set before, else UTC)"),
]
PoolsOption = Annotated[
    list[str] | None,
    typer.Option(
        "--pool",
        help="Work pool to start a worker for (repeatable): cpu, gpu; default every "
        "pool the deployments use (gpu maps to the CPU on a machine without CUDA)",
    ),
]


@app.command()
def serve(
    port: Annotated[int, typer.Option(help="Port of the Prefect server and UI (on 127.0.0.1)")] = 4200,
    root: RootOption = None,
    timezone: TimezoneOption = None,
    pools: PoolsOption = None,
    dashboard_port: Annotated[int, typer.Option(help="Port of the dashboard (on 127.0.0.1); 0: none")] = 8765,
) -> None:
    """Start a local Prefect server with the work pools, prefect.yaml's deployments, workers and
    the dashboard.

    Prints the UI and dashboard addresses; Ctrl-C stops the dashboard, the workers and the server. Flow runs write to the
    warehouse at --root. A worker starts for every pool the deployments use; on a machine without
    CUDA the `gpu` worker runs its jobs on the CPU.

    Example: `ragfactory serve --port 4200 --timezone Europe/Paris --pool cpu --pool gpu`
    """
    from ragfactory.serve import POOLS, StackError
    from ragfactory.serve import serve as serve_stack

    pools = pools or None  # None: every pool prefect.yaml's deployments use
    if unknown := sorted(set(pools or ()) - set(POOLS)):
        fail(f"unknown work pools {unknown}; known: {list(POOLS)}")
    if root is not None and Path(root).exists() and not Path(root).is_dir():
        fail(f"--root {root}: not a folder (the workers' warehouse root)")
    prefect_local_defaults()  # the stack's processes die with this one, even on SIGKILL
    try:
        serve_stack(
            port=port,
            root=root,
            timezone=timezone,
            pools=pools,
            echo=console.print,
            dashboard_port=dashboard_port or None,
        )
    except StackError as exc:
        fail(str(exc))


HostOption = Annotated[str, typer.Option(help="Address to bind; any but 127.0.0.1 / localhost needs --token")]
TokenOption = Annotated[
    str | None,
    typer.Option(
        envvar="RAGFACTORY_DASHBOARD_TOKEN",
        help="Token every request must carry (open /?token=... once); required off 127.0.0.1",
    ),
]
PrefectApiOption = Annotated[
    str | None,
    typer.Option(
        envvar="PREFECT_API_URL", help="Prefect API the Train page submits to (e.g. http://127.0.0.1:4200/api)"
    ),
]
BannerOption = Annotated[
    bool,
    typer.Option(
        hidden=True, help="Print the address (off when `serve` starts it and prints the stack's addresses itself)"
    ),
]


@app.command()
def dashboard(
    host: HostOption = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port of the dashboard")] = 8765,
    token: TokenOption = None,
    prefect_api: PrefectApiOption = None,
    root: RootOption = None,
    banner: BannerOption = True,
) -> None:
    """Open the warehouse explorer: builds, search trees, rewards, SQL, models, and training.

    Read-only over the warehouse; the Train page starts the train-<method> deployments on the
    Prefect server at --prefect-api. `ragfactory serve` starts it beside the Prefect UI.

    Example: `ragfactory dashboard --port 8765` then open http://127.0.0.1:8765
    """
    from ragfactory.dashboard.app import serve as serve_dashboard
    from ragfactory.dashboard.security import BindRefused, check_bind

    try:
        check_bind(host, token)
    except BindRefused as exc:
        fail(str(exc))
    wh = open_warehouse(root)
    if banner:
        console.print(f"dashboard: http://{host}:{port}  (warehouse {wh.root}; Ctrl-C stops it)", soft_wrap=True)
    serve_dashboard(wh, host=host, port=port, token=token, prefect_api_url=prefect_api)
