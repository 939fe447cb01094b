"""What every evaluation mode shares: its parameters, one model call, one retrieval, the outcome.

A mode answers one question with a ``Generator`` (the batcher, so the questions in flight share
engine calls) and a ``Retriever``, and returns an ``Outcome``: the prediction, how many model
calls (steps) and retrievals it took, the llm call ids it used, and every format error met on
the way. A malformed output is data, never an exception: the outcome records it and the mode
goes on or ends with an empty prediction. Requests are seeded from (seed, question, mode and
round), so a question gets the same completions whatever shares its batch, and a rerun is
answered from the call cache.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ragfactory.tasks.llm.seeds import derive_seed
from ragfactory.tasks.llm.types import Completion, Generator, Grammar, Message, Request, Sampling
from ragfactory.tasks.prompts.loader import load_grammar
from ragfactory.tasks.retrieval.types import Hit
from ragfactory.tasks.search.common import sample_n
from ragfactory.tasks.search.parsing import Parsed


@dataclass(frozen=True)
class InferenceConfig:
    """How a model answers during evaluation; defaults follow ReasonRAG where it says."""

    # Algorithm 1's N. Table 1 counts up to 5 iterations and Figure 6 up to 5 retrievals; each
    # retrieval costs a Reasoning and a Grounding round, plus one round to answer: 2 * 5 + 1.
    max_rounds: int = 11
    top_k: int = 3  # E.1: "consistently retrieving the top 3 documents"
    max_tokens: int = 256  # a reasoning round is a few sentences ending in one tag
    temperature: float = 0.0  # greedy: an evaluation is repeatable and replays from the cache
    # Figure 12's {answer_format}; the authors' released pipeline fills in the word "answer".
    answer_format: str = "answer"
    seed: int = 0

    def __post_init__(self):
        for name in ("max_rounds", "top_k", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"InferenceConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.temperature < 0:
            raise ValueError(f"InferenceConfig.temperature must be >= 0, got {self.temperature}")


# The prompts whose output grammars hold each built-in evaluation mode's answers; a strategy's
# ``evaluation`` module declares those of the modes it adds as ``GRAMMARS`` (``mode_grammars``).
MODE_GRAMMARS = {
    "direct": ("flashrag_direct",),
    "rag": ("flashrag_rag",),
}


def mode_grammars() -> dict[str, tuple[str, ...]]:
    """The output grammars of every evaluation mode: the built-ins' and the strategies'."""
    from ragfactory.tasks.search.registry import STRATEGIES

    return {**STRATEGIES.declared("evaluation", "GRAMMARS"), **MODE_GRAMMARS}


def output_grammar(prompt: str, max_tokens: int) -> Grammar:
    return load_grammar(prompt, max_tokens, "evaluation max_tokens")


def check_max_tokens(modes: Iterable[str], max_tokens: int) -> None:
    """Raise ``GrammarError`` (naming the setting and the smallest that fits) when ``max_tokens``
    cannot hold a mode's output grammar: refused with the request, not by every question's call."""
    grammars = mode_grammars()
    for mode in modes:
        for prompt in grammars.get(mode, ()):
            output_grammar(prompt, max_tokens)


@dataclass(frozen=True)
class EvalQuestion:
    """One question to answer and the golden answers it is scored against."""

    question_id: str
    question: str
    golden_answers: tuple[str, ...]

    @classmethod
    def from_row(cls, row: Mapping) -> EvalQuestion:
        """From a ``questions`` row; an error names the row and the missing field."""
        for name in ("question_id", "question", "golden_answers"):
            if row.get(name) is None:
                raise ValueError(f"question row {row.get('question_id')!r} has no {name!r}")
        golden = row["golden_answers"]
        golden = (golden,) if isinstance(golden, str) else tuple(str(g) for g in golden)
        return cls(str(row["question_id"]), str(row["question"]), golden)


@dataclass
class Outcome:
    """How one mode answered one question."""

    prediction: str = ""
    n_steps: int = 0  # model calls made
    n_retrievals: int = 0  # retriever calls made
    call_ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def format_error(self) -> str | None:
        return "; ".join(self.errors) or None

    def record(self, completion: Completion) -> str:
        """Count one model call and return its text."""
        self.n_steps += 1
        self.call_ids.append(completion.call_id)
        return completion.text


async def ask(
    generator: Generator,
    config: InferenceConfig,
    question_id: str,
    path: str,
    system: str | None,
    user: str,
    stop: tuple[str, ...] = (),
    grammar: str | None = None,
) -> Completion:
    """One completion of a system + user prompt (user alone when ``system`` is None), seeded by
    the question and ``path``.

    ``grammar`` names the prompt whose output grammar holds the answer's form.
    """
    messages = ((Message("system", system),) if system is not None else ()) + (Message("user", user),)
    return await ask_chat(generator, config, question_id, path, messages, stop, grammar)


async def ask_chat(
    generator: Generator,
    config: InferenceConfig,
    question_id: str,
    path: str,
    messages: Sequence[Message],
    stop: tuple[str, ...] = (),
    grammar: str | None = None,
) -> Completion:
    """One completion continuing the chat ``messages`` (``ask``'s, for a mode whose turns are a
    chat's, as a search's state is)."""
    sampling = Sampling(
        temperature=config.temperature,
        max_tokens=config.max_tokens,
        stop=stop,
        seed=derive_seed(config.seed, question_id, path),
        grammar=output_grammar(grammar, config.max_tokens) if grammar else None,
    )
    tags = (("question_id", question_id), ("path", path))
    return (await sample_n(generator, Request(tuple(messages), sampling, "policy", tags)))[0]


def render_flashrag(hits: Sequence[Hit]) -> str:
    """Documents as FlashRAG's standard-RAG prompt numbers them."""
    return "\n".join(f"Doc {i}(Title: {hit.title}) {hit.text}" for i, hit in enumerate(hits, 1))


async def step_loop(
    config: InferenceConfig,
    ask_turn: Callable[[int], Awaitable[Completion]],
    read: Callable[[str], Parsed],
    search: Callable[[str, Parsed], Awaitable[None]],
    answer_field: str = "answer",
) -> Outcome:
    """The loop of a strategy's step mode: turn ``number`` is ``ask_turn(number)``'s completion,
    ``read`` parses it; a format error ends the loop with no prediction (as a trajectory ends), an
    ``answer`` action ends it with its ``answer_field``, and anything else is a search that
    ``search(text, turn)`` retrieves for and adds to the state the next turn is asked from. At
    most ``config.max_rounds`` turns."""
    outcome = Outcome()
    for number in range(config.max_rounds):
        text = outcome.record(await ask_turn(number))
        turn = read(text)
        if turn.error:
            outcome.errors.append(f"step {number + 1}: {turn.error}")
            return outcome
        if turn.get("action") == "answer":
            outcome.prediction = turn.get(answer_field) or ""
            return outcome
        await search(text, turn)
        outcome.n_retrievals += 1
    outcome.errors.append(f"no final answer in {config.max_rounds} steps")
    return outcome
