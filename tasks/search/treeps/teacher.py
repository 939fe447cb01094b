"""A teacher for TreePS-RAG's search on the seeded world: steps the world's oracle writes.

TreePS-RAG (§2.1–2.3) samples a policy's ReAct steps into a tree, values each node by the
outcomes of the leaves below it and trains every step's tokens with its node's advantage. With
the embedded 135M model as the policy a tree holds almost no right leaf, so every advantage is
about 0. On the seeded world (docs/world.md) this engine plays a stronger policy: it reads a
state's chat (the step prompt with the question, then the steps so far and the ``<information>``
each search returned, ``steps.py``'s layout) and writes the step the question's gold
decomposition calls for:

- ``<reason>…</reason>`` then ``<search>`` the next sub-question (its ``#n`` filled in from what
  the documents said), while one is left and every earlier one was answered;
- else ``<answer>`` what the documents give, once every sub-question is answered.

It never sees a gold answer. A sample at temperature ``t`` errs with probability ``t``, as a
small model does: it answers at once with a name no passage holds (or another year), worded as
a guess, instead of searching or of the documents' answer. So a state's siblings differ: a
search's subtree is worth about 1 − t, a guess 0, and the advantages (Eq. 3's A(n), the global
part V(n) − V(root) and the local V(n) − V(p(n))) are positive on searches and on right answers
and negative on guesses. A right step opens "<reason>I", a guess "<reason>It": they differ from
the reasoning's first token.

The engine is ``backend: "world:treeps-teacher"`` with ``options: {world: <folder>}``; the
role's model is unused. It answers TreePS-RAG step chats only (either prompt, ``treeps_step``
with ``<reason>`` or ``treeps_search_r1`` with ``<think>``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

from ragfactory.tasks.data.world.oracle import final_answer, read_hits, resolve
from ragfactory.tasks.data.world.teaching import Gold, Teacher, errs, world_option, wrong_answer
from ragfactory.tasks.llm.registry import register_backend
from ragfactory.tasks.llm.types import Completion, Message, Request
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.parsing import parse_rollout_turn

TEACHER = "world:treeps-teacher"
TEACHER_VERSION = 1  # bump when the same chat would get another step
_QUESTION = " Question: "
_TAGS = {"<think>": "think", "<reason>": "reason"}  # the prompt's example tag -> its reasoning tag
_DOC = re.compile(r"(?:^|<information>)Doc \d+\(Title: (.*?)\) (.*)$", re.MULTILINE)


def read_chat(messages: Sequence[Message]) -> tuple[str, str, list[tuple[str, list[Hit]]]]:
    """(reasoning tag, question, [(query, documents), ...] of the searches so far) of a TreePS
    state's chat."""
    prompt = messages[0].content if messages and messages[0].role == "user" else ""
    tag = next((t for marker, t in _TAGS.items() if marker in prompt), None)
    if tag is None or _QUESTION not in prompt:
        raise ValueError("the world's treeps teacher answers TreePS-RAG step chats only: no step prompt first")
    searches = []
    for step, observation in zip(messages[1::2], messages[2::2]):
        query = parse_rollout_turn(step.content).get("query") or ""
        searches.append((query, [Hit("", t, x, 0.0) for t, x in _DOC.findall(observation.content)]))
    return tag, prompt.rpartition(_QUESTION)[2].strip(), searches


class TreePSTeacher(Teacher):
    """A ``Backend`` whose every completion is the oracle's next TreePS step (module docstring)."""

    KIND, VERSION = "treeps", TEACHER_VERSION

    def _step(self, request: Request, rng: random.Random) -> Completion:
        tag, question, searches = read_chat(request.messages)
        if question not in self.gold:
            raise ValueError(f"the world's treeps teacher has no question {question[:80]!r} in {self.folder}")
        text = self.write(self.gold[question], searches, errs(request.sampling.temperature, rng), rng)
        text = text.replace("<reason>", f"<{tag}>").replace("</reason>", f"</{tag}>")
        prompt_words = sum(len(m.content.split()) for m in request.messages)
        return Completion(text, "stop", prompt_words, len(text.split()))

    @staticmethod
    def write(gold: Gold, searches: list[tuple[str, list[Hit]]], wrong: bool, rng: random.Random) -> str:
        """The step after ``searches``: the next search, the documents' answer, or (``wrong``) a
        guess."""
        answers = [read_hits(docs, query, rel) for (query, docs), rel in zip(searches, gold.relations)]
        searching = len(searches) < len(gold.steps) and None not in answers
        if searching and not wrong:
            query = resolve(gold.steps[len(searches)], answers)
            return f"<reason>I need to find: {query}</reason>\n<search>{query}</search>"
        right = None if searching or None in answers else final_answer(gold.rung, gold.steps, answers)
        if right is not None and not wrong:
            return f"<reason>I found that the answer is {right}.</reason>\n<answer>{right}</answer>"
        guess = wrong_answer(right, rng)
        return f"<reason>It is probably {guess}.</reason>\n<answer>{guess}</answer>"


def make_teacher(role, cache_dir: Path | None) -> TreePSTeacher:
    """The engine ``backend: "world:treeps-teacher"`` names; ``options: {world: <folder>}``."""
    return TreePSTeacher(world_option(TEACHER, role.options))


register_backend(TEACHER, make_teacher, replace=True)
