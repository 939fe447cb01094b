"""Parsers from each benchmark's original row layout to one question with its paragraphs.

Covers the datasets the papers evaluate on (HotpotQA, 2WikiMultiHopQA, MuSiQue, Bamboogle) in
their official layouts (``ragfactory/data/README.md``), FlashRAG's unified JSONL, and the seeded
world's questions (``tasks/data/world``, docs/world.md). MuSiQue's
``question_decomposition`` becomes the gold plan that SEPR matches predicted plans against
(Hungarian plan matching); its ``#n`` references to earlier answers are kept verbatim.

A parser takes one decoded JSON object and returns a :class:`ParsedRow`, or raises
:class:`RowError` whose message (naming the field) becomes the reject reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ragfactory.tasks.data.jsonl import RowError, type_name
from ragfactory.tasks.data.passages import passage_id


@dataclass
class ParsedRow:
    """One question in dataset-neutral form, before it is keyed and written."""

    original_id: str
    question: str
    golden_answers: list[str]
    gold_plan: list[dict] | None = None
    metadata: dict = field(default_factory=dict)
    paragraphs: list[tuple[str, str]] = field(default_factory=list)  # (title, text)


Parser = Callable[[dict, int], ParsedRow]


def require_str(record: dict, name: str, where: str = "") -> str:
    """The stripped, non-empty string in ``record[name]``; ``where`` prefixes the field name."""
    label = f"{where}{name}"
    if name not in record or record[name] is None:
        raise RowError(f"missing field '{label}'")
    value = record[name]
    if not isinstance(value, str):
        raise RowError(f"field '{label}' must be a string, got {type_name(value)}")
    value = value.strip()
    if not value:
        raise RowError(f"empty field '{label}'")
    return value


def require_list(record: dict, name: str, optional: bool = False) -> list:
    """The list in ``record[name]`` (``[]`` when optional and absent)."""
    if record.get(name) is None:
        if optional:
            return []
        raise RowError(f"missing field '{name}'")
    value = record[name]
    if not isinstance(value, list):
        raise RowError(f"field '{name}' must be an array, got {type_name(value)}")
    return value


def require_id(record: dict, name: str) -> str:
    """A row id as a string; benchmarks use strings, some user files integers."""
    value = record.get(name)
    if value is None:
        raise RowError(f"missing field '{name}'")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RowError(f"field '{name}' must be a string or integer, got {type_name(value)}")
    value = str(value).strip()
    if not value:
        raise RowError(f"empty field '{name}'")
    return value


def clean_answers(values: list, name: str, required: bool = True) -> list[str]:
    """Answers stripped, empties dropped, duplicates removed with the first order kept."""
    answers: dict[str, None] = {}
    for i, value in enumerate(values):
        if not isinstance(value, str):
            raise RowError(f"field '{name}' item {i} must be a string, got {type_name(value)}")
        if value.strip():
            answers.setdefault(value.strip(), None)
    if required and not answers:
        raise RowError(f"empty field '{name}'")
    return list(answers)


def parse_context(record: dict, joiner: str) -> list[tuple[str, str]]:
    """HotpotQA / 2Wiki ``context`` ``[[title, [sentence, ...]], ...]`` as (title, text) pairs."""
    context = require_list(record, "context")
    if not context:
        raise RowError("empty context")
    paragraphs = []
    for i, item in enumerate(context):
        ok = isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
        sentences = item[1] if ok else None
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise RowError(f"field 'context' item {i} must be [title, [sentences]]")
        paragraphs.append((item[0].strip(), joiner.join(sentences).strip()))
    return paragraphs


def parse_hotpot_like(record: dict, joiner: str, extra: tuple[str, ...]) -> ParsedRow:
    """The shared shape of HotpotQA and 2WikiMultiHopQA (distractor setting)."""
    row = ParsedRow(
        original_id=require_id(record, "_id"),
        question=require_str(record, "question"),
        golden_answers=[require_str(record, "answer")],
        paragraphs=parse_context(record, joiner),
    )
    row.metadata = {name: record[name] for name in extra if name in record}
    row.metadata["passage_ids"] = [passage_id(t, x) for t, x in row.paragraphs]
    return row


def parse_hotpotqa(record: dict, line: int) -> ParsedRow:
    # HotpotQA sentences keep their own leading spaces: "".join restores the paragraph exactly
    return parse_hotpot_like(record, "", ("type", "level", "supporting_facts"))


def parse_2wikimultihopqa(record: dict, line: int) -> ParsedRow:
    # 2Wiki sentences carry no surrounding spaces, so they are joined with one
    return parse_hotpot_like(record, " ", ("type", "supporting_facts", "evidences"))


def parse_gold_plan(steps: list, name: str) -> list[dict]:
    """MuSiQue ``question_decomposition`` steps as ``questions.gold_plan`` (step is 1-based)."""
    plan = []
    for n, step in enumerate(steps, start=1):
        if not isinstance(step, dict):
            raise RowError(f"field '{name}' step {n} must be an object, got {type_name(step)}")
        where = f"{name}[{n}]."
        support = step.get("paragraph_support_idx")
        if support is not None and (isinstance(support, bool) or not isinstance(support, int)):
            raise RowError(f"field '{where}paragraph_support_idx' must be an integer or null")
        plan.append(
            {
                "step": n,
                "question": require_str(step, "question", where),
                "answer": require_str(step, "answer", where),
                "paragraph_support_idx": support,
            }
        )
    return plan


def parse_musique_paragraphs(record: dict) -> tuple[list[tuple[str, str]], list[int]]:
    """(title, text) per paragraph in file order (MuSiQue's ``idx`` is the position), and the
    positions of the supporting ones."""
    items = require_list(record, "paragraphs")
    if not items:
        raise RowError("empty context")
    paragraphs, supporting = [], []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RowError(f"field 'paragraphs' item {i} must be an object, got {type_name(item)}")
        title, text = item.get("title"), item.get("paragraph_text")
        if not isinstance(title, str) or not isinstance(text, str):
            raise RowError(f"field 'paragraphs' item {i} needs string 'title' and 'paragraph_text'")
        paragraphs.append((title.strip(), text.strip()))
        if item.get("is_supporting") is True:
            supporting.append(i)
    return paragraphs, supporting


def parse_musique(record: dict, line: int) -> ParsedRow:
    answer = require_str(record, "answer")
    aliases = clean_answers(require_list(record, "answer_aliases", optional=True), "answer_aliases", required=False)
    paragraphs, supporting = parse_musique_paragraphs(record)
    steps = require_list(record, "question_decomposition")
    plan = parse_gold_plan(steps, "question_decomposition")
    ids = [passage_id(t, x) for t, x in paragraphs]
    return ParsedRow(
        original_id=require_id(record, "id"),
        question=require_str(record, "question"),
        golden_answers=[answer, *(a for a in aliases if a != answer)],
        gold_plan=plan,
        metadata={
            "answerable": record.get("answerable"),
            "decomposition_ids": [s.get("id") for s in steps],
            "passage_ids": ids,
            "supporting_passage_ids": [ids[i] for i in supporting],
        },
        paragraphs=paragraphs,
    )


def parse_world(record: dict, line: int) -> ParsedRow:
    """A question of the seeded world (``tasks/data/world``): MuSiQue's layout plus its rung, the
    entities it names and the partition its file was written for, kept in ``metadata``."""
    row = parse_musique(record, line)
    rung = require_str(record, "rung")
    entities = require_list(record, "entities")
    if not all(isinstance(e, str) for e in entities):
        raise RowError("field 'entities' must be an array of strings")
    relations = [step.get("relation") for step in record["question_decomposition"]]
    row.metadata.update(rung=rung, hops=len(row.gold_plan), entities=entities, relations=relations)
    row.metadata["partition"] = record.get("partition")
    return row


def parse_bamboogle(record: dict, line: int) -> ParsedRow:
    # Bamboogle ships without ids; its line number is stable because the file is fixed
    return ParsedRow(
        original_id=str(line),
        question=require_str(record, "question"),
        golden_answers=[require_str(record, "answer")],
    )


FLASHRAG_FIELDS = ("id", "question", "golden_answers", "metadata")


def parse_flashrag(record: dict, line: int) -> ParsedRow:
    metadata = record.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise RowError(f"field 'metadata' must be an object, got {type_name(metadata)}")
    metadata = {**metadata, **{k: v for k, v in record.items() if k not in FLASHRAG_FIELDS}}
    # FlashRAG's MuSiQue keeps the decomposition inside metadata
    steps = metadata.get("question_decomposition")
    plan = None
    if isinstance(steps, list):
        plan = parse_gold_plan(steps, "metadata.question_decomposition")
    return ParsedRow(
        original_id=require_id(record, "id"),
        question=require_str(record, "question"),
        golden_answers=clean_answers(require_list(record, "golden_answers"), "golden_answers"),
        gold_plan=plan,
        metadata=metadata,
    )


FORMATS: dict[str, Parser] = {
    "hotpotqa": parse_hotpotqa,
    "2wikimultihopqa": parse_2wikimultihopqa,
    "musique": parse_musique,
    "bamboogle": parse_bamboogle,
    "world": parse_world,
    "flashrag": parse_flashrag,
}


def format_parser(fmt: str) -> Parser:
    """The parser of a format, or a clear error naming the known formats."""
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; known formats: {', '.join(FORMATS)}") from None
