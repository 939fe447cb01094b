"""An HTTP retrieval server speaking the Search-R1 API, over any ``Retriever``.

``POST /retrieve`` takes ``{"queries": [str], "topk": int, "return_scores": bool}`` and answers
``{"result": [[hit, ...], ...]}``, one list per query, where a document is
``{"id": str, "contents": "\\"Title\\"\\ntext"}`` and a hit is ``{"document": doc, "score": s}``
when scores are asked for, else the bare document — the shape of Search-R1's
``search_r1/search/retrieval_server.py`` (Jin et al. 2025), so its training code and ours can
share a server. ``topk`` may be left out for the server's default (3, as in Search-R1).

Run as a module for a stand-alone server over a passages Parquet file or folder::

    python -m ragfactory.tasks.retrieval.server --passages passages.parquet --kind bm25 --port 8000
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from pydantic import BaseModel, Field

from ragfactory.tasks.retrieval.types import Hit, Retriever

DEFAULT_TOPK = 3  # Search-R1, DecEx-RAG and TreePS-RAG retrieve the top 3 passages per query
MAX_TOPK = 1000  # one request cannot ask the server to serialise an unbounded reply

log = logging.getLogger(__name__)


class RetrieveRequest(BaseModel):
    queries: list[str] = Field(description="Queries answered in one batch; may be empty")
    topk: int | None = Field(None, ge=1, le=MAX_TOPK, description="Hits per query")
    return_scores: bool = Field(False, description="Wrap each document as {document, score}")


def hit_item(hit: Hit, return_scores: bool) -> dict:
    document = {"id": hit.passage_id, "contents": hit.contents}
    return {"document": document, "score": hit.score} if return_scores else document


def create_app(retriever: Retriever, default_topk: int = DEFAULT_TOPK) -> FastAPI:
    """A FastAPI app answering ``/retrieve`` with ``retriever``, plus ``GET /health``."""
    app = FastAPI(title="ragfactory retrieval", version="1")
    # Index objects are not promised to be thread-safe; the batch per request keeps them busy.
    lock = threading.Lock()

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict:
        with lock:
            rows = retriever.search(request.queries, request.topk or default_topk)
        return {"result": [[hit_item(h, request.return_scores) for h in row] for row in rows]}

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    return app


def serve(
    retriever: Retriever,
    host: str = "127.0.0.1",
    port: int = 8000,
    default_topk: int = DEFAULT_TOPK,
    log_level: str = "info",
) -> None:
    """Serve ``retriever`` until interrupted; binds to localhost unless told otherwise."""
    uvicorn.run(create_app(retriever, default_topk), host=host, port=port, log_level=log_level)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Serve a passages table over the Search-R1 API.")
    parser.add_argument(
        "--passages", required=True, type=Path, help="Parquet file or folder with passage_id, title, text columns"
    )
    parser.add_argument("--kind", choices=("bm25", "dense"), default="bm25")
    parser.add_argument(
        "--index-root", type=Path, default=None, help="Folder to load a saved index from or save a new one to"
    )
    parser.add_argument("--model", default=None, help="Dense model (default all-MiniLM-L6-v2)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=DEFAULT_TOPK, help="Default hits per query")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    from ragfactory.tasks.retrieval.dense import DenseParams
    from ragfactory.tasks.retrieval.factory import make_retriever
    from ragfactory.tasks.retrieval.index_store import ParquetPassages

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    passages = ParquetPassages(args.passages)  # read in batches: the corpus is never held whole
    dense = DenseParams(model=args.model) if args.model else None
    retriever = make_retriever(args.kind, passages=passages, index_root=args.index_root, dense=dense)
    log.info(
        "%s retriever over %d passages on http://%s:%d/retrieve", args.kind, passages.num_rows, args.host, args.port
    )
    serve(retriever, host=args.host, port=args.port, default_topk=args.topk)


if __name__ == "__main__":
    main()
