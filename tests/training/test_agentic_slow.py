"""One agentic GRPO step on the embedded SmolLM2-135M with BM25 over the bundled HotpotQA
paragraphs: the rollouts search, the retrieved passages are in the completions and in the rollout
log, and TRL's own loss mask leaves every retrieved token out."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.search.treeps.steps import initial_prompt
from ragfactory.tasks.training.agentic import ROLLOUT_LOG, build_trainer
from ragfactory.tasks.training.methods import MethodContext
from ragfactory.tasks.training.runs import run_training
from ragfactory.warehouse.store import conform

pytestmark = pytest.mark.slow


def test_one_agentic_grpo_step_on_the_embedded_model_with_bm25(embedded_model, tmp_path):
    data = load_bundled("hotpotqa")
    questions = data.questions[:4]
    rows = [
        {
            "prompt": [{"role": "user", "content": initial_prompt(q["question"], "treeps_step")}],
            "golden_answers": list(q["golden_answers"]),
            "question_id": q["question_id"],
            "task": "qa",
        }
        for q in questions
    ]
    ctx = MethodContext(
        rows=rows,
        model_path=str(embedded_model),
        output_dir=str(tmp_path / "agentic"),
        save_steps=10,
        seed=0,
        logger=logging.getLogger("agentic-slow"),
        rewards=["answer_f1", "format"],
        options={"max_turns": 2, "top_k": 2, "grammar": "treeps_step", "turn_tokens": 96},
        trl={
            "max_steps": 1,
            "max_completion_length": 192,
            "num_generations": 2,
            "per_device_train_batch_size": 8,
            "learning_rate": 1e-6,
        },
    )
    trainer = build_trainer(ctx, retriever=BM25Retriever.build(conform("passages", data.passages)))

    # The batch exactly as the training step builds it: 4 prompts x 2 generations.
    batch = trainer._generate_and_score_completions([row for row in rows for _ in range(2)])
    tokenizer = trainer.processing_class
    logged = [json.loads(line) for line in (Path(ctx.output_dir) / ROLLOUT_LOG).read_text().splitlines()]
    assert len(logged) == 8
    searched = [(i, line) for i, line in enumerate(logged) if any(line["retrieved"])]
    assert searched, "no rollout searched"
    for i, line in searched:
        passage = next(hit for hits in line["retrieved"] for hit in hits)
        assert f"(Title: {passage['title']})" in line["completion"]
        completion = batch["completion_ids"][i]
        trained = (batch["completion_mask"][i] * batch["tool_mask"][i]).bool()
        ignored = batch["completion_mask"][i].bool() & ~trained
        # what the loss sees is the model's own text; what it skips is the observations
        assert "<information>" not in tokenizer.decode(completion[trained])
        assert tokenizer.decode(completion[ignored]).count("<information>") == len(line["queries"])
        assert passage["title"] in tokenizer.decode(completion[ignored])
        assert int(ignored.sum()) == line["observation_tokens"]

    metrics = run_training(trainer, ctx.output_dir)
    assert metrics["global_step"] == 1
    assert (Path(ctx.output_dir) / "model.safetensors").is_file()
