"""Agentic GRPO: the policy searches while it trains (Search-R1's rollout; TreePS-RAG §2.3, online).

TRL's ``GRPOTrainer`` samples one completion per prompt and scores it. Here a completion is a
multi-turn rollout against the build's own retriever, through TRL's ``rollout_func`` hook:

1. The prompt (the ``grpo_prompts`` user turn: Search-R1's template, ``<search>`` and
   ``<answer>``) is rendered with the chat template and a generation prompt.
2. A turn samples from the current policy until ``</search>``, ``</answer>``, the end of
   sequence or the row's remaining budget of ``max_completion_length`` tokens (temperature,
   top-p and top-k from the GRPO config).
3. A turn whose first action is ``<search> q </search>`` (``parse_rollout_turn``, as TreePS-RAG reads
   a step) retrieves the top-``top_k`` passages for q; the observation
   ``\\n\\n<information>Doc 1(Title: …) …</information>\\n\\n`` (``tasks/search/parsing.py``,
   Search-R1's layout, which the trees and the ``trajectories`` export use) is appended to the completion with mask 0. Any
   other turn ends the rollout; so do ``max_turns`` turns and a spent budget (an observation is
   cut to the budget that is left).
4. The rollout returns ``prompt_ids``, ``completion_ids`` (model and observation tokens in
   order), ``env_mask`` (1 on the model's tokens, 0 on the observations': TRL multiplies it into
   the loss mask, so retrieved text gets no gradient) and ``retrieved`` (per completion, the hits
   of each search), which TRL forwards to the reward functions by name.

The reward functions are those the run names (``tasks/training/rewards.py``): the stock ones
(``answer_em``, ``answer_f1``, ``format``), ``prm`` and those the strategies declare, such as
R3-RAG's judged ``r3_process``. Every rollout is logged, and appended to
``rollouts.jsonl`` in the output folder with its queries and retrieved passages.

Why ``rollout_func`` and not TRL's ``tools`` / ``environment_factory``: those call tools through
the chat template's tool-calling schema, which the prompts and the trees here do not use (and
which SmolLM2-135M was never tuned on); Search-R1's tags are what the build's data teaches. The
blind spot: ``logprobs`` are not returned, so TRL computes the old policy's log-probabilities
itself; with vLLM generation (CUDA workers) the rollout still runs through transformers'
``generate`` on the training model, so it is correct but not fast there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ragfactory.tasks.retrieval.types import Retriever
from ragfactory.tasks.search.common import hit_record
from ragfactory.tasks.search.parsing import ROLLOUT_STOP, information, parse_rollout_turn
from ragfactory.tasks.training.methods import MethodContext, check_options

ROLLOUT_LOG = "rollouts.jsonl"


@dataclass(frozen=True)
class AgenticOptions:
    """Settings of the rollout; defaults with their reasons."""

    max_turns: int = 4  # Search-R1 trains with at most 4 turns ("max_turns=4" in its scripts)
    top_k: int = 3  # passages per search, as TreePS-RAG (C.3) and Search-R1 retrieve
    retriever: str | None = None  # bm25 or dense; None: the build's default retriever
    sources: tuple[str, ...] = ()  # passage sources; empty: the build's inputs
    # Hold each turn to a step grammar (e.g. the one the build's TreePS-RAG trees were grown
    # with); None samples freely, as the papers do. A 135M policy writes no tags when
    # free (0 of 8 rollouts searched), so it learns nothing about searching without it. Masked
    # sampling is not the policy's own distribution: TRL's ratio is taken on unmasked
    # log-probabilities, as with vLLM's structured outputs.
    grammar: str | None = None
    turn_tokens: int = 128  # the grammar's budget for one turn (its free text is fitted to it)

    def __post_init__(self):
        for name in ("max_turns", "top_k", "turn_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"grpo-agentic: {name} must be >= 1, got {getattr(self, name)}")

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> AgenticOptions:
        """The rollout's settings from ``TrainConfig.options`` (the rewards read the others)."""
        check_options("grpo-agentic", options)
        known = {f.name for f in fields(cls)}
        return cls(**{k: tuple(v) if k == "sources" else v for k, v in options.items() if k in known})


@dataclass
class Rollout:
    """One completion as it grows: token ids, the loss mask and what each search found."""

    prompt_ids: list[int]
    ids: list[int]
    mask: list[int]
    queries: list[str]
    hits: list[list[dict]]
    done: bool = False

    def add(self, ids: Sequence[int], mask: int) -> None:
        self.ids += list(ids)
        self.mask += [mask] * len(ids)


def turn_end(tokenizer, new_ids: Sequence[int], eos_ids: set[int]) -> int:
    """How many of ``new_ids`` the turn keeps: through the first stop string or end of sequence.

    Batched ``generate`` pads a row that stopped early; the pads are not the model's tokens."""
    for k, token in enumerate(new_ids):
        if token in eos_ids or token_text_has_stop(tokenizer, new_ids[: k + 1]):
            return k + 1
    return len(new_ids)


def token_text_has_stop(tokenizer, ids: Sequence[int]) -> bool:
    tail = tokenizer.decode(ids[-8:], skip_special_tokens=False)
    return any(stop in tail for stop in ROLLOUT_STOP)


class GrammarProcessor:
    """A ``generate`` logits processor holding every row of a batch to one grammar (llguidance
    masks, ``tasks/llm/structured.py``); a row whose grammar has finished is left alone (its end
    is found by ``turn_end``)."""

    def __init__(self, masks, grammar, rows: int):
        self.masks, self.matchers, self.started = masks, [masks.matcher(grammar) for _ in range(rows)], False

    def __call__(self, input_ids, scores):
        if self.started:
            for matcher, token in zip(self.matchers, input_ids[:, -1].tolist()):
                if not matcher.is_stopped():
                    matcher.consume_token(token)
        self.started = True
        live = [i for i, m in enumerate(self.matchers) if not m.is_stopped() and not m.is_error()]
        scores = scores.clone()
        self.masks.mask_logits(scores, live, [self.matchers[i] for i in live])
        return scores


def generate_turn(
    model,
    tokenizer,
    rollouts: list[Rollout],
    budget: int,
    sampling: dict[str, Any],
    eos_ids: set[int],
    grammar: tuple[Any, Any] | None = None,
) -> list[list[int]]:
    """One sampled turn for each rollout (left-padded batch); the new ids of each, cut at its end.
    ``grammar`` is (``GrammarMasks``, ``Grammar``) to hold the turn to."""
    import torch
    from transformers import LogitsProcessorList

    rows = [r.prompt_ids + r.ids for r in rollouts]
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    attention = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    room = max(budget - len(r.ids) for r in rollouts)
    device = next(model.parameters()).device
    processors = LogitsProcessorList([GrammarProcessor(*grammar, len(rows))] if grammar else [])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=room,
            do_sample=True,
            stop_strings=list(ROLLOUT_STOP),
            tokenizer=tokenizer,
            pad_token_id=pad,
            logits_processor=processors,
            **sampling,
        )
    new = []
    for rollout, row in zip(rollouts, out[:, width:].tolist()):
        row = row[: budget - len(rollout.ids)]
        new.append(row[: turn_end(tokenizer, row, eos_ids)])
    return new


def observe(
    rollout: Rollout,
    turn_ids: list[int],
    tokenizer,
    retriever: Retriever,
    options: AgenticOptions,
    budget: int,
    eos_ids: set[int],
) -> None:
    """Add a turn to the rollout; a search adds its observation (mask 0), anything else ends it."""
    rollout.add(turn_ids, 1)
    text = tokenizer.decode(turn_ids, skip_special_tokens=True)
    parsed = parse_rollout_turn(text)
    ended = not turn_ids or turn_ids[-1] in eos_ids or len(rollout.ids) >= budget
    if parsed.get("action") != "search" or not parsed.get("query") or ended:
        rollout.done = True
        return
    query = parsed.get("query")
    [hits] = retriever.search([query], options.top_k)
    records = [hit_record(h) for h in hits]
    rollout.queries.append(query)
    rollout.hits.append(records)
    observation = tokenizer(f"\n\n{information(records)}\n\n", add_special_tokens=False)["input_ids"]
    rollout.add(observation[: budget - len(rollout.ids)], 0)
    rollout.done = len(rollout.ids) >= budget


def prompt_ids(tokenizer, prompt) -> list[int]:
    """A conversational prompt (or plain text) as the policy sees it, with the generation prompt."""
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    text = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def eos_ids(model, tokenizer) -> set[int]:
    """The tokens that end a sequence: the tokenizer's and the generation config's."""
    ids = model.generation_config.eos_token_id
    return {tokenizer.eos_token_id} | set(ids if isinstance(ids, list) else [] if ids is None else [ids])


def run_rollouts(
    model,
    tokenizer,
    prompts: Sequence,
    retriever: Retriever,
    options: AgenticOptions,
    budget: int,
    sampling: dict[str, Any],
    grammar: tuple[Any, Any] | None = None,
) -> list[Rollout]:
    """Steps 1-3 of the module docstring for a batch of prompts (one rollout each); ``grammar``
    as ``generate_turn`` takes it."""
    eos = eos_ids(model, tokenizer)
    rollouts = [Rollout(prompt_ids(tokenizer, p), [], [], [], []) for p in prompts]
    for _ in range(options.max_turns):
        active = [r for r in rollouts if not r.done]
        if not active:
            break
        for rollout, turn in zip(active, generate_turn(model, tokenizer, active, budget, sampling, eos, grammar)):
            observe(rollout, turn, tokenizer, retriever, options, budget, eos)
    return rollouts


class AgenticRollout:
    """TRL's ``rollout_func``: ``(prompts, trainer) -> dict`` (module docstring, step 4)."""

    def __init__(
        self,
        retriever: Retriever,
        options: AgenticOptions,
        output_dir: str,
        logger: logging.Logger | logging.LoggerAdapter,
    ):
        self.retriever, self.options, self.logger = retriever, options, logger
        self.log_path = Path(output_dir) / ROLLOUT_LOG
        self.grammar = None  # (masks, grammar), built on the first rollout when options.grammar is set

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        args = trainer.args
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        sampling = {"temperature": args.temperature, "top_p": args.top_p}
        if args.top_k:
            sampling["top_k"] = args.top_k
        was_training = model.training
        model.eval()
        try:
            rollouts = run_rollouts(
                model,
                tokenizer,
                prompts,
                self.retriever,
                self.options,
                args.max_completion_length,
                sampling,
                self.turn_grammar(tokenizer),
            )
        finally:
            model.train(was_training)
        self.record(rollouts, tokenizer, trainer.state.global_step)
        return {
            "prompt_ids": [r.prompt_ids for r in rollouts],
            "completion_ids": [r.ids for r in rollouts],
            "logprobs": None,
            "env_mask": [r.mask for r in rollouts],
            "retrieved": [r.hits for r in rollouts],
        }

    def turn_grammar(self, tokenizer) -> tuple[Any, Any] | None:
        """llguidance's masks for the tokenizer and the turn grammar, made once per trainer."""
        if self.options.grammar is not None and self.grammar is None:
            from ragfactory.tasks.llm.structured import GrammarMasks
            from ragfactory.tasks.prompts.loader import load_grammar

            self.grammar = (
                GrammarMasks(tokenizer),
                load_grammar(self.options.grammar, self.options.turn_tokens, "turn_tokens"),
            )
        return self.grammar

    def record(self, rollouts: list[Rollout], tokenizer, step: int) -> None:
        """One log line and one ``rollouts.jsonl`` line per rollout."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as out:
            for rollout in rollouts:
                line = {
                    "step": step,
                    "completion": tokenizer.decode(rollout.ids, skip_special_tokens=True),
                    "queries": rollout.queries,
                    "retrieved": rollout.hits,
                    "model_tokens": sum(rollout.mask),
                    "observation_tokens": len(rollout.mask) - sum(rollout.mask),
                }
                out.write(json.dumps(line, ensure_ascii=False) + "\n")
                self.logger.info(
                    "grpo-agentic step %d: %d searches %s, %d model / %d observation tokens",
                    step,
                    len(rollout.queries),
                    rollout.queries,
                    line["model_tokens"],
                    line["observation_tokens"],
                )


def build_retriever(ctx: MethodContext, options: AgenticOptions) -> Retriever:
    """The build's retriever over the build's passages (or the options' sources and kind)."""
    from ragfactory.tasks.retrieval.config import RetrievalConfig
    from ragfactory.tasks.retrieval.corpus import open_retriever

    if ctx.warehouse is None:
        raise ValueError("grpo-agentic needs a warehouse to retrieve from")
    config, sources = RetrievalConfig(), list(options.sources)
    if ctx.run_id is not None:
        run = ctx.build_run()
        if run is None:
            raise ValueError(f"grpo-agentic: build run {ctx.run_id!r} is not in the runs table")
        config = RetrievalConfig.model_validate(run["config"].get("retrieval") or {})
        sources = sources or sorted({i["dataset"] for i in run["inputs"] or []})
    if not sources:
        raise ValueError("grpo-agentic: no passage sources; train on a build run or set options.sources")
    return open_retriever(ctx.warehouse, sources, config, kind=options.retriever)


def qa_rows(rows: list[dict]) -> list[dict]:
    """The answer prompts of a ``grpo_prompts`` export (the plan task's planner prompts, scored by SEPR, have no search)."""
    kept = [r for r in rows if r.get("task", "qa") == "qa"]
    if not kept:
        raise ValueError(f"grpo-agentic: none of the {len(rows)} grpo_prompts rows is a qa prompt")
    return kept


def build_trainer(ctx: MethodContext, retriever: Retriever | None = None):
    """TRL's GRPO trainer with the agentic rollout (its spec: ``methods/grpo_agentic.py``)."""
    import datasets
    from trl import GRPOTrainer

    from ragfactory.tasks.training.rewards import run_rewards
    from ragfactory.tasks.training.trainers import load_model, trl_args

    options = AgenticOptions.from_options(ctx.options)
    retriever = retriever or build_retriever(ctx, options)
    model, tokenizer = load_model(ctx.model_path)
    tokenizer.padding_side = "left"
    args = trl_args("grpo-agentic", ctx.output_dir, ctx.save_steps, ctx.seed, ctx.trl)
    rewards = run_rewards(ctx)
    dataset = datasets.Dataset.from_list(qa_rows(ctx.rows))
    return GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=list(ctx.callbacks),
        peft_config=ctx.peft_config,
        rollout_func=AgenticRollout(retriever, options, ctx.output_dir, ctx.logger),
    )
