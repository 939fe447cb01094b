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
