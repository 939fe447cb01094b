"""``ragfactory corpus``: the warehouse's passages per source and what each saved index costs
(passages, size on disk, memory mapped and shared between processes, private memory per query).
"""

from __future__ import annotations

from ragfactory.cli.common import RootOption, app, console, open_warehouse, print_arrow


def _mb(n: int) -> float:
    return round(n / 2**20, 1)


@app.command()
def corpus(root: RootOption = None) -> None:
    """Passages per source, and each saved retrieval index: passages, MB on disk, MB mapped
    (page cache shared by every process that opens it) and private MB per query in flight.

    Example: `ragfactory corpus --root ~/.ragfactory`
    """
    import pyarrow as pa

    from ragfactory.tasks.retrieval.report import index_reports
    from ragfactory.warehouse.catalog import query

    wh = open_warehouse(root, tables=["passages"])
    sources = query(wh, "select source, count(*) as passages from passages group by 1 order by 1")
    print_arrow(sources, title="passages per source")
    rows = [
        {
            "index": r["index"],
            "kind": r["kind"],
            "passages": r["passages"],
            "disk_mb": _mb(r["disk_bytes"]),
            "mapped_mb": _mb(r["mapped_bytes"]),
            "private_mb_per_query": _mb(r["private_bytes_per_query"]),
        }
        for r in index_reports(wh.root / "artifacts" / "indexes")
    ]
    if not rows:
        console.print("no saved index yet: `ragfactory build` (or `ragfactory retrieval search`) builds one")
        return
    print_arrow(pa.Table.from_pylist(rows), title="indexes")
