"""UCT selection, expansion slots, SPRE and backpropagation of the MCTS core (ReasonRAG, Appendix A).

Every expected number is worked out by hand in the comments: Eq. 5 with c = 1,
UCT(s_i) = Q(s_i) + √(Σ_j N(s_j)) / (1 + N(s_i)), siblings summed; Eq. 7 backs a new step's
value up to the root; Eq. 1 averages v · α^steps over rollouts.
"""

from __future__ import annotations

import pytest

from ragfactory.tasks.search.mcts.uct import UctSearch, UctSettings, spre


def test_spre_discounts_long_correct_rollouts():
    # (1.0 · 0.9² + 0.5 · 0.9³ + 0 · 0.9) / 3 = (0.81 + 0.3645 + 0) / 3 = 0.39150
    assert spre([1.0, 0.5, 0.0], [2, 3, 1], alpha=0.9) == pytest.approx(0.3915)
    # α = 1 is the plain Monte-Carlo mean
    assert spre([1.0, 0.0], [5, 1], alpha=1.0) == pytest.approx(0.5)
    assert spre([], [], alpha=0.9) == 0.0
    with pytest.raises(ValueError, match="alpha must be in"):
        spre([1.0], [1], alpha=0.0)
    with pytest.raises(ValueError, match="2 rollout values but 1 step counts"):
        spre([1.0, 0.5], [1], alpha=0.9)


def _step(search: UctSearch, value: float, terminal: bool) -> tuple[int, int]:
    parent = search.select()
    child = search.backpropagate(parent, value, terminal)
    return parent, child


def test_six_iterations_by_hand():
    search = UctSearch(UctSettings(c=1.0, child_limit=2, max_depth=2))
    # 1. the root has no child: expand it -> A (1), value 0.5
    assert _step(search, 0.5, False) == (0, 1)
    # 2. the root has one child of two: expand it again -> B (2), value 0.2
    assert _step(search, 0.2, False) == (0, 2)
    # 3. root full. ΣN = 2: A = 0.5 + √2/2 = 1.2071, B = 0.2 + √2/2 = 0.9071 -> A;
    #    A has a free slot: C (3), an answer at depth 2, value 0.9
    assert search.uct(1) == pytest.approx(1.207107, abs=1e-6)
    assert search.uct(2) == pytest.approx(0.907107, abs=1e-6)
    assert _step(search, 0.9, True) == (1, 3)
    # 4. A: N 2, Q (0.5 + 0.9)/2 = 0.7; ΣN = 3: A = 0.7 + √3/3 = 1.2774, B = 0.2 + √3/2 = 1.0660
    #    -> A, its second slot: D (4), a wrong answer, value 0
    assert search.uct(1) == pytest.approx(1.277350, abs=1e-6)
    assert search.uct(2) == pytest.approx(1.066025, abs=1e-6)
    assert _step(search, 0.0, True) == (1, 4)
    # 5. A: N 3, Q 1.4/3 = 0.46667; ΣN = 4: A = 0.46667 + 2/4 = 0.96667, B = 0.2 + 2/2 = 1.2 -> B;
    #    E (5), value 0.6
    assert search.uct(1) == pytest.approx(0.966667, abs=1e-6)
    assert search.uct(2) == pytest.approx(1.2, abs=1e-6)
    assert _step(search, 0.6, True) == (2, 5)
    # 6. B: N 2, Q 0.8/2 = 0.4; ΣN = 5, √5 = 2.236068:
    #    A = 0.466667 + 2.236068/4 = 1.025684, B = 0.4 + 2.236068/3 = 1.145356 -> B; F (6), value 0.3
    assert search.uct(1) == pytest.approx(1.025684, abs=1e-6)
    assert search.uct(2) == pytest.approx(1.145356, abs=1e-6)
    assert _step(search, 0.3, True) == (2, 6)
    # 7. A and B are full and their children answers: nothing is left, the search is done
    assert search.select() is None and search.done()
    visits = [n.visits for n in search.nodes]
    assert visits == [6, 3, 3, 1, 1, 1, 1]
    # root (0.5 + 0.2 + 0.9 + 0 + 0.6 + 0.3)/6; A (0.5 + 0.9 + 0)/3; B (0.2 + 0.6 + 0.3)/3
    assert [round(search.q(i), 5) for i in range(7)] == [0.41667, 0.46667, 0.36667, 0.9, 0.0, 0.6, 0.3]
    assert [n.depth for n in search.nodes] == [0, 1, 1, 2, 2, 2, 2]
    assert all(n.in_flight == 0 and n.expanding == 0 for n in search.nodes)


def test_a_second_selection_in_flight_goes_to_another_branch():
    search = UctSearch(UctSettings(c=1.0, child_limit=2, max_depth=2))
    _step(search, 0.5, False)  # A
    _step(search, 0.2, False)  # B
    # first selection of the round: A, as in the sequential search (1.2071 > 0.9071)
    assert search.select() == 1
    # A now carries one visit of value 0 in flight: N' 2, Q' 0.5/2 = 0.25; ΣN' = 3:
    # A = 0.25 + √3/3 = 0.82735, B = 0.2 + √3/2 = 1.06603 -> B
    assert search.uct(1) == pytest.approx(0.827350, abs=1e-6)
    assert search.select() == 2
    search.backpropagate(2, 0.6, True)
    search.backpropagate(1, 0.9, True)
    assert [n.visits for n in search.nodes[:3]] == [4, 2, 2]
    assert all(n.in_flight == 0 for n in search.nodes)


def test_free_slots_count_expansions_in_flight_and_abandon_releases_them():
    search = UctSearch(UctSettings(c=1.0, child_limit=1, max_depth=3))
    assert search.select() == 0
    # the root's only slot is taken by the expansion in flight and it has no child yet
    assert search.select() is None and not search.done()
    search.abandon(0)
    assert search.nodes[0].in_flight == 0 and search.nodes[0].expanding == 0
    assert search.select() == 0


def test_ln_form_of_the_bonus():
    search = UctSearch(UctSettings(c=1.0, child_limit=2, max_depth=2, log_visits=True))
    _step(search, 0.5, False)
    _step(search, 0.2, False)
    # A = 0.5 + √(ln 2 / 2) = 0.5 + 0.58871 = 1.08871
    assert search.uct(1) == pytest.approx(1.088705, abs=1e-6)


def test_below_the_root_the_bonus_sums_the_siblings_visits_not_the_parents():
    search = UctSearch(UctSettings(c=1.0, child_limit=2, max_depth=3))
    assert _step(search, 0.4, False) == (0, 1)  # A
    assert _step(search, 0.0, False) == (0, 2)  # B
    # ΣN 2: A = 0.4 + √2/2 = 1.107107, B = 0 + 0.707107 -> A; C (3) at depth 2, value 0.6
    assert _step(search, 0.6, False) == (1, 3)
    # A: N 2, Q 0.5; ΣN 3: A = 0.5 + √3/3 = 1.077350, B = √3/2 = 0.866025 -> A; D (4), value 0.2
    assert _step(search, 0.2, False) == (1, 4)
    # A: N 3, Q 0.4; ΣN 4: A = 0.4 + 2/4 = 0.9, B = 0 + 2/2 = 1.0 -> B; E (5), an answer, value 0.1
    assert _step(search, 0.1, True) == (2, 5)
    # B: N 2, Q 0.05; ΣN 5: A = 0.4 + 2.236068/4 = 0.959017, B = 0.05 + 2.236068/3 = 0.795356 -> A.
    # A is full: among C (N 1, Q 0.6) and D (N 1, Q 0.2) the sum is N(C) + N(D) = 2, while A's own
    # N is 3 (its own value counts too): C = 0.6 + √2/2 = 1.307107, D = 0.2 + √2/2 = 0.907107
    assert search.uct(1) == pytest.approx(0.959017, abs=1e-6)
    assert search.uct(3) == pytest.approx(1.307107, abs=1e-6)
    assert search.uct(4) == pytest.approx(0.907107, abs=1e-6)
    assert _step(search, 1.0, True) == (3, 6)  # G below C
    # C (0.6 + 1.0)/2, A (0.4 + 0.6 + 0.2 + 1.0)/4, root 2.3/6
    assert [search.nodes[i].visits for i in (0, 1, 3)] == [6, 4, 2]
    assert [round(search.q(i), 5) for i in (0, 1, 3)] == [0.38333, 0.55, 0.8]
