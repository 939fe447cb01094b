"""Process labels side by side and search behaviour on hand-built warehouses
(warehouse/sql/label_agreement.sql, search_behaviour.sql, gold_paragraphs.sql and the strategies'
``*_step_labels.sql``): every expected figure is worked out by hand in the comments."""

from __future__ import annotations

from pathlib import Path

import pytest

import ragfactory.tasks.search.registry  # noqa: F401  (the strategies register their views on import)
from ragfactory.tasks.data.loaders import load_bundled, load_questions
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse

HOTPOTQA = Path(__file__).resolve().parents[2] / "ragfactory" / "data" / "hotpotqa" / "dev.jsonl"
TOKAREV = "hotpotqa:5ae143ed55429920d5234360"  # gold: Sergei Aleksandrovich Tokarev, Moscow State University
BLACK_BOOK = "hotpotqa:5abc19705542993a06baf86e"  # gold: Black Book (film), Halina Reijn


def _node(strategy: str, question: str, path: str, **fields) -> dict:
    parent = path.rsplit("/", 1)[0] if "/" in path else None
    return {"node_id": f"{question}|{path}", "run_id": "r1", "question_id": question, "strategy": strategy,
            "path": path, "parent_id": f"{question}|{parent}" if parent else None, "depth": path.count("/"),
            "kind": fields.pop("kind", "step"), "is_format_error": fields.pop("is_format_error", False), **fields}


def _write(wh: Warehouse, table: str, rows: list[dict]) -> None:
    wh.write(table, rows, "s0", partition={"run_id": "r1"})


def test_agreement_on_a_hand_built_tree(tmp_path):
    wh = Warehouse(tmp_path)
    # Four steps under one root, labelled by two sources (TreePS's value and advantage):
    #   node  mc_value  advantage   rank(mc)  rank(adv)
    #   s0    0.2       -0.1        1         1
    #   s1    0.5        0.3        2.5       4      (s1, s2 tie on mc_value: ranks 2 and 3 averaged)
    #   s2    0.5        0.0        2.5       2
    #   s3    0.9        0.2        4         3
    # Spearman: ranks minus their mean 2.5 are (-1.5, 0, 0, 1.5) and (-1.5, 1.5, -0.5, 0.5);
    #   sum of products 2.25 + 0 + 0 + 0.75 = 3, sums of squares 4.5 and 5,
    #   rho = 3 / sqrt(4.5 * 5) = 3 / sqrt(22.5) = 0.632456
    # Kendall: of the 6 pairs, (s0,s1) (s0,s2) (s0,s3) (s2,s3) are concordant, (s1,s3) discordant,
    #   (s1,s2) tied on mc_value: S = 4 - 1 = 3, n0 = 6, ties 1 and 0,
    #   tau_b = 3 / sqrt((6 - 1) * (6 - 0)) = 3 / sqrt(30) = 0.547723
    # format is 1 on every step: constant, so neither coefficient exists against it.
    values = {"s0": (0.2, -0.1), "s1": (0.5, 0.3), "s2": (0.5, 0.0), "s3": (0.9, 0.2)}
    _write(wh, "nodes", [_node("treeps", "q1", "q", kind="question")] + [
        _node("treeps", "q1", f"q/{name}", value=v, advantage=a) for name, (v, a) in values.items()
    ])
    rows = query(wh, "select * from label_agreement").to_pylist()
    found = {(r["source_a"], r["source_b"]): r for r in rows}
    assert sorted(found) == [("advantage", "format"), ("advantage", "mc_value"), ("format", "mc_value")]
    pair = found[("advantage", "mc_value")]
    assert (pair["strategy"], pair["n_nodes"], pair["against_gold"]) == ("treeps", 4, False)
    assert pair["rho"] == pytest.approx(0.632456, abs=1e-6)
    assert pair["tau_b"] == pytest.approx(0.547723, abs=1e-6)
    assert found[("format", "mc_value")]["rho"] is None and found[("format", "mc_value")]["tau_b"] is None


def test_step_labels_all_gathers_every_strategys_labels(tmp_path):
    wh = Warehouse(tmp_path)
    _write(wh, "nodes", [
        _node("decex", "d", "q", kind="question"), _node("decex", "d", "q/a", value=0.75),
        _node("treeps", "t", "q/a", value=0.5, advantage=-0.25, is_format_error=True),
        _node("mcts", "m", "q/a", value=0.4, parsed='{"judge_score": 0.8}'),
        _node("apex", "x", "q/p0", kind="plan", parsed="{}"),
        _node("apex", "x", "q/p0/s1", kind="sub_question", parsed='{"step": 1}'),
        _node("apex", "x", "q/p0/s1/s2", kind="sub_question", parsed='{"step": 2}'),
    ])
    _write(wh, "plan_scores", [{"plan_id": "x|q/p0", "run_id": "r1", "question_id": "x", "f1": 0.5,
                                "matched": [{"predicted": 1, "gold": 2, "similarity": 0.9}]}])
    _write(wh, "rewards", [
        {"reward_id": "w1", "run_id": "r1", "question_id": "r", "strategy": "r3", "node_id": "r|q/s1",
         "name": "relevance", "value": 0.7, "is_format_error": False},
        {"reward_id": "w2", "run_id": "r1", "question_id": "r", "strategy": "r3", "node_id": "r|q/s1",
         "name": "process", "value": 0.7, "scale": 0.6, "scaled": 0.42},
        {"reward_id": "w3", "run_id": "r1", "question_id": "r", "strategy": "r3", "node_id": "r|q/s2",
         "name": "relevance", "value": 0.0, "is_format_error": True},  # a verdict that did not read
    ])
    rows = query(wh, "select node_id, source, value, scale from step_labels_all").to_pylist()
    got = {(r["node_id"], r["source"]): (r["value"], r["scale"]) for r in rows}
    assert got == {
        ("d|q/a", "format"): (1.0, "{0,1}"), ("d|q/a", "mc_value"): (0.75, "[0,1]"),
        ("t|q/a", "format"): (0.0, "{0,1}"), ("t|q/a", "mc_value"): (0.5, "[0,1]"),
        ("t|q/a", "advantage"): (-0.25, "[-1,1]"),
        ("m|q/a", "format"): (1.0, "{0,1}"), ("m|q/a", "spre"): (0.4, "[0,1]"),
        ("m|q/a", "process_judge"): (0.8, "[0,1]"),
        ("x|q/p0", "format"): (1.0, "{0,1}"), ("x|q/p0", "sepr_f1"): (0.5, "[0,1]"),
        ("x|q/p0/s1", "format"): (1.0, "{0,1}"), ("x|q/p0/s1", "sepr_match"): (0.9, "[0,1]"),
        ("x|q/p0/s1/s2", "format"): (1.0, "{0,1}"), ("x|q/p0/s1/s2", "sepr_match"): (0.0, "[0,1]"),
        ("r|q/s1", "relevance"): (0.7, "[0,1]"), ("r|q/s1", "scaled_process"): (0.42, "[-1,1]"),
    }


def _search(question: str, path: str, query: str, titles: list[str], value: float) -> tuple[dict, dict]:
    """A search step (TreePS's parsed query) and the ledger row that answered it."""
    node = _node("treeps", question, path, kind="sub_query", parsed=f'{{"query": "{query}"}}', value=value)
    row = {"retrieval_id": f"{question}|{path}", "run_id": "r1", "strategy": "treeps", "question_id": question,
           "node_id": node["node_id"], "query": query, "k": len(titles), "titles": titles,
           "passage_ids": [f"p{i}" for i in range(len(titles))]}
    return node, row


def _hotpotqa_warehouse(tmp_path) -> Warehouse:
    """The first two HotpotQA dev questions, as the loader keeps them, and a tree searching each."""
    wh = Warehouse(tmp_path)
    loaded = load_questions(HOTPOTQA, "hotpotqa", limit=2)
    wh.write("questions", loaded.questions, "dev")
    steps = [
        # Tokarev: gold {sergei aleksandrovich tokarev, moscow state university}, 2 hops
        _search(TOKAREV, "q/s0", "Sergei Aleksandrovich Tokarev professor",
                ["Sergei Aleksandrovich Tokarev", "Sergei Aleksandrovich Kudryavtsev"], 0.4),
        _search(TOKAREV, "q/s0/s1", "sergei aleksandrovich  tokarev, professor?",  # the same query again
                ["Sergei Aleksandrovich Tokarev", "Sergei Kosarev"], 0.4),
        _search(TOKAREV, "q/s0/s1/s2", "Moscow State University founded", ["Moscow State University"], 0.8),
        # Black Book: gold {black book (film), halina reijn}, 2 hops
        _search(BLACK_BOOK, "q/s0", "Black Book", ["Black Book of the Admiralty", "Black Book (World War II)"], 0.0),
        _search(BLACK_BOOK, "q/s1", "Black Book film actress", ["Black Book (film)", "Halina Reijn"], 0.8),
        _search(BLACK_BOOK, "q/s1/s2", "Halina Reijn heritage", ['"Halina Reijn"'], 0.8),
    ]
    leaves = [_node("treeps", TOKAREV, "q/s0/s1/s2/a", kind="answer", is_leaf=True, value=0.8),
              _node("treeps", BLACK_BOOK, "q/s0/a", kind="answer", is_leaf=True, value=0.0),
              _node("treeps", BLACK_BOOK, "q/s1/s2/a", kind="answer", is_leaf=True, value=0.8)]
    roots = [_node("treeps", q, "q", kind="question") for q in (TOKAREV, BLACK_BOOK)]
    _write(wh, "nodes", roots + [node for node, _ in steps] + leaves)
    _write(wh, "retrievals", [row for _, row in steps])
    return wh


def test_gold_recall_worked_by_hand_on_two_hotpotqa_questions(tmp_path):
    wh = _hotpotqa_warehouse(tmp_path)
    gold = query(wh, "select question_id, title from gold_paragraphs").to_pylist()
    assert sorted((g["question_id"], g["title"]) for g in gold) == [
        (BLACK_BOOK, "black book (film)"), (BLACK_BOOK, "halina reijn"),
        (TOKAREV, "moscow state university"), (TOKAREV, "sergei aleksandrovich tokarev"),
    ]
    rows = query(wh, "select * from search_behaviour").to_pylist()
    got = {(r["question_id"], r["path"]): (r["n_searches"], r["repeated_queries"], r["gold_found"], r["gold_recall"],
                                           r["searches_vs_hops"]) for r in rows}
    assert got == {
        # Tokarev: s0 finds Tokarev (1 of 2); s1 repeats s0's query once normalised and finds
        # nothing new; s2 finds Moscow State University: 2 of 2 after 3 searches for 2 hops.
        (TOKAREV, "q/s0"): (1, 0, 1, 0.5, "under"),
        (TOKAREV, "q/s0/s1"): (2, 1, 1, 0.5, "equal"),
        (TOKAREV, "q/s0/s1/s2"): (3, 1, 2, 1.0, "over"),
        (TOKAREV, "q/s0/s1/s2/a"): (3, 1, 2, 1.0, "over"),
        # Black Book: the branch through s0 found neither gold title in its one search; the one
        # through s1 found both in its first and searched once more (the quoted title counts once).
        (BLACK_BOOK, "q/s0"): (1, 0, 0, 0.0, "under"),
        (BLACK_BOOK, "q/s0/a"): (1, 0, 0, 0.0, "under"),
        (BLACK_BOOK, "q/s1"): (1, 0, 2, 1.0, "under"),
        (BLACK_BOOK, "q/s1/s2"): (2, 0, 2, 1.0, "equal"),
        (BLACK_BOOK, "q/s1/s2/a"): (2, 0, 2, 1.0, "equal"),
    }
    leaves = {r["path"] for r in rows if r["is_leaf"]}
    assert leaves == {"q/s0/s1/s2/a", "q/s0/a", "q/s1/s2/a"}


def test_labels_read_against_gold_support(tmp_path):
    # The values were set to 0.8 x gold_recall (0 -> 0, 0.5 -> 0.4, 1 -> 0.8) on all 9 steps, so
    # the two rankings are the same, ties included: rho = tau_b = 1.
    wh = _hotpotqa_warehouse(tmp_path)
    rows = query(wh, "select * from label_agreement where against_gold").to_pylist()
    pair = {(r["source_a"], r["source_b"]): r for r in rows}[("gold_support", "mc_value")]
    assert pair["n_nodes"] == 9
    assert pair["rho"] == pytest.approx(1.0) and pair["tau_b"] == pytest.approx(1.0)


def test_gold_paragraphs_of_musique_and_2wiki(tmp_path):
    """MuSiQue's gold comes from its is_supporting paragraphs (ids in the metadata, titles in
    passages); 2WikiMultiHopQA's from supporting_facts, as HotpotQA's. The first bundled rows:
    MuSiQue 2hop__327688_56873 supports with 'Craig Westcarr' and 'Nottingham Forest F.C.', 2Wiki
    91edc89c… with 'Les films du losange' and 'Éric Rohmer' (lower-cased, accents kept)."""
    wh = Warehouse(tmp_path)
    for dataset in ("musique", "2wikimultihopqa"):
        loaded = load_bundled(dataset, limit=1)
        wh.write("questions", loaded.questions, dataset)
        wh.write("passages", loaded.passages, dataset)
    rows = query(wh, "select question_id, title from gold_paragraphs").to_pylist()
    assert sorted((r["question_id"], r["title"]) for r in rows) == [
        ("2wikimultihopqa:91edc89c0bdc11eba7f7acde48001122", "les films du losange"),
        ("2wikimultihopqa:91edc89c0bdc11eba7f7acde48001122", "éric rohmer"),
        ("musique:2hop__327688_56873", "craig westcarr"),
        ("musique:2hop__327688_56873", "nottingham forest f.c."),
    ]
