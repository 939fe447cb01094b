"""verl reward for ``searchR1_<dataset>`` rows of any dataset (TreePS-RAG, App. C.2).

Stock verl (0.9.1) scores seven ``searchR1_`` names with Search-R1's exact-match rule; a build
over another dataset (a FlashRAG file of its own name) exports ``searchR1_<name>``, which
``default_compute_score`` refuses. verl loads this file by path
(``reward.custom_reward_function.path=<this file>`` and ``.name=compute_score``, the overrides
``tasks/export/verl.py``'s ``reward_overrides`` gives), so it imports nothing of ragfactory: every
``searchR1_`` row gets verl's own ``search_r1_like_qa_em`` rule, anything else verl's default.
Its signature is verl's (``compute_score(data_source, solution_str, ground_truth, extra_info)``),
not the TRL one of ``__init__.py``: verl calls it, once per row.
"""

from __future__ import annotations

from typing import Any

PREFIX = "searchR1_"


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> float | dict:
    """The score verl's reward manager asks for: 1.0 when the last ``<answer>`` matches a target."""
    if str(data_source).startswith(PREFIX):
        from verl.utils.reward_score import search_r1_like_qa_em

        return float(search_r1_like_qa_em.compute_score(solution_str, ground_truth))
    from verl.utils.reward_score import default_compute_score

    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
