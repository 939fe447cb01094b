"""The export's length check: rows over a trainer's default maximum, each a line naming the flag."""

from ragfactory.tasks.export.lengths import estimate_tokens, length_warnings


def _user(n_chars: int, role: str = "user") -> list[dict]:
    return [{"role": role, "content": "x" * n_chars}]


def test_rows_over_a_trainers_default_are_counted_with_the_flag_to_raise():
    tables = {
        "preference_pairs": [  # prompts of 510 and 509 tokens: OpenRLHF keeps a prompt under 512 - 2
            {"prompt": _user(2040), "chosen": _user(40, "assistant"), "rejected": _user(80, "assistant")},
            {"prompt": _user(2036), "chosen": _user(40, "assistant"), "rejected": _user(40, "assistant")},
        ],
        "verl_prompts": [{"prompt": _user(2049)}],  # 513 tokens (rounded up)
        "sft_examples": [{"messages": _user(4000) + _user(400, "assistant")}],  # 1000 + 100
    }
    assert length_warnings(tables) == [
        "OpenRLHF train_dpo drops 1 of 2 preference_pairs rows at its default --data.max_len 512 "
        "(longest about 510 tokens): raise --data.max_len",
        "verl main_ppo stops on 1 of 1 verl_prompts rows at its default data.max_prompt_length 512 "
        "(longest about 513 tokens): raise data.max_prompt_length",
        "TRL SFTTrainer truncates 1 of 1 sft_examples rows at its default max_length 1024 "
        "(longest about 1100 tokens): raise max_length",
    ]


def test_a_tokenizers_count_replaces_the_estimate_and_short_rows_warn_nothing():
    assert estimate_tokens(_user(5)) == 2
    rows = {"sft_examples": [{"messages": _user(10) + _user(10, "assistant")}]}
    assert length_warnings(rows) == []
    assert length_warnings(rows, count=lambda messages: 3000 * len(messages)) == [
        "OpenRLHF train_sft drops 1 of 1 sft_examples rows at its default --data.max_len 2048 "
        "(longest 3000 tokens): raise --data.max_len",
        "LLaMA-Factory truncates 1 of 1 sft_examples rows at its default cutoff_len 2048 (longest 6000 tokens): "
        "raise cutoff_len",
        "TRL SFTTrainer truncates 1 of 1 sft_examples rows at its default max_length 1024 "
        "(longest 6000 tokens): raise max_length",
    ]
