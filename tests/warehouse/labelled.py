"""Hand-built label warehouses the label tests share: node rows of any strategy, and two HotpotQA
dev questions whose TreePS trees search for their gold paragraphs (recall worked out by hand in
tests/warehouse/test_labels.py)."""

from __future__ import annotations

from pathlib import Path

from ragfactory.tasks.data.loaders import load_questions
from ragfactory.warehouse.store import Warehouse

HOTPOTQA = Path(__file__).resolve().parents[2] / "ragfactory" / "data" / "hotpotqa" / "dev.jsonl"
TOKAREV = "hotpotqa:5ae143ed55429920d5234360"  # gold: Sergei Aleksandrovich Tokarev, Moscow State University
BLACK_BOOK = "hotpotqa:5abc19705542993a06baf86e"  # gold: Black Book (film), Halina Reijn


def node(strategy: str, question: str, path: str, **fields) -> dict:
    parent = path.rsplit("/", 1)[0] if "/" in path else None
    return {
        "node_id": f"{question}|{path}",
        "run_id": "r1",
        "question_id": question,
        "strategy": strategy,
        "path": path,
        "parent_id": f"{question}|{parent}" if parent else None,
        "depth": path.count("/"),
        "kind": fields.pop("kind", "step"),
        "is_format_error": fields.pop("is_format_error", False),
        **fields,
    }


def write(wh: Warehouse, table: str, rows: list[dict]) -> None:
    wh.write(table, rows, "s0", partition={"run_id": "r1"})


def search(question: str, path: str, query: str, titles: list[str], value: float) -> tuple[dict, dict]:
    """A search step (TreePS's parsed query) and the ledger row that answered it."""
    step = node("treeps", question, path, kind="sub_query", parsed=f'{{"query": "{query}"}}', value=value)
    row = {
        "retrieval_id": f"{question}|{path}",
        "run_id": "r1",
        "strategy": "treeps",
        "question_id": question,
        "node_id": step["node_id"],
        "query": query,
        "k": len(titles),
        "titles": titles,
        "passage_ids": [f"p{i}" for i in range(len(titles))],
    }
    return step, row


def hotpotqa_warehouse(tmp_path) -> Warehouse:
    """The first two HotpotQA dev questions, as the loader keeps them, and a tree searching each."""
    wh = Warehouse(tmp_path)
    loaded = load_questions(HOTPOTQA, "hotpotqa", limit=2)
    wh.write("questions", loaded.questions, "dev")
    steps = [
        # Tokarev: gold {sergei aleksandrovich tokarev, moscow state university}, 2 hops
        search(
            TOKAREV,
            "q/s0",
            "Sergei Aleksandrovich Tokarev professor",
            ["Sergei Aleksandrovich Tokarev", "Sergei Aleksandrovich Kudryavtsev"],
            0.4,
        ),
        search(
            TOKAREV,
            "q/s0/s1",
            "sergei aleksandrovich  tokarev, professor?",  # the same query again
            ["Sergei Aleksandrovich Tokarev", "Sergei Kosarev"],
            0.4,
        ),
        search(TOKAREV, "q/s0/s1/s2", "Moscow State University founded", ["Moscow State University"], 0.8),
        # Black Book: gold {black book (film), halina reijn}, 2 hops
        search(BLACK_BOOK, "q/s0", "Black Book", ["Black Book of the Admiralty", "Black Book (World War II)"], 0.0),
        search(BLACK_BOOK, "q/s1", "Black Book film actress", ["Black Book (film)", "Halina Reijn"], 0.8),
        search(BLACK_BOOK, "q/s1/s2", "Halina Reijn heritage", ['"Halina Reijn"'], 0.8),
    ]
    leaves = [
        node("treeps", TOKAREV, "q/s0/s1/s2/a", kind="answer", is_leaf=True, value=0.8),
        node("treeps", BLACK_BOOK, "q/s0/a", kind="answer", is_leaf=True, value=0.0),
        node("treeps", BLACK_BOOK, "q/s1/s2/a", kind="answer", is_leaf=True, value=0.8),
    ]
    roots = [node("treeps", q, "q", kind="question") for q in (TOKAREV, BLACK_BOOK)]
    write(wh, "nodes", roots + [step for step, _ in steps] + leaves)
    write(wh, "retrievals", [row for _, row in steps])
    return wh
