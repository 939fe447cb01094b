"""Monte-Carlo values and process advantages (TreePS-RAG, §2.3) on a hand-worked tree and real trees.

The hand-worked TreePS-RAG tree (R: leaf reward, EM):

    q ─┬─ a0   answer          R = 1
       ├─ f1   malformed leaf  R = 0
       ├─ s2   search ─┬─ a0   answer  R = 1
       │               ├─ s1   search ─┬─ a0  R = 0
       │               │               └─ a1  R = 1
       │               └─ s2   pruned search (no children)
       └─ s3   search ─── s0   forced leaf at depth D = 2, R = 0

Six leaves, three correct: V(q) = 1/2. V(s2) = (1 + 0 + 1)/3 = 2/3 over |L| = 3;
V(s2/s1) = 1/2 over 2; V(s3) = 0 over 1. With A(n) = (2V(n) − V(q) − V(p(n))) / sqrt|L(n)|:
  a0: (2 − 1/2 − 1/2)/1 = 1            f1: (0 − 1/2 − 1/2)/1 = −1
  s2: (4/3 − 1)/√3 = 1/(3√3)           s2/a0: 2 − 1/2 − 2/3 = 5/6
  s2/s1: (1 − 1/2 − 2/3)/√2 = −1/(6√2) s2/s1/a0: 0 − 1/2 − 1/2 = −1;  s2/s1/a1: 2 − 1/2 − 1/2 = 1
  s3: (0 − 1/2 − 1/2)/1 = −1           s3/s0: 0 − 1/2 − 0 = −1/2
The root has no advantage (it is the prompt, not a step); the pruned s2/s2 has no leaf: visits 0,
no value, no advantage.
"""

from __future__ import annotations

import json
import math
import random

import polars as pl
import pyarrow as pa
import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.search.tree import QuestionTree
from ragfactory.tasks.valuation.node_values import ValuationConfig, estimate_node_values
from tests.search.decex.jaws_scenario import expand as expand_jaws

LEAVES = {  # path: (kind, reward)
    "q/a0": ("answer", 1.0),
    "q/f1": ("answer", 0.0),
    "q/s2/a0": ("answer", 1.0),
    "q/s2/s1/a0": ("answer", 0.0),
    "q/s2/s1/a1": ("answer", 1.0),
    "q/s3/s0": ("sub_query", 0.0),
}
INNER = ("q/s2", "q/s2/s1", "q/s2/s2", "q/s3")
EXPECTED = {  # path: (visits, value, advantage)
    "q": (6, 0.5, None),
    "q/a0": (1, 1.0, 1.0),
    "q/f1": (1, 0.0, -1.0),
    "q/s2": (3, 2 / 3, 1 / (3 * math.sqrt(3))),
    "q/s2/a0": (1, 1.0, 5 / 6),
    "q/s2/s1": (2, 0.5, -1 / (6 * math.sqrt(2))),
    "q/s2/s1/a0": (1, 0.0, -1.0),
    "q/s2/s1/a1": (1, 1.0, 1.0),
    "q/s2/s2": (0, None, None),
    "q/s3": (1, 0.0, -1.0),
    "q/s3/s0": (1, 0.0, -0.5),
}


def hand_tree(run_id="r", question_id="q1", strategy="treeps") -> list[dict]:
    tree = QuestionTree(run_id, question_id, strategy)
    nodes = {"q": tree.add_root("Q?")}
    for path in sorted(set(INNER) | set(LEAVES), key=lambda p: p.count("/")):
        parent, _, segment = path.rpartition("/")
        kind, reward = LEAVES.get(path, ("sub_query", None))
        nodes[path] = tree.add_child(
            nodes[parent],
            segment,
            kind,
            is_leaf=reward is not None,
            reward=reward,
            parsed={"em": reward, "f1": None if reward is None else 1.0 - reward},
        )
    return tree.node_rows()


def as_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=table_spec("nodes").schema)


def by_path(table) -> dict[str, tuple]:
    rows = table.to_dicts() if isinstance(table, pl.DataFrame) else table.to_pylist()
    return {r["path"]: (r["visits"], r["value"], r["advantage"]) for r in rows}


def assert_values(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for path, (visits, value, advantage) in expected.items():
        approx = (visits, *(None if v is None else pytest.approx(v) for v in (value, advantage)))
        assert got[path] == approx, path


@pytest.mark.parametrize("frame", ["arrow", "polars", "shuffled", "no_depth", "chunked"])
def test_hand_worked_tree_gets_exact_values_and_advantages(frame):
    rows = hand_tree()
    if frame == "shuffled":
        random.Random(3).shuffle(rows)
    table = as_table(rows)
    if frame == "no_depth":
        table = table.drop_columns(["depth"])
    if frame == "chunked":  # several record batches, as a multi-file warehouse read gives
        table = pa.concat_tables([table.slice(0, 4), table.slice(4)])
    nodes = pl.from_arrow(table) if frame == "polars" else table
    valued = estimate_node_values(nodes)
    assert type(valued) is type(nodes)
    assert_values(by_path(valued), EXPECTED)
    paths = valued["path"].to_list() if frame == "polars" else valued.column("path").to_pylist()
    assert paths == [r["path"] for r in rows]  # row order kept


def test_arrow_output_keeps_the_nodes_schema():
    valued = estimate_node_values(as_table(hand_tree()))
    assert valued.schema == table_spec("nodes").schema


def test_trees_of_several_questions_and_strategies_are_valued_apart():
    rows = hand_tree() + hand_tree(question_id="q2") + hand_tree(strategy="other")
    valued = estimate_node_values(as_table(rows)).to_pylist()
    for question_id, strategy in [("q1", "treeps"), ("q2", "treeps"), ("q1", "other")]:
        got = {
            r["path"]: (r["visits"], r["value"], r["advantage"])
            for r in valued
            if (r["question_id"], r["strategy"]) == (question_id, strategy)
        }
        assert_values(got, EXPECTED)


def test_metric_rescoring_reads_the_leaves_parsed_scores():
    valued = by_path(estimate_node_values(as_table(hand_tree()), ValuationConfig(metric="f1")))
    assert valued["q"][1] == pytest.approx(0.5)  # f1 = 1 − em here: still three of six
    assert valued["q/s2"][1] == pytest.approx(1 / 3)
    assert valued["q/a0"][2] == pytest.approx(-1.0)


def reference_values(rows: list[dict]) -> dict[str, tuple]:
    """Descendant-leaf means by plain recursion, the definition read literally."""
    children: dict = {}
    for row in rows:
        children.setdefault(row["parent_id"], []).append(row)

    def leaves(row):
        own = [row["reward"]] if row["is_leaf"] and row["reward"] is not None else []
        return own + [r for child in children.get(row["node_id"], []) for r in leaves(child)]

    by_id = {row["node_id"]: row for row in rows}
    values = {r["node_id"]: leaves(r) for r in rows}
    out = {}
    for row in rows:
        found = values[row["node_id"]]
        value = sum(found) / len(found) if found else None
        root = row
        while root["parent_id"] is not None:
            root = by_id[root["parent_id"]]
        advantage = None
        if found and row["parent_id"] is not None:
            parent = values[row["parent_id"]]
            root_value = sum(values[root["node_id"]]) / len(values[root["node_id"]])
            advantage = (2 * value - root_value - sum(parent) / len(parent)) / math.sqrt(len(found))
        out[row["path"]] = (len(found), value, advantage)
    return out


def test_decex_tree_leaves_are_its_answers_and_rollouts():
    rows = expand_jaws()[0].node_rows()
    valued = by_path(estimate_node_values(as_table(rows)))
    assert_values(valued, reference_values(rows))
    decex_values = {r["path"]: r["value"] for r in rows}
    # a branch whose only leaves are its own rollouts keeps DecEx's rollout mean (Eq. 1 of DecEx-RAG)
    for path in ("q/s2", "q/s0/w2", "q/s0/w0/s1", "q/s0/w0/s0/e1"):
        assert valued[path][1] == pytest.approx(decex_values[path]), path
    leaves = [r for r in rows if r["is_leaf"]]
    assert {r["kind"] for r in leaves} == {"answer", "rollout_leaf"}
    assert valued["q"][0] == len(leaves)


def random_tree_rows(n_questions: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for q in range(n_questions):
        tree = QuestionTree("r", f"q{q}", "treeps")
        frontier = [tree.add_root("Q?")]
        for depth in range(1, 5):
            next_frontier = []
            for parent in frontier:
                for i in range(rng.randint(1, 4)):
                    leaf = depth == 4 or rng.random() < 0.4
                    node = tree.add_child(
                        parent,
                        f"c{i}",
                        "answer" if leaf else "sub_query",
                        is_leaf=leaf,
                        reward=float(rng.random() < 0.5) if leaf else None,
                    )
                    if not leaf and rng.random() < 0.7:
                        next_frontier.append(node)
            frontier = next_frontier
        rows += tree.node_rows()
    return rows


def test_random_trees_match_the_recursive_definition():
    rows = random_tree_rows(20, seed=7)
    assert_values(by_path_keyed(estimate_node_values(as_table(rows))), by_path_keyed_ref(rows))


def by_path_keyed(table: pa.Table) -> dict:
    return {(r["question_id"], r["path"]): (r["visits"], r["value"], r["advantage"]) for r in table.to_pylist()}


def by_path_keyed_ref(rows: list[dict]) -> dict:
    out = {}
    for q in {r["question_id"] for r in rows}:
        tree = [r for r in rows if r["question_id"] == q]
        out.update({(q, path): v for path, v in reference_values(tree).items()})
    return out


def test_leaf_without_reward_and_empty_table():
    rows = hand_tree()
    for row in rows:
        if row["path"] == "q/s3/s0":
            row["reward"] = None  # not scored yet: not a leaf for valuation
    valued = by_path(estimate_node_values(as_table(rows)))
    assert valued["q/s3"] == (0, None, None) and valued["q"][:2] == (5, pytest.approx(0.6))
    empty = estimate_node_values(table_spec("nodes").schema.empty_table())
    assert empty.num_rows == 0


def broken(change: str) -> pa.Table:
    rows = hand_tree()
    if change == "duplicate":
        rows.append(dict(rows[3]))
    elif change == "orphan":
        rows[3]["parent_id"] = "nowhere"
    elif change == "cycle":
        rows[0]["parent_id"] = rows[3]["node_id"]
    elif change == "no_reward_column":
        return as_table(rows).drop_columns(["reward"])
    return as_table(rows)


@pytest.mark.parametrize(
    "change,config,message",
    [
        ("duplicate", ValuationConfig(), "appears more than once"),
        ("orphan", ValuationConfig(), "has parent_id 'nowhere', which is not in the nodes table"),
        ("cycle", ValuationConfig(), "cycle"),
        ("no_reward_column", ValuationConfig(), r"lacks column\(s\) \['reward'\]"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(change, config, message):
    with pytest.raises(ValueError, match=message):
        estimate_node_values(broken(change), config)


def test_a_leaf_without_the_metric_is_named():
    rows = hand_tree()
    rows[1]["parsed"] = json.dumps({"em": 1.0})
    with pytest.raises(ValueError, match=f"leaf '{rows[1]['node_id']}' has no 'f1'"):
        estimate_node_values(as_table(rows), ValuationConfig(metric="f1"))


def test_config_refuses_an_unknown_metric():
    with pytest.raises(ValueError, match="ValuationConfig.metric"):
        ValuationConfig(metric="bleu")


def test_a_repeated_or_missing_node_id_is_named():
    rows = hand_tree()
    repeated = rows[3]["node_id"]
    with pytest.raises(ValueError, match=f"node_id '{repeated}' appears more than once"):
        estimate_node_values(as_table([*rows, dict(rows[3])]))
    rows[2]["node_id"] = None
    with pytest.raises(ValueError, match="row 2 of the nodes table has no node_id"):
        estimate_node_values(as_table(rows))


def test_a_table_in_many_chunks_is_valued_as_one():
    """A table read back from many shards arrives in chunks; ids are matched across them (a
    parent in one chunk, its children in another)."""
    table = as_table(hand_tree())
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2, 3), table.slice(5)])
    assert chunked.column("node_id").num_chunks == 3
    assert by_path(estimate_node_values(chunked)) == by_path(estimate_node_values(table))
