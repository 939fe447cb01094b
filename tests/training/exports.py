"""Small hand-written exports in the three training formats, written to a warehouse."""

from __future__ import annotations

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
CONVERSATION = [
    {"role": "system", "content": "Answer with a search plan."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "<question>Which city is the capital?</question>"},
    {"role": "user", "content": "Observation: Paris is the capital of France."},
    {"role": "assistant", "content": "<answer>Paris</answer>"},
]


def write_exports(wh, run_id: str = "run-1", n: int = 4) -> None:
    wh.write(
        "sft_examples", [{"example_id": f"e{i}", "run_id": run_id, "messages": CONVERSATION} for i in range(n)], "decex"
    )
    wh.write(
        "preference_pairs",
        [
            {
                "pair_id": f"p{i}",
                "run_id": run_id,
                "prompt": QUESTION,
                "chosen": [{"role": "assistant", "content": "<answer>Paris</answer>"}],
                "rejected": [{"role": "assistant", "content": "<answer>Rome</answer>"}],
            }
            for i in range(n)
        ],
        "decex",
    )
    wh.write(
        "grpo_prompts",
        [
            {"prompt_id": f"g{i}", "run_id": run_id, "prompt": QUESTION, "golden_answers": ["Paris"], "task": "qa"}
            for i in range(n)
        ],
        "treeps",
    )


def register_trained(wh, folders, model_id: str, name: str, day: int, keep: bool = True) -> str:
    """Register a model of lineage ``name`` created on 2026-03-``day``; its weights' folder is
    ``folders / model_id`` (left missing with ``keep=False``). Returns the folder."""
    import datetime as dt

    from ragfactory.tasks.training.registry import model_row, register_model

    folder = folders / model_id
    if keep:
        folder.mkdir()
    row = model_row(model_id, {"name": name}, "embedded", "sft", "snap", {}, {}, str(folder))
    register_model(wh, {**row, "created_at": dt.datetime(2026, 3, day, tzinfo=dt.UTC)})
    return str(folder)
