"""APEX-Searcher execution of one plan: Algorithm 2 per sub-question, then synthesis (§2.4).

For each sub-question q_i in order: its ``#n`` references are replaced by the answers of steps n
(Reference Resolution, §2.4.2); the knowledge sufficiency check decides between answering from
the accumulated knowledge K and retrieving; retrieval runs up to H hops, each a query (the first
hop's prompt, or from the second on a prompt that lists the earlier queries and asks for a
different one), a search whose documents already seen for q_i are filtered out (the loop ends
when none is new), and, from the second hop on, a continuation decision over the documents
gathered so far; the sub-answer is written from K and those documents, and (q_i, a_i) joins K.
The final answer is synthesised from K (§2.4.3). Its confidence follows the three criteria the
paper names, each scored 0 or 1 and averaged: the answer is specific (non-empty, at most
``SPECIFIC_WORDS`` words), the evidence is complete (every sub-question got an answer), and it
carries no linguistic uncertainty marker.

The prompts (``apex_*.txt``) are written from Appendix E's descriptions: adaptive retrieval
decision (``sufficiency``), answer from accumulated knowledge, continue retrieval decision, and
query generation for the first and later hops; the sub-answer and synthesis prompts follow
§2.4.2-2.4.3. A decision without a readable ``<decision>`` is a format error that takes the
cautious default (retrieve; stop retrieving), so a weak model still finishes its run.

One run is one chain of ``nodes`` under its plan node: sub_question -> retrieval (sufficiency)
-> [self_answer | sub_query, (retrieval (continue), sub_query)*, evidence (sub-answer)] -> next
sub_question ... -> answer. Every model-written node names its ``call`` in ``parsed``; ``Trace``
renders each call's prompt from the chain so far, so the executor's SFT export (tasks/export/
apex.py) replays the chain to the very prompts the run used.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.types import Generator, Grammar, Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar, render_prompt
from ragfactory.tasks.retrieval.types import Hit, Retriever
from ragfactory.tasks.rewards.answer import METRICS
from ragfactory.tasks.search.apex.plan_rewrite import REFERENCE, references
from ragfactory.tasks.search.common import hit_record, sample_n, search_batch
from ragfactory.tasks.search.decex.history import render_documents
from ragfactory.tasks.search.parsing import Parsed, find_tag, parse_query, parse_tagged
from ragfactory.tasks.search.tree import Node, QuestionTree

# call: (node kind, closing tag of its output, prompt)
CALLS: Mapping[str, tuple[str, str, str]] = {
    "sufficiency": ("retrieval", "</decision>", "apex_sufficiency"),
    "knowledge_answer": ("self_answer", "</answer>", "apex_knowledge_answer"),
    "continue": ("retrieval", "</decision>", "apex_continue"),
    "query_first": ("sub_query", "</query>", "apex_query_first"),
    "query_next": ("sub_query", "</query>", "apex_query_next"),
    "sub_answer": ("evidence", "</answer>", "apex_sub_answer"),
    "synthesis": ("answer", "</answer>", "apex_synthesis"),
}
DECISIONS = {"sufficiency": (("answer", "retrieve"), "retrieve"), "continue": (("continue", "stop"), "stop")}
NONE = "None"
SPECIFIC_WORDS = 10  # a factoid answer (C.1: "short, factoid entities") fits in ten words
UNCERTAIN = re.compile(
    r"\b(unknown|unsure|not sure|uncertain|unclear|maybe|perhaps|possibly|probably|cannot|can't|"
    r"don't know|no information|not (?:mentioned|provided|available|stated))\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ExecSpec:
    """How the Execution Agent runs: hops, documents, decoding and role."""

    max_hops: int
    top_k: int
    temperature: float
    max_tokens: int
    role: str
    metric: str

    @property
    def grammars(self) -> dict[str, Grammar]:
        """call -> the output grammar of its prompt, fitted to ``max_tokens``."""
        field = "ApexConfig.exec_max_tokens"
        return {call: load_grammar(prompt, self.max_tokens, field) for call, (_, _, prompt) in CALLS.items()}


@dataclass
class Trace:
    """The executor's state: the knowledge base K and the current sub-question's retrieval."""

    question: str
    knowledge: list[tuple[str, str | None]] = field(default_factory=list)
    sub_question: str = ""
    queries: list[str] = field(default_factory=list)
    documents: list[Hit] = field(default_factory=list)

    def open(self, sub_question: str) -> None:
        self.sub_question, self.queries, self.documents = sub_question, [], []

    def prompt(self, call: str, parsed: Mapping[str, Any]) -> str:
        """The prompt of ``call`` in this state; ``parsed`` gives the hop of a continue decision."""
        name = CALLS[call][2]
        if call == "synthesis":
            return render_prompt(name, question=self.question, knowledge=self.render_knowledge())
        values = {"sub_question": self.sub_question, "knowledge": self.render_knowledge()}
        if call in ("continue", "query_next", "sub_answer"):
            values["documents"] = render_documents(self.documents) or NONE
        if call == "continue":
            values.update(hops=str(parsed["hop"] - 1), max_hops=str(parsed["max_hops"]))
        if call == "query_next":
            values["queries"] = "\n".join(f"{i}. {q}" for i, q in enumerate(self.queries, 1)) or NONE
        return render_prompt(name, **values)

    def apply(self, call: str, parsed: Mapping[str, Any]) -> None:
        """Take in what a call's node says: a query's hits, or a sub-answer closing the step."""
        if call in ("query_first", "query_next") and parsed.get("query"):
            self.queries.append(parsed["query"])
            hits = parsed.get("hits") or []
            self.documents.extend(Hit(h["passage_id"], h["title"], h["text"], float(h["score"])) for h in hits)
        elif call in ("knowledge_answer", "sub_answer"):
            self.knowledge.append((self.sub_question, parsed.get("answer")))

    def render_knowledge(self) -> str:
        lines = [
            f"Sub-question {i}: {q}\nAnswer {i}: {a or 'no answer'}" for i, (q, a) in enumerate(self.knowledge, start=1)
        ]
        return "\n".join(lines) or NONE


def replay(question: str, chain: Sequence[Mapping[str, Any]]) -> Iterator[tuple[Mapping[str, Any], str]]:
    """(node row, prompt it answered) for every model-written node of an execution chain."""
    trace = Trace(question)
    for row in chain:
        parsed = row["parsed"]
        if row["kind"] == "sub_question":
            trace.open(parsed["resolved"])
        elif parsed.get("call") in CALLS:
            yield row, trace.prompt(parsed["call"], parsed)
            trace.apply(parsed["call"], parsed)


def resolve_references(sub_question: str, answers: Sequence[str | None]) -> str:
    """``#n`` replaced by the answer of step n; a reference without an answer stays as written.

    >>> resolve_references("Who is the mother of #1?", ["Steven Spielberg"])
    'Who is the mother of Steven Spielberg?'
    """

    def answer(match: re.Match) -> str:
        n = int(match[1])
        return answers[n - 1] if 1 <= n <= len(answers) and answers[n - 1] else match[0]

    return REFERENCE.sub(answer, sub_question)


def parse_decision(text: str | None, call: str) -> Parsed:
    """A ``<decision>`` among the call's options; unreadable: the cautious default and an error."""
    options, default = DECISIONS[call]
    content = find_tag(text, "decision")
    words = re.findall(r"[a-z]+", (content or "").lower())
    chosen = next((w for w in words if w in options), None)
    if chosen is not None:
        return Parsed({"decision": chosen})
    error = "missing <decision>" if content is None else f"<decision> is not one of {list(options)}"
    return Parsed({"decision": default, "decision_text": content}, error)


def parse_call(call: str, text: str) -> Parsed:
    if call in DECISIONS:
        return parse_decision(text, call)
    if call in ("query_first", "query_next"):
        return parse_query(text)
    return parse_tagged(text, "answer")


def confidence(answer: str | None, knowledge: Sequence[tuple[str, str | None]]) -> dict[str, float]:
    """The final answer's confidence and its three parts (§2.4.3), each 0 or 1."""
    words = (answer or "").split()
    parts = {
        "specificity": float(0 < len(words) <= SPECIFIC_WORDS),
        "evidence": float(bool(knowledge) and all(a and not UNCERTAIN.search(a) for _, a in knowledge)),
        "certainty": float(bool(words) and not UNCERTAIN.search(answer or "")),
    }
    return {"confidence": sum(parts.values()) / len(parts), **parts}


@dataclass
class Execution:
    """What one question's runs share: the tree, golden answers, services and seeds."""

    tree: QuestionTree
    golden: list[str]
    generator: Generator
    retriever: Retriever
    spec: ExecSpec
    run_seed: int

    async def call(self, trace: Trace, parent: Node, segment: str, call: str, **extra: Any) -> Node:
        """One executor call as a node under ``parent``; the trace takes in what it says."""
        path = f"{parent.path}/{segment}"
        spec = self.spec
        seed = derive_seed(self.run_seed, self.tree.question_id, path)
        sampling = Sampling(
            temperature=spec.temperature,
            max_tokens=spec.max_tokens,
            stop=(CALLS[call][1],),
            seed=seed,
            grammar=spec.grammars[call],
        )
        tags = (("question_id", self.tree.question_id), ("path", path))
        request = Request((Message("user", trace.prompt(call, extra)),), sampling, spec.role, tags)
        [completion] = await sample_n(self.generator, request)
        parsed = parse_call(call, completion.text)
        node = self.tree.add_child(
            parent,
            segment,
            CALLS[call][0],
            completion.text,
            parsed={"call": call, **extra, **parsed.fields},
            llm_call_id=completion.call_id or None,
            is_format_error=parsed.error is not None,
            format_error=parsed.error,
            is_selected=True,
        )
        if call not in ("query_first", "query_next"):  # a query is taken in once it has its hits
            trace.apply(call, node.parsed)
        return node


async def execute_plan(run: Execution, parent: Node, sub_questions: Sequence[str], question: str) -> Node:
    """Run a plan's sub-questions under ``parent`` and synthesise; the final ``answer`` node."""
    trace = Trace(question)
    node, answers = parent, []
    for i, planned in enumerate(sub_questions, start=1):
        resolved = resolve_references(planned, answers)
        node = run.tree.add_child(
            node,
            f"s{i}",
            "sub_question",
            resolved,
            is_selected=True,
            parsed={"step": i, "question": planned, "resolved": resolved, "depends_on": references(planned)},
        )
        trace.open(resolved)
        node = await _answer_sub_question(run, trace, node)
        answers.append(node.parsed.get("answer"))
    return await _synthesize(run, trace, node)


async def _answer_sub_question(run: Execution, trace: Trace, sub_question: Node) -> Node:
    check = await run.call(trace, sub_question, "c", "sufficiency")
    if check.parsed["decision"] == "answer":
        return await run.call(trace, check, "w", "knowledge_answer")
    last = await _retrieve(run, trace, check)
    answer = await run.call(trace, last, "v", "sub_answer")
    answer.passage_ids = [hit.passage_id for hit in trace.documents]
    return answer


async def _retrieve(run: Execution, trace: Trace, node: Node) -> Node:
    """Up to H hops of query, de-duplicated retrieval and continuation decision (Algorithm 2)."""
    spec, seen = run.spec, set()
    for hop in range(1, spec.max_hops + 1):
        if hop > 1 and trace.documents:
            node = await run.call(trace, node, f"d{hop}", "continue", hop=hop, max_hops=spec.max_hops)
            if node.parsed["decision"] == "stop":
                break
        call = "query_first" if hop == 1 else "query_next"
        node = await run.call(trace, node, f"e{hop}", call, hop=hop)
        query = node.parsed.get("query")
        if not query:
            break
        [hits] = await search_batch(run.retriever, [query], spec.top_k + len(seen))
        new = [hit for hit in hits if hit.passage_id not in seen][: spec.top_k]
        node.passage_ids = [hit.passage_id for hit in new]
        node.parsed["hits"] = [hit_record(hit) for hit in new]
        trace.apply(call, node.parsed)
        if not new:
            node.parsed["no_new_documents"] = True
            break
        seen.update(node.passage_ids)
    return node


async def _synthesize(run: Execution, trace: Trace, last: Node) -> Node:
    node = await run.call(trace, last, "a", "synthesis")
    answer = node.parsed.get("answer")
    scores = {name: metric(answer, run.golden) for name, metric in METRICS.items()}
    node.parsed.update(scores)
    node.parsed.update(confidence(answer, trace.knowledge))
    node.is_leaf, node.visits = True, 1
    node.reward = node.value = scores[run.spec.metric]
    return node
