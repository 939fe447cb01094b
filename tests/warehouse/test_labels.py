"""Process labels side by side and search behaviour on hand-built warehouses
(warehouse/sql/label_agreement.sql, search_behaviour.sql, gold_paragraphs.sql and the strategies'
``*_step_labels.sql``): every expected figure is worked out by hand in the comments."""

from __future__ import annotations

import pytest

import ragfactory.tasks.search.registry  # noqa: F401  (the strategies register their views on import)
from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.warehouse.labelled import BLACK_BOOK, TOKAREV, hotpotqa_warehouse, node, write


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
    write(
        wh,
        "nodes",
        [node("treeps", "q1", "q", kind="question")]
        + [node("treeps", "q1", f"q/{name}", value=v, advantage=a) for name, (v, a) in values.items()],
    )
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
    write(
        wh,
        "nodes",
        [
            node("decex", "d", "q", kind="question"),
            node("decex", "d", "q/a", value=0.75),
            node("treeps", "t", "q/a", value=0.5, advantage=-0.25, is_format_error=True),
            node("mcts", "m", "q/a", value=0.4, parsed='{"judge_score": 0.8}'),
            node("apex", "x", "q/p0", kind="plan", parsed="{}"),
            node("apex", "x", "q/p0/s1", kind="sub_question", parsed='{"step": 1}'),
            node("apex", "x", "q/p0/s1/s2", kind="sub_question", parsed='{"step": 2}'),
        ],
    )
    write(
        wh,
        "plan_scores",
        [
            {
                "plan_id": "x|q/p0",
                "run_id": "r1",
                "question_id": "x",
                "f1": 0.5,
                "matched": [{"predicted": 1, "gold": 2, "similarity": 0.9}],
            }
        ],
    )
    write(
        wh,
        "rewards",
        [
            {
                "reward_id": "w1",
                "run_id": "r1",
                "question_id": "r",
                "strategy": "r3",
                "node_id": "r|q/s1",
                "name": "relevance",
                "value": 0.7,
                "is_format_error": False,
            },
            {
                "reward_id": "w2",
                "run_id": "r1",
                "question_id": "r",
                "strategy": "r3",
                "node_id": "r|q/s1",
                "name": "process",
                "value": 0.7,
                "scale": 0.6,
                "scaled": 0.42,
            },
            {
                "reward_id": "w3",
                "run_id": "r1",
                "question_id": "r",
                "strategy": "r3",
                "node_id": "r|q/s2",
                "name": "relevance",
                "value": 0.0,
                "is_format_error": True,
            },  # a verdict that did not read
        ],
    )
    rows = query(wh, "select node_id, source, value, scale from step_labels_all").to_pylist()
    got = {(r["node_id"], r["source"]): (r["value"], r["scale"]) for r in rows}
    assert got == {
        ("d|q/a", "format"): (1.0, "{0,1}"),
        ("d|q/a", "mc_value"): (0.75, "[0,1]"),
        ("t|q/a", "format"): (0.0, "{0,1}"),
        ("t|q/a", "mc_value"): (0.5, "[0,1]"),
        ("t|q/a", "advantage"): (-0.25, "[-1,1]"),
        ("m|q/a", "format"): (1.0, "{0,1}"),
        ("m|q/a", "spre"): (0.4, "[0,1]"),
        ("m|q/a", "process_judge"): (0.8, "[0,1]"),
        ("x|q/p0", "format"): (1.0, "{0,1}"),
        ("x|q/p0", "sepr_f1"): (0.5, "[0,1]"),
        ("x|q/p0/s1", "format"): (1.0, "{0,1}"),
        ("x|q/p0/s1", "sepr_match"): (0.9, "[0,1]"),
        ("x|q/p0/s1/s2", "format"): (1.0, "{0,1}"),
        ("x|q/p0/s1/s2", "sepr_match"): (0.0, "[0,1]"),
        ("r|q/s1", "relevance"): (0.7, "[0,1]"),
        ("r|q/s1", "scaled_process"): (0.42, "[-1,1]"),
    }


def test_gold_recall_worked_by_hand_on_two_hotpotqa_questions(tmp_path):
    wh = hotpotqa_warehouse(tmp_path)
    gold = query(wh, "select question_id, title from gold_paragraphs").to_pylist()
    assert sorted((g["question_id"], g["title"]) for g in gold) == [
        (BLACK_BOOK, "black book (film)"),
        (BLACK_BOOK, "halina reijn"),
        (TOKAREV, "moscow state university"),
        (TOKAREV, "sergei aleksandrovich tokarev"),
    ]
    rows = query(wh, "select * from search_behaviour").to_pylist()
    got = {
        (r["question_id"], r["path"]): (
            r["n_searches"],
            r["repeated_queries"],
            r["gold_found"],
            r["gold_recall"],
            r["searches_vs_hops"],
        )
        for r in rows
    }
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
    wh = hotpotqa_warehouse(tmp_path)
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
