r"""Answer metrics: exact match (EM), token F1 and cover exact match (cover-EM).

These are the outcome rewards and evaluation metrics the papers share. EM is the leaf reward of
TreePS-RAG ("Value Estimation", after Jin et al. 2025) and the primary metric of
APEX-Searcher (evaluation appendix). F1 scores the complete trajectories behind SPRE in
ReasonRAG (Section 2.2.3; its Appendix D evaluates EM/F1 as FlashRAG does), and DecEx-RAG
uses EM and F1 as reward feedback for intermediate steps (DecEx-RAG, Limitations). The match-based half
of the R3-RAG outcome reward ("Answer Correctness") is a string match of this kind.

Normalisation is the SQuAD v1.1 / HotpotQA one, in the order of `normalize_answer` in the
official scripts (SQuAD `evaluate-v1.1.py`, Rajpurkar et al. 2016; HotpotQA
`hotpot_evaluate_v1.py`, Yang et al. 2018):
`white_space_fix(remove_articles(remove_punc(lower(s))))`. Punctuation is ASCII
`string.punctuation`, deleted rather than replaced by a space (so "Hewlett-Packard" becomes
"hewlettpackard"); articles are the whole words matched by `\b(a|an|the)\b` ("theatre" keeps
its "the"). Answers are stripped first: Bamboogle ships the answer "George VI\n".

F1 is HotpotQA's `f1_score`, including its closed-answer rule: when either the normalised
prediction or the normalised ground truth is "yes", "no" or "noanswer" and the two differ,
F1, precision and recall are all 0 (no partial credit for "yes" against "yes it is").

Cover-EM is FlashRAG's `Sub_ExactMatch` (metric "acc", Jin et al. 2024,
`flashrag/evaluator/metrics.py` of the `flashrag-dev` package): the prediction counts as correct
when it contains a golden answer. FlashRAG tests raw substring containment of the normalised
strings; here that containment must hold too, and the golden answer must also be a contiguous run
of whole words of the prediction, so "Paris" is not covered by "Parisian" and "in" is not covered
by "Berlin". Words end at spaces and at every punctuation mark, ASCII or Unicode (curly quotes,
en and em dashes): "“Paris”", "Paris—France", "Paris-based" and "Paris's" all cover "Paris", as
in FlashRAG, which keeps those marks in the normalised text but finds "paris" inside it. The
words are taken both ways, with the marks deleted (normalisation: "Hewlett-Packard" is the word
"hewlettpackard") and with each mark a break ("hewlett", "packard"), and either way counts.
Requiring FlashRAG's containment makes cover-EM never more lenient than FlashRAG's; the cases
where it is stricter are listed with examples in `docs/metrics.md`. An answer that normalises to
no tokens covers only a prediction that also normalises to no tokens, which keeps cover-EM >= EM.
As in FlashRAG, cover-EM has no closed-answer rule, and containment inherits the golden answers'
noise: "yes or no" covers both "yes" and "no", and MuSiQue lists "in" as an alias of India, so
any prediction with the word "in" covers that row.

Every metric takes the maximum over the golden answers (a single string counts as one); no
golden answers, or a None prediction, score 0.0.

>>> exact_match("The Eiffel Tower!", ["eiffel tower"])
1.0
>>> round(f1_score("Eiffel Tower in Paris", "the Eiffel Tower"), 4)
0.6667
>>> cover_exact_match("It was built in Paris.", ["Paris", "France"])
1.0
>>> score("cover_em", "a Parisian café", "Paris")
0.0
>>> cover_exact_match("“Paris”—France’s capital", ["Paris"])
1.0
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
# HotpotQA's closed answers: comparison questions are answered "yes"/"no", and "noanswer"
# marks abstention; a token overlap with them is meaningless, so F1 gives none.
_CLOSED_ANSWERS = frozenset({"yes", "no", "noanswer"})

GoldenAnswers = str | Iterable[str] | None
Metric = Callable[[str | None, GoldenAnswers], float]


def normalize_answer(s: str) -> str:
    """Strip, lowercase, drop ASCII punctuation, drop whole-word articles, collapse whitespace.

    >>> normalize_answer("  The Theatre of   Dionysus, Athens\\n")
    'theatre of dionysus athens'
    """
    text = s.strip().lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str | None, golden_answers: GoldenAnswers) -> float:
    """1.0 when the normalised prediction equals some normalised golden answer, else 0.0."""
    golds = _golden_list(golden_answers)
    if prediction is None or not golds:
        return 0.0
    normalized = normalize_answer(_checked_prediction(prediction))
    return float(any(normalized == normalize_answer(gold) for gold in golds))


def f1_precision_recall(prediction: str | None, ground_truth: str) -> tuple[float, float, float]:
    """Token-level (F1, precision, recall) of one prediction against one ground truth.

    Tokens are the whitespace-split normalised strings, counted as multisets, as in HotpotQA.

    >>> f1_precision_recall("yes", "yes it is")
    (0.0, 0.0, 0.0)
    """
    if prediction is None:
        return 0.0, 0.0, 0.0
    if not isinstance(ground_truth, str):
        raise TypeError(f"ground_truth must be str, got {type(ground_truth).__name__}")
    normalized_prediction = normalize_answer(_checked_prediction(prediction))
    normalized_truth = normalize_answer(ground_truth)
    is_closed = normalized_prediction in _CLOSED_ANSWERS or normalized_truth in _CLOSED_ANSWERS
    if is_closed and normalized_prediction != normalized_truth:
        return 0.0, 0.0, 0.0
    prediction_tokens = normalized_prediction.split()
    truth_tokens = normalized_truth.split()
    n_same = sum((Counter(prediction_tokens) & Counter(truth_tokens)).values())
    if n_same == 0:
        return 0.0, 0.0, 0.0
    precision = n_same / len(prediction_tokens)
    recall = n_same / len(truth_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str | None, golden_answers: GoldenAnswers) -> float:
    """The best token F1 of the prediction over the golden answers."""
    golds = _golden_list(golden_answers)
    if prediction is None or not golds:
        return 0.0
    return max(f1_precision_recall(prediction, gold)[0] for gold in golds)


def cover_exact_match(prediction: str | None, golden_answers: GoldenAnswers) -> float:
    """1.0 when some normalised golden answer is in the normalised prediction (FlashRAG's test)
    as a contiguous run of its whole words, punctuation deleted or breaking words."""
    golds = _golden_list(golden_answers)
    if prediction is None or not golds:
        return 0.0
    normalized = normalize_answer(_checked_prediction(prediction))
    tokens, words = normalized.split(), _words(prediction)
    return float(
        any(
            normalize_answer(gold) in normalized
            and (_contains_span(tokens, normalize_answer(gold).split()) or _contains_span(words, _words(gold)))
            for gold in golds
        )
    )


METRICS: Mapping[str, Metric] = MappingProxyType({"em": exact_match, "f1": f1_score, "cover_em": cover_exact_match})


def score(metric: str, prediction: str | None, golden_answers: GoldenAnswers) -> float:
    """Score a prediction with the metric named `metric` (a key of METRICS)."""
    if metric not in METRICS:
        raise ValueError(f"unknown answer metric {metric!r}; valid metrics: {', '.join(METRICS)}")
    return METRICS[metric](prediction, golden_answers)


def _is_punctuation(ch: str) -> bool:
    return ch in _PUNCTUATION or unicodedata.category(ch).startswith("P")


def _words(s: str) -> list[str]:
    """The normalised words of ``s`` with every punctuation mark, ASCII or Unicode, a break
    between words instead of deleted (cover-EM's word boundaries)."""
    text = "".join(" " if _is_punctuation(ch) else ch for ch in s.strip().lower())
    return _ARTICLES.sub(" ", text).split()


def _contains_span(tokens: list[str], span: list[str]) -> bool:
    if not span:
        return not tokens
    width = len(span)
    return any(tokens[i : i + width] == span for i in range(len(tokens) - width + 1))


def _golden_list(golden_answers: GoldenAnswers) -> list[str]:
    if golden_answers is None:
        return []
    if isinstance(golden_answers, str):
        return [golden_answers]
    golds = list(golden_answers)
    for i, gold in enumerate(golds):
        if not isinstance(gold, str):
            raise TypeError(f"golden_answers[{i}] must be str, got {type(gold).__name__}: {gold!r}")
    return golds


def _checked_prediction(prediction: object) -> str:
    if not isinstance(prediction, str):
        raise TypeError(f"prediction must be str or None, got {type(prediction).__name__}")
    return prediction
