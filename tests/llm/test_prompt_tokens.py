"""A prompt tokenized line by line, each line once, has the ids of the prompt tokenized whole
(tasks/llm/prompt_tokens.py), for the tokenizers whose pre-tokenizer allows the cut."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.llm.prompt_tokens import CUT, LineTokens, cuts_lines
from ragfactory.tasks.llm.structured import GrammarMasks
from ragfactory.tasks.prompts.loader import load_prompt, prompt_files

# where GPT-2's pre-tokenizer could join a newline to what surrounds it, or could not
EDGES = [
    "a  \nb",  # spaces before the newline: no cut (at a text's end the spaces and newline join)
    "a \n\nb",
    "a\n\nb",
    "a\n b",
    "a\nb",
    "a.\n's",  # a contraction right after the cut
    "12\n34",
    "é\nñ",  # letters outside ASCII: no cut
    "x\n\n\n",
    "\nlead",
    "trail\n",
    "<|im_start|>\nuser\n<|im_end|>\nassistant: ",
    "user: Who?\nassistant: 1. A\n2. B\n#1 is\tC\r\nD\n\u00a0E\n\u2028F\nG",
]


@pytest.fixture(scope="module")
def tokenizer(embedded_model):
    return AutoTokenizer.from_pretrained(embedded_model)


@pytest.fixture(scope="module")
def whole(tokenizer):
    """The null engine's tokenizer: llguidance's over the embedded model's."""
    return GrammarMasks(tokenizer).tokenizer.tokenize_str


def texts() -> list[str]:
    """The edge cases, every shipped prompt template, and prompts of passages as a tree's are."""
    templates = [load_prompt(name[:-4]) for name in sorted(prompt_files()) if name.endswith(".txt")]
    passages = [f"{p['title']}\n{p['text']}" for p in load_bundled("hotpotqa").passages[:400]]
    prompts = [
        f"user: {templates[i % len(templates)]}\nDocuments:\n" + "\n".join(passages[i : i + 5]) + "\nassistant: "
        for i in range(0, 400, 5)
    ]
    return EDGES + templates + prompts


def test_cuts_only_between_visible_characters():
    assert CUT.split("Q: a\nb\n\nc  \nd\n e\nf") == ["Q: a\n", "b\n\nc  \nd\n e\n", "f"]
    assert CUT.split("é\nñ") == ["é\nñ"]


def test_the_embedded_tokenizer_is_cut_and_a_metaspace_one_is_not(tokenizer):
    assert cuts_lines(tokenizer)
    sentencepiece_like = Tokenizer(models.BPE(unk_token="<unk>"))
    sentencepiece_like.pre_tokenizer = pre_tokenizers.Metaspace()
    assert not cuts_lines(PreTrainedTokenizerFast(tokenizer_object=sentencepiece_like, unk_token="<unk>"))


def test_line_ids_are_the_whole_text_ids(whole, tokenizer):
    lines = LineTokens(whole)
    for text in texts():
        expected = tuple(whole(text))
        assert expected == tuple(tokenizer(text, add_special_tokens=False)["input_ids"]), text
        assert lines(text) == expected, text
        assert lines(text) == expected, text  # from kept lines the second time


def test_a_line_is_tokenized_once_and_the_kept_lines_are_bounded():
    asked: list[str] = []

    def tokenize(text: str) -> list[int]:
        asked.append(text)
        return [ord(c) for c in text]

    lines = LineTokens(tokenize, max_chars=12)
    assert lines("ab\ncd\nef") == tuple(map(ord, "ab\ncd\nef"))
    assert asked == ["ab\n", "cd\n", "ef"]
    assert lines("ab\ncd\ngh") == tuple(map(ord, "ab\ncd\ngh"))
    assert asked == ["ab\n", "cd\n", "ef", "gh"]  # 10 characters kept
    assert lines("ij\nab\n") == tuple(map(ord, "ij\nab\n"))
    # "ij\n" would make 13: the kept lines were dropped, so "ab\n" is tokenized again
    assert asked[-2:] == ["ij\n", "ab\n"]
