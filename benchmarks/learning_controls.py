"""The controls of ``benchmarks/learning.py``: each method's export with its labels scrambled.

A control trains as its method does on rows whose labels say nothing about their questions, so
it must not show the method's gain: DPO pairs swapped, SFT on pruned chains (the attempts
best-of-N rejected from where they leave the kept ones, or DecEx's kept queries with a wrong
final answer), on the siblings the tree pruned in place of the kept steps, or on kept steps
given another question's completions, tree advantages negated, a GRPO reward weighted -1.
Each function reads the build's export from the run's warehouse (``ROOT/wh``); ``CONTROLS``
gives each control's ``ragfactory train`` arguments: a parquet file of rows written into
``ROOT``, or the run's own export with other settings.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def pruned_rows(root: Path, run_id: str) -> Path:
    """The control's SFT rows: a question's steps that end in a wrong final answer, written as the
    exporter writes kept ones, into a parquet file: R3's first attempt whose answer is wrong (its
    teacher errs on any step: a query about another entity, or a wrong answer after the right
    queries) less the steps a kept attempt holds (``r3_pruned_steps``), or DecEx's best chain
    closed by a pruned wrong answer of its last state. A question with neither is left out."""
    import pyarrow as pa

    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    wh = Warehouse(root / "wh")
    nodes = query(wh, "select * from nodes where run_id = $r", {"r": run_id}).to_pylist()
    questions = query(wh, "select question_id, question, golden_answers from questions").to_pylist()
    gold = {q["question_id"]: q["golden_answers"] for q in questions}
    for node in nodes:
        node["parsed"] = json.loads(node["parsed"]) if isinstance(node["parsed"], str) else node["parsed"]
    pruned = _decex_pruned if nodes and nodes[0]["strategy"] == "decex" else r3_pruned_steps
    return _written(root, "pruned", pa.Table.from_pylist(pruned(nodes, questions, gold)))


def r3_pruned_steps(nodes: list[dict], questions: list[dict], gold: dict) -> list[dict]:
    """The SFT rows of each question's first attempt whose final answer is wrong, less those a kept
    attempt holds as well: an attempt that asked the kept attempt's first query from the same
    prompt shares that step's row with it, a kept label, as a pruned sibling of DecEx's tree
    shares its parent's steps. The control trains on where the rejected attempt went its own way."""
    from ragfactory.tasks.rewards.answer import exact_match
    from ragfactory.tasks.search.r3.exports import r3_sft_examples

    kept = {json.dumps(row["messages"]) for row in r3_sft_examples(nodes, questions)}
    wrong = {}  # question -> its first attempt whose final answer is wrong
    for node in sorted(nodes, key=lambda n: n["path"]):
        if node["kind"] == "answer" and not exact_match(node["parsed"].get("content"), gold[node["question_id"]]):
            wrong.setdefault(node["question_id"], node["parsed"]["attempt"])
    for node in nodes:
        if node["kind"] != "question":
            node["is_selected"] = node["parsed"].get("attempt") == wrong.get(node["question_id"], -1)
    rows = r3_sft_examples(nodes, questions)
    pruned = [row for row in rows if json.dumps(row["messages"]) not in kept]
    print(f"pruned control: {len(pruned)} of {len(rows)} rejected steps differ from every kept step")
    return pruned


def _decex_pruned(nodes: list[dict], questions: list[dict], gold: dict) -> list[dict]:
    from ragfactory.tasks.export.sft import SftConfig
    from ragfactory.tasks.rewards.answer import exact_match
    from ragfactory.tasks.search.decex.exports import sft_examples

    closing = {n["parent_id"] for n in nodes if n["kind"] == "answer" and n["is_selected"]}
    wrong = {}  # the state a kept answer closes -> its first answer that is wrong
    for node in sorted(nodes, key=lambda n: n["path"]):
        if node["kind"] == "answer" and node["parent_id"] in closing:
            if not exact_match(node["parsed"]["answer"], gold[node["question_id"]]):
                wrong.setdefault(node["parent_id"], node["node_id"])
    for node in nodes:
        if node["kind"] == "answer" and node["parent_id"] in wrong:
            node["is_selected"] = node["node_id"] == wrong[node["parent_id"]]
    picked = set(wrong.values())
    kept = {n["question_id"] for n in nodes if n["node_id"] in picked}
    # a wrong answer scores 0: min_reward 0 exports it, as the kept chain's right one is
    return sft_examples([n for n in nodes if n["question_id"] in kept], questions, SftConfig(min_reward=0.0))


def swapped_rows(root: Path, run_id: str) -> Path:
    """The DPO control's pairs: every exported pair with its chosen and rejected steps swapped."""
    pairs = _export(root, "preference_pairs", run_id, "pair_id")
    chosen, rejected = pairs.column("chosen"), pairs.column("rejected")
    pairs = pairs.set_column(pairs.schema.get_field_index("chosen"), "chosen", rejected)
    pairs = pairs.set_column(pairs.schema.get_field_index("rejected"), "rejected", chosen)
    return _written(root, "swapped", pairs)


def rejected_rows(root: Path, run_id: str) -> Path:
    """The pruned-steps control's SFT rows: every kept step's prompt with the sibling the tree
    pruned in its place (``rejected_steps``), so the rows hold the same prompts and a completion
    the values ranked below the kept one."""
    import pyarrow as pa

    steps = _export(root, "sft_examples", run_id, "example_id")
    rows = rejected_steps(steps.to_pylist(), _export(root, "preference_pairs", run_id, "pair_id").to_pylist())
    print(f"rejected control: {len(rows)} of {steps.num_rows} kept steps have a pruned sibling")
    return _written(root, "rejected", pa.Table.from_pylist(rows, schema=steps.schema))


def rejected_steps(steps: list[dict], pairs: list[dict]) -> list[dict]:
    """Each kept step (an SFT row, its last node the step's) with its completion replaced by the
    rejected side of the pair that step won by the widest value gap (ties: the first pair id);
    a step that won no pair is left out."""
    widest: dict[str, dict] = {}
    for pair in sorted(pairs, key=lambda p: (-p["gap"], p["pair_id"])):
        widest.setdefault(pair["chosen_node_id"], pair)
    rows = []
    for step in steps:
        if (pair := widest.get(step["node_ids"][-1])) is not None:
            rows.append({**step, "messages": [*step["messages"][:-1], *pair["rejected"]]})
    return rows


def scrambled_rows(root: Path, run_id: str, same_kind: bool = False) -> Path:
    """The scrambled control's SFT rows: every kept step's prompt with the completion another
    question wrote at the same step (``label_sources``): a question of another kind (the null
    control: no label says anything of its question, not even its answer's kind) or, with
    ``same_kind``, of the same kind (the labels' form kept, their content another's)."""
    import pyarrow as pa

    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    rows = _export(root, "sft_examples", run_id, "question_id, len(node_ids)").to_pylist()
    kinds_sql = (
        "select question_id, any_value(json_extract_string(metadata, '$.relations')) as kind from questions group by 1"
    )
    kinds = {row["question_id"]: row["kind"] for row in query(Warehouse(root / "wh"), kinds_sql).to_pylist()}
    by_question: dict[str, list[dict]] = {}
    for row in rows:
        by_question.setdefault(row["question_id"], []).append(row)
    labels = {q: [step["messages"][-1]["content"] for step in steps] for q, steps in by_question.items()}
    sources = label_sources({q: len(steps) for q, steps in labels.items()}, kinds, same_kind)
    for question, steps in by_question.items():
        for step, content in zip(steps, labels[sources[question]], strict=True):
            step["messages"][-1] = {"role": "assistant", "content": content}
    alike = sum(kinds.get(source) == kinds.get(q) for q, source in sources.items())
    print(f"scrambled control: {alike} of {len(labels)} questions took a label of their own kind")
    return _written(root, "scrambled-kind" if same_kind else "scrambled", pa.Table.from_pylist(rows))


def label_sources(steps: dict[str, int], kinds: dict[str, str | None], same_kind: bool) -> dict[str, str]:
    """For each question (``steps``: its step count), the question of as many steps whose labels
    it takes.

    Across kinds (the default): the questions of a step count sorted by kind, then id, each take
    the labels of the question as many places on as the largest kind has questions. A kind's
    questions are contiguous and at most that many, so none lands on its own kind, unless one
    kind is more than half of them (then some must). With ``same_kind``: the questions of one
    kind and step count rotate by one; a question alone in its kind joins the others left alone.
    """
    by_steps: dict[int, list[str]] = {}
    for question in sorted(steps):
        by_steps.setdefault(steps[question], []).append(question)
    sources: dict[str, str] = {}
    for questions in by_steps.values():
        kind = {q: kinds.get(q) or "" for q in questions}
        if not same_kind:
            order = sorted(questions, key=lambda q: (kind[q], q))
            shift = max(Counter(kind.values()).values()) % len(order) or 1
            sources |= {q: order[(i + shift) % len(order)] for i, q in enumerate(order)}
            continue
        groups: dict[str, list[str]] = {}
        for q in questions:
            groups.setdefault(kind[q], []).append(q)
        alone = [q for group in groups.values() if len(group) == 1 for q in group]
        for ring in [group for group in groups.values() if len(group) > 1] + [alone]:
            sources |= {q: ring[(i + 1) % len(ring)] for i, q in enumerate(ring)}
    return sources


def negated_rows(root: Path, run_id: str) -> Path:
    """The tree-advantage control's trajectories: every step's advantage negated, so a right
    step is pushed down as far as the labels push it up."""
    import pyarrow as pa

    rows = _export(root, "trajectories", run_id, "trajectory_id").to_pylist()
    for row in rows:
        row["advantages"] = [-a for a in row["advantages"]]
        row["step_spans"] = [{**span, "advantage": -span["advantage"]} for span in row["step_spans"]]
    return _written(root, "negated", pa.Table.from_pylist(rows))


def negated_reward(root: Path, run_id: str) -> list[str]:
    """The GRPO control's source: the same prompts, every reward weighted -1."""
    return ["--run-id", run_id, "--trl", "reward_weights=[-1.0]"]


def _export(root: Path, table: str, run_id: str, order: str):
    """The run's rows of one export ``table`` in ``root``'s warehouse, ordered by ``order``."""
    from ragfactory.warehouse.catalog import query
    from ragfactory.warehouse.store import Warehouse

    return query(Warehouse(root / "wh"), f"select * from {table} where run_id = $r order by {order}", {"r": run_id})


def _written(root: Path, name: str, table) -> Path:
    """``table`` written as the control ``name``'s parquet file in ``root``."""
    import pyarrow.parquet as pq

    path = root / f"control-{name}.parquet"
    pq.write_table(table, path)
    return path


def _parquet(rows):
    """The train arguments of a control whose rows ``rows`` writes into a parquet file."""
    return lambda root, run_id: ["--parquet", str(rows(root, run_id))]


# control name -> (ROOT, the build's run id) -> the control's ``ragfactory train`` arguments
CONTROLS = {
    "pruned": _parquet(pruned_rows),
    "scrambled": _parquet(scrambled_rows),
    "scrambled-kind": _parquet(lambda root, run_id: scrambled_rows(root, run_id, same_kind=True)),
    "rejected": _parquet(rejected_rows),
    "swapped": _parquet(swapped_rows),
    "negated": _parquet(negated_rows),
    "negated-reward": negated_reward,
}
