"""Loads a build's exports with the trainers' own code, in the ``.venv-clients`` venv.

Run as ``python trainer_clients.py <client> <args as JSON>``; prints one JSON object. Imports
nothing of ragfactory: the venv holds verl 0.9.1, LLaMA-Factory 0.9.5, OpenRLHF 0.11.2 and
FlashRAG's metrics (``flashrag-dev`` 0.1.2), not the factory (``docs/clients.md``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def verl_main(args: dict) -> dict:
    """For each list of ``main_ppo`` overrides in ``args["runs"]``, what ``python -m
    verl.trainer.main_ppo <overrides>`` does before it starts Ray: Hydra composes verl's
    ``ppo_trainer`` config with the overrides and ``validate_config`` checks it (``main``); then
    the train dataset (``create_rl_dataset``) and the reward manager (``load_reward_manager``) its
    trainer builds, scoring each row's gold answer and a wrong one."""
    return {"runs": [_verl_main(overrides, args["wrong"]) for overrides in args["runs"]]}


def _verl_main(overrides: list[str], wrong: str) -> dict:
    import asyncio

    import numpy as np
    import torch
    from hydra import compose, initialize_config_module
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.utils import create_rl_dataset, need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with initialize_config_module("verl.trainer.config", version_base=None):
        config = compose("ppo_trainer", overrides=overrides)
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    dataset = create_rl_dataset(config.data.train_files, config.data, tokenizer, None)
    rows = [dataset[i] for i in range(len(dataset))]

    def batch(row: dict, answer: str) -> DataProto:
        ids = torch.tensor([tokenizer(f"<answer> {answer} </answer>")["input_ids"]])
        return DataProto.from_dict(
            tensors={"responses": ids, "attention_mask": torch.ones_like(ids)},
            non_tensors={
                key: np.array([row[key]], dtype=object) for key in ("data_source", "reward_model", "extra_info")
            },
        )

    async def scores() -> list[list[float]]:
        manager = load_reward_manager(config, tokenizer)
        return [
            [
                (await manager.run_single(batch(row, answer)))["reward_score"]
                for answer in (row["reward_model"]["ground_truth"]["target"][0], wrong)
            ]
            for row in rows
        ]

    return {
        "rows": len(dataset),
        "data_sources": [row["data_source"] for row in rows],
        "reward_function": config.reward.custom_reward_function.path,
        "scores": asyncio.run(scores()),
    }


def llamafactory(args: dict) -> dict:
    """LLaMA-Factory's get_dataset over ``dataset_info.json`` with the model's tokenizer and its
    ``smollm2`` template, as its SFT or DPO workflow calls it."""
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    model_args, data_args, training_args, _, _ = get_train_args(
        {
            "stage": args["stage"],
            "do_train": True,
            "model_name_or_path": args["model"],
            "dataset": args["dataset"],
            "dataset_dir": args["folder"],
            "template": "smollm2",
            "cutoff_len": 4096,
            "output_dir": args["output"],
            "overwrite_cache": True,
            "report_to": "none",
            "use_cpu": True,
        }
    )
    tokenizer_module = load_tokenizer(model_args)
    tokenizer = tokenizer_module["tokenizer"]
    template = get_template_and_fix_tokenizer(tokenizer, data_args)
    stage = "rm" if args["stage"] == "dpo" else args["stage"]  # as LLaMA-Factory's DPO workflow asks
    module = get_dataset(template, model_args, data_args, training_args, stage=stage, **tokenizer_module)
    dataset = module["train_dataset"]
    first = dataset[0]
    decode = lambda ids: tokenizer.decode([i for i in ids if i >= 0], skip_special_tokens=False)  # noqa: E731
    if args["stage"] == "sft":
        example = {"input": decode(first["input_ids"]), "labels": decode(first["labels"])}
    else:
        example = {side: decode(first[f"{side}_labels"]) for side in ("chosen", "rejected")}
        example["input"] = decode(first["chosen_input_ids"])
    return {"rows": len(dataset), "example": example}


def llamafactory_train(args: dict) -> dict:
    """``llamafactory-cli train <yaml>`` (LLaMA-Factory's own entry point) with ``args["config"]``
    as the YAML, in a subprocess like a user's; the trainer state it saves in ``output_dir``."""
    import subprocess

    import yaml

    config = args["config"]
    path = Path(config["output_dir"]) / "train.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    cli = Path(sys.executable).with_name("llamafactory-cli")
    done = subprocess.run([str(cli), "train", str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-4000:])
    state = json.loads((Path(config["output_dir"]) / "trainer_state.json").read_text(encoding="utf-8"))
    return {"global_step": state["global_step"], "log": state["log_history"]}


def _openrlhf_args(cli: str, argv: list[str]):
    """``argv`` parsed by OpenRLHF's own parser of ``openrlhf/cli/<cli>.py``: the statements of its
    ``__main__`` block but the last, ``train(args)`` (the module's imports need DeepSpeed and a GPU)."""
    import ast
    import importlib.util

    path = Path(importlib.util.find_spec("openrlhf").submodule_search_locations[0]) / "cli" / f"{cli}.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [main] = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
    body = [node for node in main.body if ast.unparse(node) != "train(args)"]
    namespace: dict = {}
    exec("import argparse, math, os\nfrom datetime import datetime", namespace)
    sys.argv = [str(path), *argv]
    exec(compile(ast.Module(body, type_ignores=[]), str(path), "exec"), namespace)
    return namespace["args"]


class _Strategy:
    """What OpenRLHF's dataset code asks of its DeepSpeed strategy, on one process."""

    def __init__(self, args):
        self.args = args

    def print(self, *message):
        print(*message, file=sys.stderr)

    def is_rank_0(self) -> bool:
        return True


def openrlhf(args: dict) -> dict:
    """For each ``[cli, argv]`` (``train_sft``, ``train_dpo``), OpenRLHF's parser on the argv, then
    the data its ``train`` reads: ``blending_datasets`` over ``--data.dataset``, then
    ``SFTDataset`` or ``RewardDataset`` (DPO), which drop the rows over ``--data.max_len``."""
    from openrlhf.datasets import RewardDataset, SFTDataset
    from openrlhf.datasets.utils import blending_datasets
    from transformers import AutoTokenizer

    out = []
    for cli, argv in args["runs"]:
        parsed = _openrlhf_args(cli, argv)
        data, strategy = parsed.data, _Strategy(parsed)
        rows = blending_datasets(
            data.dataset,
            data.dataset_probs,
            strategy,
            parsed.train.seed,
            max_count=data.max_samples,
            dataset_split=data.dataset_split,
        )
        tokenizer = AutoTokenizer.from_pretrained(parsed.model.model_name_or_path)
        if cli == "train_sft":
            dataset = SFTDataset(
                rows,
                tokenizer,
                data.max_len,
                strategy,
                input_template=data.input_template,
                num_processors=1,
                multiturn=data.multiturn,
            )
            first = dataset.prompts[0] + dataset.responses[0]
        else:
            dataset = RewardDataset(
                rows,
                tokenizer,
                data.max_len,
                strategy,
                input_template=data.input_template,
                is_dpo=True,
                num_processors=1,
            )
            first = dataset.prompts[0] + dataset.chosens[0]
        out.append({"loaded": len(rows), "kept": len(dataset), "max_len": data.max_len, "first": first})
    return {"runs": out}


def load_folders(args: dict) -> dict:
    """Rows of each export folder or file as ``datasets.load_dataset`` (this venv's) loads it."""
    import datasets

    rows = []
    for target in map(Path, args["targets"]):
        files = str(target) if target.is_file() else str(target / "*.parquet")
        rows.append(len(datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=args["cache"])))
    return {"rows": rows, "version": datasets.__version__}


def flashrag(args: dict) -> dict:
    """FlashRAG's own EM, F1 and cover-EM (``Sub_ExactMatch``) of each ``[prediction, golds]``."""
    from flashrag.evaluator.metrics import ExactMatch, F1_Score, Sub_ExactMatch

    config = {"dataset_name": "nq"}  # any name but curatedtrec, whose answers are regexes
    em, f1, cover = ExactMatch(config), F1_Score(config), Sub_ExactMatch(config)
    cases = json.loads(Path(args["cases_file"]).read_text(encoding="utf-8"))
    return {
        "em": [em.calculate_em(p, g) for p, g in cases],
        "f1": [f1.token_level_scores(p, g)["f1"] for p, g in cases],
        "cover_em": [cover.calculate_sub_em(p, g) for p, g in cases],
    }


if __name__ == "__main__":
    clients = {
        "verl_main": verl_main,
        "llamafactory": llamafactory,
        "llamafactory_train": llamafactory_train,
        "openrlhf": openrlhf,
        "load_folders": load_folders,
        "flashrag": flashrag,
    }
    result = clients[sys.argv[1]](json.loads(sys.argv[2]))
    print("RESULT " + json.dumps(result))
