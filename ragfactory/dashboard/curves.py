"""A training's curves, drawn on the server as small inline SVG charts (no script, no CDN).

The points are the trainer's own step lines (``tasks/training/progress.py``), read back from the
flow run's logs: loss and learning rate at every logged step, and GRPO's reward and KL when it
logs them. A line logged again for a step (a retried attempt resumed from a checkpoint) replaces
the earlier one. An evaluation of the trained model adds its per-question F1 delta against the
base model, on the questions both answered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from markupsafe import Markup, escape

# "step 3/10 (30%) loss 0.6931 lr 5.00e-05 eta 01m02s", then " reward 0.5 kl 0.01" when logged
STEP_LINE = re.compile(
    r"step (?P<step>\d+)/\d+ \(\d+%\) loss (?P<loss>\S+) lr (?P<lr>\S+) eta \S+"
    r"(?: reward (?P<reward>\S+))?(?: kl (?P<kl>\S+))?"
)
SERIES = (("loss", "loss"), ("lr", "learning rate"), ("reward", "reward"), ("kl", "KL"))
WIDTH, HEIGHT, PAD = 440, 160, 58


def logged_steps(messages_oldest_first: Iterable[str]) -> dict[int, dict[str, float]]:
    """Each logged step's numbers (``loss``, ``lr``, and ``reward``, ``kl`` when logged), by step."""
    steps: dict[int, dict[str, float]] = {}
    for message in messages_oldest_first:
        if found := STEP_LINE.search(message):
            numbers = {k: float(v) for k, v in found.groupdict().items() if v is not None and k != "step"}
            steps[int(found["step"])] = numbers
    return dict(sorted(steps.items()))


def series(steps: dict[int, dict[str, float]]) -> list[tuple[str, list[tuple[float, float]]]]:
    """``(title, [(step, value), ...])`` of every series some step logged, in SERIES order."""
    drawn = []
    for key, title in SERIES:
        points = [(float(step), numbers[key]) for step, numbers in steps.items() if key in numbers]
        if points:
            drawn.append((title, points))
    return drawn


def _scale(values: list[float], low_px: float, high_px: float):
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return lambda v: low_px + (v - low) / span * (high_px - low_px)


def _label(value: float) -> str:
    return f"{value:.3g}" if 1e-3 <= abs(value) < 1e4 or value == 0 else f"{value:.2e}"


def chart(title: str, points: list[tuple[float, float]], x_label: str = "step") -> Markup:
    """One curve as an SVG: a line through the points, a circle (class ``point``, titled with its
    values) at each, and the axes' ends labelled."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x = _scale(xs, PAD, WIDTH - 8)
    y = _scale(ys, HEIGHT - 24, 20)
    line = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in points)
    dots = "".join(
        f'<circle class="point" cx="{x(a):.1f}" cy="{y(b):.1f}" r="3">'
        f"<title>{escape(x_label)} {a:g}: {_label(b)}</title></circle>"
        for a, b in points
    )
    bottom = HEIGHT - 24
    axes = (
        f'<line class="axis" x1="{PAD}" y1="{bottom}" x2="{WIDTH - 8}" y2="{bottom}"/>'
        f'<text x="{PAD}" y="{bottom + 16}">{min(xs):g}</text>'
        f'<text x="{WIDTH - 8}" y="{bottom + 16}" text-anchor="end">{escape(x_label)} {max(xs):g}</text>'
        f'<text x="{PAD - 4}" y="{y(max(ys)) + 4:.1f}" text-anchor="end">{_label(max(ys))}</text>'
        f'<text x="{PAD - 4}" y="{y(min(ys)) + 4:.1f}" text-anchor="end">{_label(min(ys))}</text>'
    )
    name = re.sub(r"\W+", "-", title.lower()).strip("-")
    return Markup(
        f'<figure class="curve" id="curve-{name}"><figcaption>{escape(title)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img">'
        f'{axes}<polyline class="line" points="{line}"/>{dots}</svg></figure>'
    )


def charts(messages_oldest_first: Iterable[str], deltas: list[dict] | None = None) -> Markup:
    """Every curve of a run's log, then its evaluations' per-question F1 deltas (sorted, one chart
    per dataset and mode)."""
    drawn = [chart(title, points) for title, points in series(logged_steps(messages_oldest_first))]
    groups: dict[str, list[float]] = {}
    for row in deltas or []:
        groups.setdefault(f"F1 delta vs base, {row['dataset']} {row['mode']}", []).append(row["delta"])
    for title, values in groups.items():
        ranked = [(float(i), v) for i, v in enumerate(sorted(values), 1)]
        drawn.append(chart(title, ranked, x_label="question"))
    return Markup("").join(drawn)
