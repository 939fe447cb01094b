"""SEPR with the real MiniLM encoder on ten MuSiQue dev gold plans against hand-written plans.

Each gold plan is read from the bundled MuSiQue sample and its symbolic steps rewritten by the
default templates. The hand-written plans paraphrase every gold step (listed here in gold
order); each case feeds them reversed, so a score of 1.0 shows order invariance and paraphrase
robustness at once. Further cases drop a step, add or swap in an unrelated one, or leak an
earlier answer instead of writing #n; their expected scores follow from the counts. These plans
also set tau (tasks/rewards/sepr.py): every paraphrase clears 0.79, no other step of the same
plan reaches 0.69.
"""

from __future__ import annotations

import pytest

from ragfactory.tasks.data.loaders import load_bundled
from ragfactory.tasks.rewards.sepr import SeprConfig, load_plan_scorer
from ragfactory.tasks.search.apex.plan_rewrite import rewrite_steps

PARAPHRASES = {
    "2hop__327688_56873": [
        "Which sports team did Craig Westcarr play for?",
        "In which years did #1 win the FA Cup?",
    ],
    "4hop3__373866_5189_31809_86687": [
        "Which organization was the People's Socialist Republic of Albania a member of?",
        "Which country effectively controlled the political and military functions of #1?",
        "Which organization was responsible for killing Gaddafi's grandsons?",
        "When did #2 accept a unified Germany as part of #3?",
    ],
    "2hop__145282_21711": [
        "In which city was Paco Godia born?",
        "When was the Palau de la Generalitat in #1 built?",
    ],
    "3hop1__831499_228453_10972": [
        "Which company makes Barton Premium Blend?",
        "In which city is #1 headquartered?",
        "When did #2 elect its first black mayor?",
    ],
    "4hop1__130404_59747_211319_557671": [
        "In which state is WDXQ located?",
        "Which city in #1 has the largest population?",
        "Which county is #2 located in?",
        "Which county borders #3?",
    ],
    "2hop__93230_319887": ["Who voices John Smith in Pocahontas?", "Which school did #1 attend?"],
    "2hop__71900_712629": ["Which British monarch has reigned the longest?", "Who was #1 married to?"],
    "4hop2__161602_474028_88460_20999": [
        "Which country hosted the tournament?",
        "In which country is A Don located?",
        "What natural border separates #1 and #2?",
        "How were the Portuguese driven out of #3?",
    ],
    "2hop__25396_212301": ["Who issued the Tamworth Manifesto?", "Who is a child of #1?"],
    "3hop1__773338_42197_18397": [
        "Of which country was Yuri Bogatyryov a citizen?",
        "Who claimed that #1 had turned into an imperialist power?",
        "Where did #2 announce he would intervene in the Korean War?",
    ],
}
P = PARAPHRASES
CASES = [  # (question, predicted plan, precision, recall)
    *((key, steps[::-1], 1.0, 1.0) for key, steps in P.items()),
    ("2hop__327688_56873", P["2hop__327688_56873"][:1], 1.0, 1 / 2),  # missing step
    (
        "4hop1__130404_59747_211319_557671",
        [s for i, s in enumerate(P["4hop1__130404_59747_211319_557671"]) if i != 2],
        1.0,
        3 / 4,
    ),
    (
        "4hop3__373866_5189_31809_86687",
        P["4hop3__373866_5189_31809_86687"] + ["What is the population of Tirana?"],
        4 / 5,
        1.0,
    ),  # extra step
    ("2hop__25396_212301", P["2hop__25396_212301"] + ["Where was the Tamworth Manifesto published?"], 2 / 3, 1.0),
    (
        "3hop1__831499_228453_10972",  # a wrong third step
        P["3hop1__831499_228453_10972"][:2] + ["What is the population of #2?"],
        2 / 3,
        2 / 3,
    ),
    ("2hop__71900_712629", P["2hop__71900_712629"][:1] + ["When was #1 crowned?"], 1 / 2, 1 / 2),
    (
        "2hop__93230_319887",  # the answer of step 1 leaked instead of #1
        ["Who voices John Smith in Pocahontas?", "Which school did Mel Gibson attend?"],
        1 / 2,
        1 / 2,
    ),
]


@pytest.fixture(scope="module")
def scorer():
    return load_plan_scorer(SeprConfig(), device="cpu")


@pytest.fixture(scope="module")
def gold_plans():
    rows = {q["question_id"]: q for q in load_bundled("musique").questions}
    plans = {key: rows[f"musique:{key}"]["gold_plan"] for key in PARAPHRASES}
    return {key: rewrite_steps([step["question"] for step in plan]) for key, plan in plans.items()}


def test_paraphrases_cover_every_gold_step(gold_plans):
    lengths = {key: len(steps) for key, steps in PARAPHRASES.items()}
    assert lengths == {key: len(steps) for key, steps in gold_plans.items()}
    assert not any(">>" in step for steps in gold_plans.values() for step in steps)


@pytest.mark.parametrize("key, predicted, precision, recall", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_musique_plan_scores(scorer, gold_plans, key, predicted, precision, recall):
    match = scorer.score(predicted, gold_plans[key])
    assert (match.precision, match.recall) == pytest.approx((precision, recall))
    assert match.f1 == pytest.approx(2 * precision * recall / (precision + recall))
    assert all(similarity >= 0.79 for _, _, similarity in match.matched)


def test_other_steps_of_a_plan_stay_below_tau(scorer, gold_plans):
    """Off the matching, every paraphrase is further from the other gold steps than tau."""
    for key, steps in PARAPHRASES.items():
        for i, step in enumerate(steps):
            others = [g for j, g in enumerate(gold_plans[key]) if j != i]
            for other in others:
                assert scorer.score([step], [other]).f1 == 0.0, (key, step, other)
