"""The shared tree model: deterministic, unique node ids; rows that fit the warehouse tables."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ragfactory.schemas.tables import table_spec
from ragfactory.tasks.search.decex.config import DecExConfig
from ragfactory.tasks.search.tree import Node, QuestionTree, Rollout, RowTree, group_trees, node_id, path_key
from tests.search.decex.jaws_scenario import expand


def test_node_id_is_a_function_of_run_question_and_path():
    assert node_id("r", "q", "decex", "q/s0") == node_id("r", "q", "decex", "q/s0")
    others = {
        node_id("r2", "q", "decex", "q/s0"),
        node_id("r", "q2", "decex", "q/s0"),
        node_id("r", "q", "decex", "q/s1"),
        node_id("r", "q", "treeps", "q/s0"),
    }
    assert node_id("r", "q", "decex", "q/s0") not in others and len(others) == 4
    assert len(node_id("r", "q", "decex", "q")) == 32


def test_expansion_is_reproducible_and_ids_unique():
    first, second = expand()[0], expand()[0]
    assert first.node_rows() == second.node_rows()
    assert first.rollout_rows() == second.rollout_rows()
    ids = [r["node_id"] for r in first.node_rows()]
    assert len(ids) == len(set(ids)) == 47
    paths = [r["path"] for r in first.node_rows()]
    assert len(paths) == len(set(paths))
    assert {r["rollout_id"] for r in first.rollout_rows()} <= set(ids)


def test_ids_follow_the_run_but_not_the_seed():
    base = expand()[0].node_rows()
    reseeded = expand(run_seed=12)[0].node_rows()
    other_run = expand(run_id="run-2")[0].node_rows()
    assert [r["node_id"] for r in reseeded] == [r["node_id"] for r in base]
    assert not {r["node_id"] for r in other_run} & {r["node_id"] for r in base}


def test_parent_links_and_depths():
    rows = {r["node_id"]: r for r in expand()[0].node_rows()}
    for row in rows.values():
        if row["parent_id"] is None:
            assert (row["path"], row["depth"], row["kind"]) == ("q", 0, "question")
        else:
            parent = rows[row["parent_id"]]
            assert row["path"].rpartition("/")[0] == parent["path"]
            assert row["depth"] == parent["depth"] + 1


@pytest.mark.parametrize("table,method", [("nodes", "node_rows"), ("rollouts", "rollout_rows")])
def test_rows_cast_to_their_table_schema(table, method):
    rows = getattr(expand()[0], method)()
    schema = table_spec(table).schema
    # a rollout's scoring metric is filled in by the expand task once the shard is done
    later = {"rollouts": {"metric", "metric_score"}}.get(table, set())
    assert set(rows[0]) == set(schema.names) - later
    assert pa.Table.from_pylist(rows, schema=schema).num_rows == len(rows)


def test_a_row_holds_the_fields_as_they_are_its_lists_copied_and_parsed_as_json():
    node = Node("n", "r", "q", None, "q", 0, "decex", "question", "Q?", {"b": [1], "a": "x"}, ["p1"])
    row = node.row()
    node.passage_ids.append("p2")
    node.parsed["b"].append(2)
    assert row == {
        **dict(node_id="n", run_id="r", question_id="q", parent_id=None, path="q", depth=0, strategy="decex"),
        **dict(kind="question", text="Q?", parsed='{"a": "x", "b": [1]}', passage_ids=["p1"], llm_call_id=None),
        **dict(is_format_error=False, format_error=None, is_leaf=False, reward=None, visits=None, value=None),
        **dict(advantage=None, is_selected=False),
    }
    rollout = Rollout("o", "r", "q", "n", "t", None, 1.0, 0.5, 2, ["c1"], 7)
    rollout_row = rollout.row()
    rollout.llm_call_ids.append("c2")
    assert rollout_row["llm_call_ids"] == ["c1"] and rollout_row["seed"] == 7 and len(rollout_row) == 11


def test_question_tree_refuses_bad_nodes():
    tree = QuestionTree("r", "q", "decex")
    root = tree.add_root("Q?")
    tree.add_child(root, "s0", "sub_question")
    with pytest.raises(ValueError, match="duplicate node path 'q/s0'"):
        tree.add_child(root, "s0", "sub_question")
    with pytest.raises(ValueError, match="unknown node kind 'guess'"):
        tree.add_child(root, "g0", "guess")
    with pytest.raises(ValueError, match="segment"):
        tree.add_child(root, "a/b", "answer")
    with pytest.raises(ValueError, match="already has a root"):
        tree.add_root("again")


def test_row_tree_orders_children_by_numeric_path():
    tree = QuestionTree("r", "q", "decex")
    root = tree.add_root("Q?")
    for i in (10, 2, 1):
        tree.add_child(root, f"s{i}", "sub_question")
    [(key, rows)] = group_trees(reversed(tree.node_rows())).items()
    assert key == ("r", "q", "decex") and isinstance(rows, RowTree)
    assert [c["path"] for c in rows.children(root.node_id)] == ["q/s1", "q/s2", "q/s10"]
    assert [r["path"] for r in rows.chain(tree.nodes[1].node_id)] == ["q", "q/s10"]
    assert path_key("q/s2") < path_key("q/s10")


def test_group_trees_names_a_missing_column():
    with pytest.raises(ValueError, match=r"nodes row 0 lacks column\(s\) \['kind'\]"):
        group_trees(
            [{"node_id": "n", "run_id": "r", "question_id": "q", "strategy": "s", "parent_id": None, "path": "q"}]
        )


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="DecExConfig.metric"):
        DecExConfig(metric="bleu")
    with pytest.raises(ValueError, match="DecExConfig.k"):
        DecExConfig(k=0)
    with pytest.raises(ValueError, match="DecExConfig.threshold"):
        DecExConfig(threshold=1.5)
