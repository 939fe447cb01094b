"""Bad rows become ``rejects`` rows naming line and field; files that are not JSONL fail once."""

from __future__ import annotations

import gzip
import json

import pytest

from ragfactory.tasks.data.jsonl import JsonlLimits, NotJsonlError
from ragfactory.tasks.data.loaders import load_questions
from ragfactory.warehouse.store import conform


def hotpot_row(rid: str, question="Which?", answer="Yes", context=None) -> dict:
    context = [["Title A", ["First.", " Second."]]] if context is None else context
    return {
        "_id": rid,
        "answer": answer,
        "question": question,
        "supporting_facts": [],
        "context": context,
        "type": "bridge",
        "level": "hard",
    }


def musique_row(rid: str = "2hop__1_2", **changes) -> dict:
    row = {
        "id": rid,
        "paragraphs": [{"idx": 0, "title": "P", "paragraph_text": "p text", "is_supporting": True}],
        "question": "Who?",
        "question_decomposition": [
            {"id": 1, "question": "X >> y", "answer": "A", "paragraph_support_idx": 0},
            {"id": 2, "question": "who is #1", "answer": "B", "paragraph_support_idx": 0},
        ],
        "answer": "B",
        "answer_aliases": ["b", "B"],
        "answerable": True,
    }
    row.update(changes)
    return row


def write_lines(path, lines: list) -> None:
    """Each item: bytes as is, str encoded, anything else as JSON; joined with newlines."""

    def encode(item):
        if isinstance(item, bytes):
            return item
        return (item if isinstance(item, str) else json.dumps(item)).encode("utf-8")

    path.write_bytes(b"\n".join(encode(item) for item in lines) + b"\n")


BAD_HOTPOT_LINES = [
    (hotpot_row("a1"), None),
    ("", None),
    ({k: v for k, v in hotpot_row("a2").items() if k != "question"}, "missing field 'question'"),
    ({k: v for k, v in hotpot_row("a3").items() if k != "answer"}, "missing field 'answer'"),
    (hotpot_row("a4", answer=["x", "y"]), "field 'answer' must be a string, got array"),
    (hotpot_row("a5", question=42), "field 'question' must be a string, got number"),
    (b'{"_id": "a6", "question": "caf\xe9?", "answer": "x"}', "invalid UTF-8"),
    ('{"_id": "a7", "question": ', "invalid JSON: Expecting value at column 27"),
    (hotpot_row("a8", context=[]), "empty context"),
    (hotpot_row("a1", question="Again?"), "duplicate id 'a1'"),
    ("   ", None),
    ("[1, 2]", "expected a JSON object, got array"),
    (hotpot_row("a9", answer="  No \n"), None),
    (hotpot_row("a10", question="   "), "empty field 'question'"),
    (hotpot_row("a11", context=[["T", "not a list"]]), "field 'context' item 0 must be [title, [sentences]]"),
]


@pytest.fixture
def bad_file(tmp_path):
    path = tmp_path / "mixed.jsonl"
    write_lines(path, [line for line, _ in BAD_HOTPOT_LINES])
    return path


def test_each_bad_line_is_rejected_with_its_reason_and_line(bad_file):
    result = load_questions(bad_file, "hotpotqa", "hotpotqa")
    expected = [(n, reason) for n, (_, reason) in enumerate(BAD_HOTPOT_LINES, 1) if reason]
    assert [(r["line"], r["reason"]) for r in result.rejects] == expected
    assert all(r["dataset"] == "hotpotqa" and r["source_file"] == str(bad_file) for r in result.rejects)
    assert conform("rejects", result.rejects).num_rows == len(expected)


def test_good_rows_load_and_nothing_is_lost(bad_file):
    result = load_questions(bad_file, "hotpotqa", "hotpotqa")
    assert [q["question_id"] for q in result.questions] == ["hotpotqa:a1", "hotpotqa:a9"]
    assert [q["source_line"] for q in result.questions] == [1, 13]
    assert result.questions[0]["question"] == "Which?"  # the first of a duplicate id wins
    assert result.questions[1]["golden_answers"] == ["No"]
    blank = sum(1 for line, _ in BAD_HOTPOT_LINES if isinstance(line, str) and not line.strip())
    n_lines = len(bad_file.read_bytes().splitlines())
    assert len(result.questions) + len(result.rejects) + blank == n_lines == len(BAD_HOTPOT_LINES)
    assert conform("questions", result.questions).num_rows == 2


def test_reject_keeps_the_raw_line_with_bad_bytes_replaced(bad_file):
    result = load_questions(bad_file, "hotpotqa", "hotpotqa")
    by_line = {r["line"]: r["raw"] for r in result.rejects}
    assert by_line[7] == '{"_id": "a6", "question": "caf\ufffd?", "answer": "x"}'
    assert json.loads(by_line[4])["_id"] == "a3"


def test_raw_is_truncated(tmp_path):
    path = tmp_path / "long.jsonl"
    write_lines(path, [hotpot_row("ok"), {"_id": "long", "question": "q" * 5000}])
    result = load_questions(path, "hotpotqa", limits=JsonlLimits(raw_chars=100))
    assert result.rejects[0]["reason"] == "missing field 'answer'"
    assert len(result.rejects[0]["raw"]) == 100


def test_limit_counts_good_rows_only(bad_file):
    result = load_questions(bad_file, "hotpotqa", "hotpotqa", limit=1)
    assert [q["question_id"] for q in result.questions] == ["hotpotqa:a1"]
    assert result.rejects == []  # reading stops at the first good row here


FORMAT_CASES = [
    ("bamboogle", {"question": 5, "answer": "x"}, "field 'question' must be a string, got number"),
    ("bamboogle", {"question": "q"}, "missing field 'answer'"),
    ("bamboogle", {"question": "q", "answer": None}, "missing field 'answer'"),
    ("musique", musique_row("m2", paragraphs=[]), "empty context"),
    ("musique", musique_row("m2", answer_aliases="b"), "field 'answer_aliases' must be an array, got string"),
    (
        "musique",
        musique_row("m2", answer_aliases=["ok", 3]),
        "field 'answer_aliases' item 1 must be a string, got number",
    ),
    (
        "musique",
        musique_row("m2", question_decomposition=[{"id": 1, "question": "q"}]),
        "missing field 'question_decomposition[1].answer'",
    ),
    (
        "musique",
        musique_row("m2", paragraphs=[{"idx": 0, "title": "T"}]),
        "field 'paragraphs' item 0 needs string 'title' and 'paragraph_text'",
    ),
    ("musique", {k: v for k, v in musique_row("m2").items() if k != "id"}, "missing field 'id'"),
    (
        "flashrag",
        {"id": "f2", "question": "q", "golden_answers": "a"},
        "field 'golden_answers' must be an array, got string",
    ),
    ("flashrag", {"id": "f2", "question": "q", "golden_answers": [" "]}, "empty field 'golden_answers'"),
    (
        "flashrag",
        {"id": "f2", "question": "q", "golden_answers": ["a"], "metadata": [1]},
        "field 'metadata' must be an object, got array",
    ),
    (
        "flashrag",
        {"id": True, "question": "q", "golden_answers": ["a"]},
        "field 'id' must be a string or integer, got boolean",
    ),
    (
        "2wikimultihopqa",
        hotpot_row("w2", context=[["T", ["s", 1]]]),
        "field 'context' item 0 must be [title, [sentences]]",
    ),
    ("hotpotqa", hotpot_row(["x"]), "field '_id' must be a string or integer, got array"),
]
GOOD_ROWS = {
    "bamboogle": [{"question": "q1", "answer": "a1"}, {"question": "q3", "answer": "a3"}],
    "musique": [musique_row("m1"), musique_row("m3")],
    "flashrag": [
        {"id": "f1", "question": "q", "golden_answers": ["a"]},
        {"id": 3, "question": "q", "golden_answers": ["a", " a"], "metadata": {"k": 1}},
    ],
    "2wikimultihopqa": [hotpot_row("w1"), hotpot_row("w3")],
    "hotpotqa": [hotpot_row("h1"), hotpot_row("h3")],
}


@pytest.mark.parametrize(("fmt", "bad", "reason"), FORMAT_CASES)
def test_format_specific_bad_rows(tmp_path, fmt, bad, reason):
    path = tmp_path / f"{fmt}.jsonl"
    first, last = GOOD_ROWS[fmt]
    write_lines(path, [first, bad, last])
    result = load_questions(path, fmt, fmt)
    assert [(r["line"], r["reason"]) for r in result.rejects] == [(2, reason)]
    assert [q["source_line"] for q in result.questions] == [1, 3]
    assert conform("questions", result.questions).num_rows == 2


def test_flashrag_rows_keep_metadata_and_integer_ids(tmp_path):
    path = tmp_path / "f.jsonl"
    write_lines(path, GOOD_ROWS["flashrag"])
    questions = load_questions(path, "nq", "flashrag", split="test").questions
    assert [q["question_id"] for q in questions] == ["nq:f1", "nq:3"]
    assert questions[1]["golden_answers"] == ["a"]
    assert json.loads(questions[1]["metadata"]) == {"k": 1}
    assert {q["split"] for q in questions} == {"test"}


def test_flashrag_musique_decomposition_becomes_the_gold_plan(tmp_path):
    row = musique_row()
    flash = {
        "id": row["id"],
        "question": row["question"],
        "golden_answers": ["B"],
        "metadata": {"question_decomposition": row["question_decomposition"]},
    }
    path = tmp_path / "f.jsonl"
    write_lines(path, [flash])
    plan = load_questions(path, "musique", "flashrag").questions[0]["gold_plan"]
    assert [(s["step"], s["question"]) for s in plan] == [(1, "X >> y"), (2, "who is #1")]


def test_musique_aliases_are_deduplicated_after_the_answer(tmp_path):
    path = tmp_path / "m.jsonl"
    write_lines(path, [musique_row(answer_aliases=["b", "B ", "", "c", "b"])])
    assert load_questions(path, "musique").questions[0]["golden_answers"] == ["B", "b", "c"]


def test_byte_order_mark_and_crlf_line_endings_are_read(tmp_path):
    path = tmp_path / "bom.jsonl"
    lines = [json.dumps(r).encode() for r in GOOD_ROWS["bamboogle"]]
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n")
    result = load_questions(path, "bamboogle")
    assert result.rejects == []
    assert [q["golden_answers"] for q in result.questions] == [["a1"], ["a3"]]


def test_gzip_files_are_read(tmp_path):
    path = tmp_path / "h.jsonl.gz"
    lines = [json.dumps(r).encode() for r in GOOD_ROWS["hotpotqa"]]
    path.write_bytes(gzip.compress(b"\n".join(lines)))
    assert len(load_questions(path, "hotpotqa").questions) == 2


def test_empty_file_loads_nothing(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"\n\n")
    result = load_questions(path, "bamboogle")
    assert (result.questions, result.rejects) == ([], [])


NOT_JSONL = {
    "array.json": json.dumps([{"question": "q", "answer": "a"}] * 3, indent=2).encode(),
    "array-one-line.json": json.dumps([{"question": "q", "answer": "a"}] * 3).encode(),
    "table.csv": b"question,answer\nWho?,Me\nWhen?,Now\n",
    "blob.bin": bytes(range(256)) * 4,
    "latin1.txt": "caf\xe9\n\xe0 la carte\n".encode("latin-1"),
    "numbers.txt": b"1\n2\n3\n",
}


@pytest.mark.parametrize("name", sorted(NOT_JSONL))
def test_a_file_that_is_not_jsonl_raises_one_error_naming_it(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(NOT_JSONL[name])
    with pytest.raises(NotJsonlError, match=f"{name}: not a JSONL file") as info:
        load_questions(path, "bamboogle")
    assert isinstance(info.value, ValueError)


def test_not_jsonl_is_decided_early_on_a_long_file(tmp_path):
    path = tmp_path / "long.csv"
    path.write_bytes(b"a,b\n" * 1000 + json.dumps({"question": "q", "answer": "a"}).encode())
    with pytest.raises(NotJsonlError, match="first 5 non-blank"):
        load_questions(path, "bamboogle", limits=JsonlLimits(sniff_lines=5))


def test_a_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_questions(tmp_path / "nope.jsonl", "bamboogle")
