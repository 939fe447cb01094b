"""A passage id is one passage across every file of a corpus: a build whose two corpus files give
one id different passages names both files, in a warning and a ``rejects`` row, and its index
holds the passage of the file whose name sorts first."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from ragfactory.cli import app

runner = CliRunner()

NEWS = [
    {"id": "p1", "contents": '"Eiffel Tower"\nThe Eiffel Tower stands in Paris.'},
    {"id": "n2", "contents": '"Louvre"\nThe Louvre is a museum in Paris.'},
]
WIKI = [
    {"id": "w1", "contents": '"Big Ben"\nBig Ben is a clock in London.'},
    {"id": "p1", "contents": '"Colosseum"\nThe Colosseum is an amphitheatre in Rome.'},
    {"id": "n2", "contents": '"Louvre"\nThe Louvre is a museum in Paris.'},  # the same passage: no conflict
]


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return str(path)


def _cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_one_id_in_two_corpus_files_with_different_passages_names_both_files(tmp_path):
    root, wiki, news = tmp_path / "wh", _jsonl(tmp_path / "wiki.jsonl", WIKI), _jsonl(tmp_path / "news.jsonl", NEWS)
    config = {
        "name": "ids",
        "datasets": [{"name": "bamboogle", "limit": 2}],
        "corpus": {"files": [wiki, news]},
        "retrieval": {"dense": {"enabled": False}},
        "search": {"strategies": []},
    }
    (tmp_path / "build.yaml").write_text(yaml.safe_dump(config))

    code, out = _cli("build", "--config", str(tmp_path / "build.yaml"), "--root", str(root))
    assert code == 0, out
    [log] = (root / "logs").glob("build-*.log")
    warnings = [line.split(": ", 1)[1] for line in log.read_text().splitlines() if " WARNING " in line]
    assert warnings == [
        f"1 passage id(s) name different passages in two corpus files, e.g. 'p1' in {news} and {wiki}: "
        "the index holds the first file's passage only; each other one is a rejects row"
    ]

    code, out = _cli("sql", "select * from rejects", "--format", "json", "--root", str(root))
    assert code == 0, out
    assert [json.loads(line) for line in out.splitlines()] == [
        {
            "dataset": "wiki",
            "source_file": wiki,
            "line": 2,
            "reason": f"passage id 'p1' is also in {news} with another passage: the index holds that one, "
            "never this one (ids must be unique across a corpus's files)",
            "raw": json.dumps(WIKI[1]),
        }
    ]

    # the index holds news.jsonl's p1, and so does the corpus view; wiki.jsonl's p1 is found by no query
    code, out = _cli(
        "sql", "select title, sources from corpus where passage_id = 'p1'", "-f", "json", "--root", str(root)
    )
    assert (code, json.loads(out)) == (0, {"title": "Eiffel Tower", "sources": ["news", "wiki"]}), out
    warning = (
        f"warning: 1 passage id(s) name different passages in two corpus files, e.g. 'p1' in {news} and {wiki}: "
        "the index holds the first file's passage only"
    )
    assert _hits(root, "Eiffel Tower Paris") == ([warning], [("p1", "Eiffel Tower"), ("n2", "Louvre")])
    assert _hits(root, "Colosseum amphitheatre Rome") == ([warning], [])


def _hits(root, text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The warning lines, and (passage id, title) of each hit, best first, that `ragfactory
    retrieval search` prints."""
    code, out = _cli("retrieval", "search", text, "-k", "3", "--root", str(root))
    assert code == 0, out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    return [line for line in out.splitlines() if line.startswith("warning:")], [(row[2], row[3]) for row in rows]
