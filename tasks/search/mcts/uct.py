"""The search itself, without a model: UCT selection, expansion slots, SPRE values, backup.

ReasonRAG §2.2.2 and Appendix A, on a tree of step indices. The model-facing driver asks
``select`` for the node to expand, generates one step there (and simulates it), and hands the
step's value back to ``backpropagate``.

Formulas (ReasonRAG):

- SPRE, Eq. 1: the value of a partial trajectory y_1..t is
  Q_t = (1/k) Σ_i v(rollout_i) · α^{steps(rollout_i)},
  v ∈ [0, 1] the rollout's correctness (F1 against the gold answers), steps the number of steps
  of the whole trajectory, α ∈ (0, 1] the decay that favours short correct paths (``spre``).
- Selection, Eq. 5: from the root, the child maximising
  Q(s_i) + c · √(Σ_j N(s_j)) / (1 + N(s_j)),
  the sum over the children of the same parent. ``log_visits`` takes the classic UCT form
  Q + c · √(ln Σ_j N(s_j) / (1 + N(s_i))) instead.
- Backpropagation, Eq. 7: N(s) ← N(s) + 1 on the path from the new node to the root, and Q(s)
  the mean of the step values backed up through s (Eq. 1 over every trajectory below s).

Where the paper is silent (its public code decides the same way):

- A node is expanded while it has fewer than ``child_limit`` children (and is not an answer, and
  is above ``max_depth``); only then does selection descend to a child. So every state first
  gets ``child_limit`` alternatives to compare, which is what the preference pairs need.
- A node with no child left to select (answers, and nodes whose subtrees are all finished) is
  exhausted; the search ends early when the root is.
- Ties go to the child generated first, so a search is reproducible.

Parallel selections (``virtual loss``): selections in flight through a node count as visits of
value 0 until their values come back, so the next selection of the same round prefers another
branch, and a node's free expansion slots count the expansions in flight. With one selection
per round the search is exactly sequential MCTS.

Blind spot: values are trusted as given; a step whose value never comes back (its request
failed) must still be released with ``abandon``, or its virtual loss stays on the path.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field


def spre(values: Sequence[float], steps: Sequence[int], alpha: float) -> float:
    """Eq. 1: the mean of v_i · α^{steps_i} over the rollouts (0 with no rollout)."""
    if len(values) != len(steps):
        raise ValueError(f"spre: {len(values)} rollout values but {len(steps)} step counts")
    if not 0 < alpha <= 1:
        raise ValueError(f"spre: alpha must be in (0, 1], got {alpha}")
    if not values:
        return 0.0
    return sum(v * alpha**n for v, n in zip(values, steps)) / len(values)


@dataclass(frozen=True)
class UctSettings:
    c: float = 1.0
    child_limit: int = 3
    max_depth: int = 6
    log_visits: bool = False


@dataclass
class SearchNode:
    """One step of the tree: ``depth`` counts steps from the question (the root is 0)."""

    index: int
    parent: int | None
    depth: int
    terminal: bool = False
    visits: int = 0
    value_sum: float = 0.0
    in_flight: int = 0  # selections through this node whose values have not come back
    expanding: int = 0  # expansions of this node in flight
    children: list[int] = field(default_factory=list)


class UctSearch:
    """The statistics of one question's tree and the selection over them (module docstring)."""

    def __init__(self, settings: UctSettings):
        self.settings = settings
        self.nodes: list[SearchNode] = [SearchNode(0, None, 0)]

    def q(self, index: int, virtual: bool = True) -> float:
        """Mean backed-up value; selections in flight count as visits of value 0."""
        node = self.nodes[index]
        n = node.visits + (node.in_flight if virtual else 0)
        return node.value_sum / n if n else 0.0

    def uct(self, index: int) -> float:
        """Eq. 5 (or the ln form) of a child, visits in flight included."""
        node = self.nodes[index]
        siblings = self.nodes[node.parent].children if node.parent is not None else [index]
        total = sum(self.nodes[i].visits + self.nodes[i].in_flight for i in siblings)
        n = node.visits + node.in_flight
        if self.settings.log_visits:
            bonus = math.sqrt(math.log(total) / (1 + n)) if total > 0 else 0.0
        else:
            bonus = math.sqrt(total) / (1 + n)
        return self.q(index) + self.settings.c * bonus

    def expandable(self, index: int) -> bool:
        node = self.nodes[index]
        return (
            not node.terminal
            and node.depth < self.settings.max_depth
            and len(node.children) + node.expanding < self.settings.child_limit
        )

    def exhausted(self, index: int) -> bool:
        """No expansion slot left below ``index`` and nothing to select."""
        if self.expandable(index):
            return False
        node = self.nodes[index]
        return node.terminal or all(self.exhausted(c) for c in node.children) and not node.expanding

    def done(self) -> bool:
        """Nothing left to expand and nothing in flight."""
        return self.exhausted(0) and self.nodes[0].in_flight == 0

    def select(self) -> int | None:
        """The node to expand next, its path marked in flight; None when nothing can be selected
        now (the tree is ``done``, or every open branch waits for a value in flight)."""
        index = 0
        path = [0]
        while not self.expandable(index):
            node = self.nodes[index]
            open_children = [c for c in node.children if not self.exhausted(c)]
            if not open_children:
                return None
            index = max(open_children, key=lambda c: (self.uct(c), -c))
            path.append(index)
        for i in path:
            self.nodes[i].in_flight += 1
        self.nodes[index].expanding += 1
        return index

    def backpropagate(self, parent: int, value: float, terminal: bool) -> int:
        """Add the child generated at ``parent`` with its value; back the value up to the root
        (Eq. 7) and release the selection's virtual loss. Returns the child's index."""
        child = SearchNode(len(self.nodes), parent, self.nodes[parent].depth + 1, terminal, visits=1, value_sum=value)
        self.nodes.append(child)
        self.nodes[parent].children.append(child.index)
        self.nodes[parent].expanding -= 1
        index: int | None = parent
        while index is not None:
            node = self.nodes[index]
            node.visits += 1
            node.value_sum += value
            node.in_flight -= 1
            index = node.parent
        return child.index

    def abandon(self, parent: int) -> None:
        """Release a selection at ``parent`` whose step never came back (no node, no value)."""
        self.nodes[parent].expanding -= 1
        index: int | None = parent
        while index is not None:
            self.nodes[index].in_flight -= 1
            index = self.nodes[index].parent
