"""Every shipped output grammar compiles, and accepts what its parser accepts and nothing malformed.

Two directions, with the embedded model's tokenizer (llguidance masks tokens, so acceptance is
checked as the model would write the text):

- hand-written outputs: each well-formed one is accepted by the grammar and parsed without an
  error; each malformed one is refused by the grammar;
- the grammar's own outputs: random walks over the tokens each grammar allows (a seeded choice
  at every step, to the grammar's end) all parse without an error, so no constrained output can
  be a format error.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragfactory.tasks.llm.structured import GrammarMasks, accepts, check_grammar
from ragfactory.tasks.prompts.loader import grammar_names, load_grammar
from ragfactory.tasks.search.apex.expansion import ApexConfig
from ragfactory.tasks.search.decex.config import DecExConfig
from ragfactory.tasks.search.treeps.expansion import TreePSConfig
from tests.prompts.grammar_parsers import PARAMS, PARSERS

ANSWER_TAIL = ("<answer> Steven Spielberg </answer>", "<answer></answer>")
# grammar -> (well-formed outputs, malformed outputs)
EXAMPLES = {
    "decex_termination": (
        [
            "<reasoning> Step 1 found the director. </reasoning>. <answer> Steven Spielberg </answer>",
            "<reasoning>Not enough yet.</reasoning> <question> Who directed Jaws? </question>",
        ],
        [
            "<answer> Steven Spielberg </answer>",
            "<reasoning>x</reasoning> <answer>  </answer>",
            "<reasoning>x</reasoning> <search> Jaws </search>",
            "<reasoning>x</reasoning> <answer> a",
        ],
    ),
    "decex_sub_question": (
        ["First the director. <question> Who directed Jaws? </question>"],
        ["<question> Who directed Jaws? </question>", "Think. <question>\n</question>", "Who directed Jaws?"],
    ),
    "decex_self_answer": (["Jaws is a Spielberg film. " + ANSWER_TAIL[0]], ["Spielberg.", "So. " + ANSWER_TAIL[1]]),
    "decex_sub_query": (["Jaws 1975 film director"], ["", "  ", "<search> Jaws </search>", "Jaws\ndirector"]),
    "decex_rollout": (
        ["I need the director. <search> Jaws director </search>", ANSWER_TAIL[0]],
        ["I need the director.", "<search></search>", "<information> Doc 1 </information>"],
    ),
    "treeps_step": (
        [
            "<reason> I need the director. </reason> <search> Jaws director </search>",
            "<reason>Doc 1 names him.</reason>\n" + ANSWER_TAIL[0],
        ],
        ["<think> x </think> <search> Jaws </search>", "<reason> x </reason>", ANSWER_TAIL[0]],
    ),
    "treeps_search_r1": (
        ["<think> I need the director. </think> <search> Jaws director </search>"],
        ["<reason> x </reason> <search> Jaws </search>", "<think> x </think>"],
    ),
    "apex_plan": (
        [
            "<plan>\n1. Who directed Jaws?\n2. Who is the mother of #1?\n</plan>",
            "<plan>\n1. When was A born?\n2. When was B born?\n3. Is #1 earlier than #2?\n</plan>",
        ],
        [
            "<plan>\n1. Who is the mother of #2?\n2. Who directed Jaws?\n</plan>",
            "<plan>\n1. A?\n2. B?\n3. C?\n4. D?\n5. E?\n6. F?\n</plan>",
            "1. Who directed Jaws?\n2. Who is the mother of #1?",
            "<plan>\n</plan>",
        ],
    ),
    "apex_sufficiency": (
        ["<reasoning> Nothing is known yet. </reasoning> <decision>retrieve</decision>"],
        ["<reasoning> x </reasoning> <decision>continue</decision>", "<decision>answer</decision>"],
    ),
    "apex_continue": (
        ["<reasoning> Doc 2 answers it. </reasoning>\n<decision>stop</decision>"],
        ["<reasoning> x </reasoning> <decision>retrieve</decision>"],
    ),
    "apex_query_first": (
        ["The director first. <query>Jaws director</query>"],
        ["<query>Jaws director</query>", "x <query></query>"],
    ),
    "apex_query_next": (["Try his parents. <query>Spielberg parents</query>"], ["Try. <search>Spielberg</search>"]),
    "apex_knowledge_answer": (["Known from step 1. " + ANSWER_TAIL[0]], ["Known. " + ANSWER_TAIL[1]]),
    "apex_sub_answer": (["Doc 1 says so. " + ANSWER_TAIL[0]], ["Doc 1 says so."]),
    "apex_synthesis": (["The last sub-answer. <answer>Leah Adler</answer>"], ["<answer>Leah Adler</answer>"]),
    "apex_rewrite": (
        ["<question>Who is the mother of #1?</question>"],
        ["Who is the mother of #1?", "<question> </question>"],
    ),
    "reasonrag_reasoning": (
        ["So the next query is <query>Jaws director</query>", "So the answer is <answer>Leah Adler</answer>"],
        ["<evidence>Doc 1</evidence>", "So the answer is Leah Adler."],
    ),
    "reasonrag_grounding": (
        [
            "Based on the query, the relevant evidence is <evidence>Jaws was directed by Spielberg.</evidence>",
            "<evidence>None</evidence>",
        ],
        ["<answer>Spielberg</answer>", "<evidence> </evidence>"],
    ),
    "reasonrag_final": (
        ["So the answer is <answer>Leah Adler</answer>", "<answer>Leah Adler</answer>"],
        ["So the next query is <query>Jaws director</query>", "So the answer is Leah Adler."],
    ),
    "reasonrag_query": (
        ["So the next query is <query>Jaws director</query>", "<query>Jaws director</query>"],
        ["So the answer is <answer>Leah Adler</answer>", "So the next query is Jaws director."],
    ),
    "r3_step": (
        [
            "The problem analysis: Who directed it?\nThe retrieval query: Jaws director",
            "The problem analysis: Step 1 says Spielberg.\nThe final answer: Steven Spielberg",
        ],
        [
            "The retrieval query: Jaws director",
            "The problem analysis: x\nThe final answer: ",
            "The problem analysis: x The final answer: y",
        ],
    ),
    "r3_answer": (
        ["The problem analysis: Step 1 says so.\nThe final answer: Steven Spielberg"],
        ["The problem analysis: More.\nThe retrieval query: Jaws director"],
    ),
    "r3_query": (
        ["The problem analysis: Who directed it?\nThe retrieval query: Jaws director"],
        ["The problem analysis: Known.\nThe final answer: Steven Spielberg"],
    ),
    "r3_relevance_judge": (
        ["So the relevance is 0.7", "So the relevance is 1", "So the relevance is 0"],
        ["So the relevance is 7", "So the relevance is 0.75", "relevance: 0.7"],
    ),
    "r3_outcome_judge": (
        ["So the predicted answer is correct: yes", "So the predicted answer is correct: no"],
        ["So the predicted answer is correct: maybe", "yes"],
    ),
    "flashrag_direct": (["Steven Spielberg"], ["", "Steven\nSpielberg", "<answer>x</answer>"]),
    "flashrag_rag": (["Leah Adler"], ["   "]),
}


def shipped(name: str, max_tokens: int = 512):
    return load_grammar(name, max_tokens, **PARAMS.get(name, {}))


@pytest.fixture(scope="module")
def masks(embedded_model):
    from transformers import AutoTokenizer

    return GrammarMasks(AutoTokenizer.from_pretrained(embedded_model))


def test_every_shipped_grammar_has_a_parser_and_examples():
    assert set(grammar_names()) == set(PARSERS) == set(EXAMPLES)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_shipped_grammar_compiles_and_fits_max_tokens(name):
    for max_tokens in (256, 512):
        grammar = shipped(name, max_tokens)
        check_grammar(grammar)
        assert grammar.max_tokens <= max_tokens


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_well_formed_outputs_pass_both_and_malformed_ones_fail_the_grammar(name, masks):
    good, bad = EXAMPLES[name]
    grammar = shipped(name)
    for text in good:
        assert PARSERS[name](text) is None, text
        assert accepts(grammar, text, masks), text
    for text in bad:
        assert not accepts(grammar, text, masks), text


def random_output(grammar, masks: GrammarMasks, rng: random.Random) -> str:
    """One output of ``grammar``: a uniformly chosen allowed token at every step, to the end."""
    matcher = masks.matcher(grammar)
    tokens = []
    while not matcher.is_stopped():
        allowed = np.flatnonzero(masks.allowed([matcher])[0])
        token = int(allowed[rng.randrange(len(allowed))])
        assert matcher.consume_token(token), matcher.get_error()
        tokens.append(token)
        assert len(tokens) <= grammar.max_tokens, f"{grammar.name} ran past its bound"
    return masks.tokenizer.decode_str([t for t in tokens if t not in masks.tokenizer.eos_tokens])


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_output_a_grammar_allows_parses(name, masks):
    grammar = shipped(name, 128 if name != "apex_plan" else 256)
    rng = random.Random(name)
    for _ in range(12):
        text = random_output(grammar, masks, rng)
        assert PARSERS[name](text) is None, repr(text)


# The bound counts each literal byte as a token (the worst a tokenizer can do), each free field at
# its cap, the minimum free-text budget (4) and one token to end. decex_termination's longest path:
# "<reasoning>" 11 + 4 + "</reasoning>" 12 + ". " 2 + "<question>" 10 + sub_question 20
# + "</question>" 11 + 1 = 71. treeps_step's: "<reason>" 8 + 4 + "</reason>" 9 + " " 1
# + "<search>" 8 + query 16 + "</search>" 9 + 1 = 56.
@pytest.mark.parametrize(
    "make,message",
    [
        (
            lambda: DecExConfig(max_tokens=64),
            "DecExConfig.max_tokens=64: grammar 'decex_termination': needs max_tokens >= 71",
        ),
        (
            lambda: TreePSConfig(max_tokens=48),
            "TreePSConfig.max_tokens=48: grammar 'treeps_step': needs max_tokens >= 56",
        ),
        (
            lambda: ApexConfig(plan_max_tokens=96),
            "ApexConfig.plan_max_tokens=96: grammar 'apex_plan': needs max_tokens >= 151",
        ),
    ],
)
def test_a_max_tokens_too_small_for_the_tags_is_refused_naming_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()
