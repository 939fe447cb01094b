"""A hand-built DecEx-RAG tree (§2.3) the export tests share: a root with two valued
sub-questions (the first kept), a kept self-answer, then an answer."""

from __future__ import annotations

from ragfactory.tasks.search.tree import QuestionTree

QUESTIONS = [{"question_id": "q", "question": "Capital of France?"}]


def small_tree(answer_value=1.0, sub_values=(0.76, 0.75), same_text=False, kept_answer=True):
    """Root with two valued sub-questions (the first kept) and a kept self-answer then answer."""
    tree = QuestionTree("r", "q", "decex")
    root = tree.add_root("Capital of France?")
    texts = ["Which country?", "Which country?" if same_text else "Which city?"]
    subs = [
        tree.add_child(
            root,
            f"s{i}",
            "sub_question",
            parsed={"reasoning": "", "question": t},
            value=v,
            visits=2,
            reward=v,
            is_selected=i == 0,
        )
        for i, (t, v) in enumerate(zip(texts, sub_values))
    ]
    state = tree.add_child(subs[0], "w0", "self_answer", parsed={"answer": "France"}, value=1.0, is_selected=True)
    tree.add_child(
        state,
        "a0",
        "answer",
        parsed={"reasoning": "So.", "answer": "Paris"},
        value=answer_value,
        reward=answer_value,
        is_leaf=True,
        is_selected=kept_answer,
    )
    return tree.node_rows()
