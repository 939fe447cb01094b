"""Loads a build's exports with the trainers' own code, in the ``.venv-clients`` venv.

Run as ``python trainer_clients.py verl|llamafactory <args as JSON>``; prints one JSON object.
Imports nothing of ragfactory: the venv holds verl 0.9.1 and LLaMA-Factory 0.9.5, not the factory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def verl(args: dict) -> dict:
    """verl's RLHFDataset over the parquet with main_ppo's data config, and the reward main_ppo
    computes with no custom function (``get_default_compute_score`` of the default manager)."""
    import verl as verl_pkg
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.reward_score import get_default_compute_score

    defaults = Path(verl_pkg.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml"
    config = OmegaConf.load(defaults)
    data = OmegaConf.merge(config.data, {"train_files": args["path"], "prompt_key": "prompt",
                                         "max_prompt_length": 2048, "cache_dir": args["cache"]})
    tokenizer = AutoTokenizer.from_pretrained(args["model"])
    dataset = RLHFDataset(data_files=args["path"], tokenizer=tokenizer, config=data)
    score = get_default_compute_score(config.reward.reward_manager.name)
    rows = [dataset[i] for i in range(len(dataset))]
    answers = lambda row: (row["reward_model"]["ground_truth"]["target"][0], args["wrong"])  # noqa: E731
    scores = [
        [score(row["data_source"], f"<think> done </think> <answer> {answer} </answer>",
               row["reward_model"]["ground_truth"], row["extra_info"]) for answer in answers(row)]
        for row in rows
    ]
    custom = None
    if args.get("reward_module"):
        from verl.utils.import_utils import load_extern_object

        fn = load_extern_object(module_path=args["reward_module"], object_name="compute_score")
        custom = fn("searchR1_my_eval", "<answer> Paris </answer>", {"target": ["paris"]})
    return {"rows": len(dataset), "data_sources": [r["data_source"] for r in rows],
            "targets": [list(r["reward_model"]["ground_truth"]["target"]) for r in rows],
            "scores": scores, "custom": custom}


def llamafactory(args: dict) -> dict:
    """LLaMA-Factory's get_dataset over ``dataset_info.json`` with the model's tokenizer and its
    ``smollm2`` template, as its SFT or DPO workflow calls it."""
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import get_train_args
    from llamafactory.model import load_tokenizer

    model_args, data_args, training_args, _, _ = get_train_args({
        "stage": args["stage"], "do_train": True, "model_name_or_path": args["model"],
        "dataset": args["dataset"], "dataset_dir": args["folder"], "template": "smollm2",
        "cutoff_len": 4096, "output_dir": args["output"], "overwrite_cache": True,
        "report_to": "none", "use_cpu": True,
    })
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


if __name__ == "__main__":
    result = {"verl": verl, "llamafactory": llamafactory}[sys.argv[1]](json.loads(sys.argv[2]))
    print("RESULT " + json.dumps(result))
