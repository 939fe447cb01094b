"""The Rewards page's label panel (ragfactory/dashboard/labels.py) over the two HotpotQA trees of
tests/warehouse/test_labels.py: values set to 0.8 x gold recall on all 9 steps, format 1 on each."""

from __future__ import annotations

from fastapi.testclient import TestClient

from ragfactory.dashboard.app import create_app
from ragfactory.dashboard.labels import agreement_tables
from ragfactory.dashboard.queries import reading
from tests.warehouse.labelled import hotpotqa_warehouse


def test_agreement_tables_and_search_summary(tmp_path):
    wh = hotpotqa_warehouse(tmp_path)
    with reading(wh) as reader:
        (table,) = agreement_tables(reader, "r1")
    assert table["strategy"] == "treeps" and table["sources"] == ["format", "gold_support", "mc_value"]
    same, constant = {"rho": 1.0, "tau_b": 1.0, "n": 9}, {"rho": None, "tau_b": None, "n": 9}
    assert table["cells"] == [[None, constant, constant], [constant, None, same], [constant, same, None]]
    page = TestClient(create_app(wh)).get("/rewards", params={"run": "r1"}).text
    assert 'id="agreement-treeps"' in page
    assert "ρ 1.00 · τ 1.00 · n 9" in page and "ρ – · τ – · n 9" in page
    # 3 trajectories (leaves): Tokarev's 3 searches found 2 of 2 (over, one repeated query), Black
    # Book's first branch 0 of 2 in 1 search (under), its second 2 of 2 in 2 (equal):
    # mean recall (1 + 0 + 1) / 3 = 0.667, mean searches (3 + 1 + 2) / 3 = 2.0
    row = page.split('id="search-summary"')[1].split("</table>")[0].split("<td>treeps</td>")[1].split("</tr>")[0]
    cells = [c.split("</td>")[0] for c in row.split("<td>")[1:]]
    assert cells == ["3", "3", "0.667", "2", "2.0", "1", "1", "1", "1"]
