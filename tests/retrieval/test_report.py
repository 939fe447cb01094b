"""What ``ragfactory corpus`` reports of a saved index: passages, bytes on disk and to serve."""

from ragfactory.tasks.retrieval.bm25 import load_or_build_bm25
from ragfactory.tasks.retrieval.report import index_reports


def test_a_saved_bm25_index_reports_its_files_and_per_query_scratch(passages, tmp_path):
    built = load_or_build_bm25(passages, tmp_path)
    [report] = index_reports(tmp_path)
    files = [p for p in built.index_dir.rglob("*") if p.is_file() and p.name != "manifest.json"]
    assert (report["index"], report["kind"], report["passages"]) == (built.index_dir.name, "bm25", 10)
    assert report["disk_bytes"] == report["mapped_bytes"] == sum(p.stat().st_size for p in files)
    assert report["private_bytes_per_query"] == 40  # one float32 score per passage


def test_no_index_reports_nothing(tmp_path):
    assert index_reports(tmp_path) == []


def test_ragfactory_corpus_prints_sources_and_indexes(passages, tmp_path):
    from typer.testing import CliRunner

    from ragfactory.cli import app
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.retrieval.corpus import open_retriever
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(tmp_path / "wh")
    wh.write("passages", passages, "corpus-00000")
    built = open_retriever(wh, ["test"], RetrievalConfig())
    result = CliRunner().invoke(app, ["corpus", "--root", str(wh.root)])
    assert result.exit_code == 0, result.output
    assert "passages per source" in result.output and built.index_dir.name in result.output
