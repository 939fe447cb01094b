"""The dashboard in Debian's headless Chromium (1400×900), over one scripted build of all five
strategies (tests/dashboard/built.py): what a person sees, read from the DOM.

For each strategy's first question, no two tree labels overlap and none leaves the view; the
seed of an LLM call is shown digit for digit (past 2^53, where JavaScript numbers round); the
Rewards page draws one visible histogram per strategy; the SQL page shows DuckDB's error whole.
``RAGFACTORY_UPDATE_SCREENSHOTS=1`` (``make screenshots``) copies each page's screenshot to
docs/images/. The app runs in this process (uvicorn in a thread), the build once per session.
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from ragfactory.warehouse.catalog import query
from ragfactory.warehouse.store import Warehouse
from tests.dashboard.built import RUN_ID
from tests.e2e.stack import REPO, UPDATE_SCREENSHOTS, Chromium

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]  # headless Chromium

STRATEGIES = ("decex", "treeps", "mcts", "r3", "apex")
# every label's box against every other and against the tree's frame, in page pixels
LABEL_GEOMETRY = """
const view = document.getElementById('tree').getBoundingClientRect();
const boxes = [...document.querySelectorAll('#tree g.node text')].map(t => {
  const r = t.getBoundingClientRect(); return {text: t.textContent, l: r.left, r: r.right, t: r.top, b: r.bottom};
});
const overlaps = [], outside = [];
boxes.forEach((a, i) => {
  if (a.l < view.left || a.r > view.right || a.t < view.top || a.b > view.bottom) outside.push(a.text);
  boxes.slice(i + 1).forEach(b => { if (a.l < b.r && b.l < a.r && a.t < b.b && b.t < a.b) overlaps.push([a.text, b.text]); });
});
return {n: boxes.length, overlaps: overlaps, outside: outside, smallest: Math.min(...boxes.map(b => b.b - b.t))};
"""


@pytest.fixture(scope="module")
def dashboard(five_strategies):
    import uvicorn
    from prefect.settings import PREFECT_API_URL

    from ragfactory.dashboard.app import create_app
    from ragfactory.serve import free_port

    port = free_port()
    app = create_app(Warehouse(five_strategies), prefect_api_url=PREFECT_API_URL.value())  # the build's server
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the dashboard did not start in 30 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with Chromium(tmp_path_factory.mktemp("chromium")) as driver:
        driver.set_window_size(1400, 900)
        yield driver


def _wait(driver, seconds: float = 30):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds)


def _shoot(driver, name: str, tmp_path) -> None:
    shot = tmp_path / f"dashboard-{name}.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get(UPDATE_SCREENSHOTS):
        shutil.copyfile(shot, REPO / "docs" / "images" / shot.name)


def _open_tree(browser, dashboard, strategy: str, question: str) -> None:
    browser.get(f"{dashboard}/tree?run={RUN_ID}&strategy={strategy}&question={question}")
    _wait(browser).until(lambda d: d.execute_script("return document.body.dataset.treeReadyMs"))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_tree_labels_neither_overlap_nor_leave_the_view(dashboard, browser, strategy):
    from selenium.webdriver.common.by import By

    browser.get(f"{dashboard}/tree?run={RUN_ID}")
    first = browser.find_element(By.CSS_SELECTOR, f"#question-pick option[data-strategy='{strategy}']")
    _open_tree(browser, dashboard, strategy, first.get_attribute("value"))
    geometry = browser.execute_script(LABEL_GEOMETRY)
    assert geometry["n"] >= 3, geometry  # the question and at least two steps are drawn
    assert geometry["overlaps"] == [] and geometry["outside"] == [], geometry
    assert geometry["smallest"] >= 8, geometry  # readable: 11 px text at scale 0.8 or more
    root = browser.find_element(By.CSS_SELECTOR, "#tree g.node.root text").text
    assert root.startswith("question · "), root  # the root is the question, neither kept nor pruned


def test_apex_chains_fold_into_one_node(five_strategies, dashboard, browser):
    from selenium.webdriver.common.by import By

    [question] = (
        query(
            Warehouse(five_strategies),
            """
        select question_id from nodes where run_id = $run and strategy = 'apex'
        group by 1 order by max(depth) desc limit 1""",
            {"run": RUN_ID},
        )
        .column("question_id")
        .to_pylist()
    )
    _open_tree(browser, dashboard, "apex", question)
    chains = browser.find_elements(By.CSS_SELECTOR, "#tree g.node.chain text")
    assert chains and all(" steps" in c.text for c in chains)
    assert browser.execute_script(LABEL_GEOMETRY)["overlaps"] == []


def test_the_seed_shown_is_the_stored_one(five_strategies, dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By

    [row] = query(
        Warehouse(five_strategies),
        """
        select n.node_id, n.question_id, c.seed from nodes n
        join llm_calls c on c.run_id = n.run_id and c.call_id = n.llm_call_id
        where n.run_id = $run and n.strategy = 'decex' and n.depth = 1 and abs(c.seed) > 9007199254740991
        order by n.question_id, n.path limit 1""",
        {"run": RUN_ID},
    ).to_pylist()
    _open_tree(browser, dashboard, "decex", row["question_id"])
    browser.find_element(By.CSS_SELECTOR, f"#tree g.node[data-node-id='{row['node_id']}'] text").click()
    _wait(browser).until(lambda d: d.find_element(By.ID, "details").get_attribute("data-node-id") == row["node_id"])
    assert browser.find_element(By.ID, "detail-seed").get_attribute("textContent") == str(row["seed"])
    assert browser.find_element(By.ID, "detail-fate").text.split(":")[0] in ("kept", "pruned")
    _shoot(browser, "tree", tmp_path)


def test_rewards_page_draws_one_visible_series_per_strategy(five_strategies, dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By

    expected = (
        query(
            Warehouse(five_strategies),
            "select distinct strategy from nodes where run_id = $run and is_leaf and reward is not null order by 1",
            {"run": RUN_ID},
        )
        .column("strategy")
        .to_pylist()
    )
    assert expected == sorted(STRATEGIES)
    browser.get(f"{dashboard}/rewards?run={RUN_ID}")
    _wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#plot-leaf_rewards .main-svg"))
    drawn = browser.execute_script("""
        const el = document.getElementById('plot-leaf_rewards');
        return [...el.querySelectorAll('g.trace.bars')].map(g => {
          const r = g.getBoundingClientRect(), i = [...el.querySelectorAll('g.trace.bars')].indexOf(g);
          return {strategy: el.data[i].meta, width: r.width, height: r.height, left: r.left, right: r.right, top: r.top};
        });""")
    assert sorted(d["strategy"] for d in drawn) == expected
    assert all(d["width"] > 0 and d["height"] > 0 for d in drawn), drawn  # every series has visible bars
    for a in drawn:  # small multiples: no series drawn over another
        for b in drawn:
            if a is not b:
                assert a["right"] <= b["left"] or b["right"] <= a["left"] or a["top"] != b["top"], (a, b)
    _shoot(browser, "rewards", tmp_path)


def test_sql_page_shows_a_multi_line_duckdb_error_whole(dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(f"{dashboard}/sql?q=select+nodez+from+nodes")
    error = _wait(browser).until(lambda d: d.find_element(By.ID, "sql-error"))
    lines = error.text.splitlines()
    assert lines[0] == 'query failed: Binder Error: Referenced column "nodez" not found in FROM clause!'
    assert lines[1].startswith("Candidate bindings: ") and len(lines) == 2
    assert browser.find_element(By.CSS_SELECTOR, "#schema details[data-relation='nodes']")
    browser.get(
        f"{dashboard}/sql?q=select+strategy,+sum(depth)+as+depths,+count(*)+as+n+from+nodes+group+by+all+order+by+all"
    )
    assert _wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#result tbody tr"))
    _shoot(browser, "sql", tmp_path)


def test_runs_page_links_the_flow_run_its_server_holds(five_strategies, dashboard, browser, tmp_path):
    from selenium.webdriver.common.by import By

    [flow_run_id] = (
        query(Warehouse(five_strategies), "select flow_run_id from runs where run_id = $run", {"run": RUN_ID})
        .column("flow_run_id")
        .to_pylist()
    )
    browser.get(dashboard)
    section = _wait(browser).until(lambda d: d.find_element(By.ID, f"run-{RUN_ID}"))
    assert "completed" in section.text and all(s in section.text for s in STRATEGIES)
    link = section.find_element(By.CSS_SELECTOR, "a.flow-run-link").get_attribute("href")
    assert link.endswith(f"/runs/flow-run/{flow_run_id}")
    _shoot(browser, "runs", tmp_path)


def test_a_flow_run_its_server_no_longer_holds_is_not_linked(five_strategies, dashboard):
    """Last in the module: it adds a build row whose flow run lived on another (temporary) server."""
    import datetime as dt

    import httpx

    from ragfactory.warehouse.runs import record_run

    gone = "5f0e1d2c-3b4a-4958-8776-655443322110"
    record_run(
        Warehouse(five_strategies),
        "dash-gone",
        "build",
        "completed",
        {},
        "h",
        dt.datetime(2026, 11, 2, tzinfo=dt.UTC),
        flow_run_id=gone,
    )
    page = httpx.get(dashboard, timeout=30).text
    section = page[page.index('id="run-dash-gone"') :]
    assert f"flow run {gone} ran on a temporary Prefect server" in section
    assert f"/runs/flow-run/{gone}" not in page
