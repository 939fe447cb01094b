"""The process judge's verdict (ReasonRAG, Appendix A, Eq. 6 and Fig. 14).

The Fig. 14 prompt asks for "a score between [0, 1]" and a last line "So the score is [Score]",
but the paper's own judged examples end "So the score is 15." (Fig. 8) and "So the score is
**88**." (Fig. 10): judges answer on a 0-100 scale as often as on 0-1. ``parse_verdict`` reads the
last "So the score is" line, with markdown emphasis or brackets around the number, and scales:
a number in [0, 1] is taken as it is, one in (1, 100] is a percentage. Anything else (no verdict
line, no number, a negative score, more than 100) is None: the caller records a format error on
the node and scores it 0.

Blind spot: a judge that writes "1" meaning one percent is read as a full score; the Fig. 14
prompt's own scale says 1 is the top, so this is the reading its instructions ask for.
"""

from __future__ import annotations

import re

VERDICT = re.compile(r"so the score is\s*[\[\(*_`\s]*(-?\d+(?:\.\d+)?)\s*(%?)", re.IGNORECASE)


def parse_verdict(text: str) -> float | None:
    """The verdict's score in [0, 1], or None when the text carries no readable one."""
    matches = VERDICT.findall(text or "")
    if not matches:
        return None
    number, percent = matches[-1]
    score = float(number)
    if percent or score > 1:
        score /= 100
    return score if 0 <= score <= 1 else None
