"""A repair that fails half way never hides a loss, and the next repair finishes it.

One small DecEx build (3 HotpotQA questions) with the scripted engine of ``tests/cluster_engine.py``,
which a build names in ``runner.preload``, so that a `ragfactory check --repair` in another
process (the real command line, as an operator runs it) can rebuild with the same engine.

1. A nodes shard is truncated; `check --repair` runs with a Prefect server that cannot start in
   time (its start-up timeout set to 1 s: Prefect reads it only if the command sets Prefect's
   environment before Prefect is imported). The repair fails with one line saying which shard
   is still set aside and the command that finishes the repair.
2. `check` then fails (exit 1) naming the quarantined shard: its rows are not in the warehouse.
3. A second `check --repair` completes: every table equals the undamaged build's, the run keeps
   its config_hash (the warehouse root is not in it), and the flow ran under the Prefect
   settings the command set (its log's ``prefect settings`` line: a temporary home of its own,
   the 180 s start-up timeout).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.flows.build import build
from ragfactory.flows.config import BuildConfig
from ragfactory.warehouse.store import Warehouse
from tests.faults.tables import table_rows
from tests.flows.scripted_policies import decex_config

pytestmark = [pytest.mark.cluster, pytest.mark.subprocess, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
RUN = "decex-test"
SHARD = f"nodes/run_id={RUN}/decex-0000.parquet"


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    import tests.cluster_engine as cluster
    from ragfactory.tasks.llm.registry import unregister_backend

    cluster.register()  # as the preload does in the CLI; an earlier module of this worker may have imported it

    root = tmp_path_factory.mktemp("undisturbed") / "wh"
    data = decex_config(root).model_dump(mode="json")
    data["llm"]["policy"]["backend"] = cluster.ENGINE
    data["runner"]["preload"] = ["tests.cluster_engine"]
    config = BuildConfig.model_validate(data)
    try:
        assert build(config, run_id=RUN)["status"] == "completed"
    finally:
        unregister_backend(cluster.ENGINE)
    return root


def _repair(root: Path, **env: str) -> subprocess.CompletedProcess:
    """`ragfactory check --repair` in a process of its own, as from a shell (no Prefect API)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    base |= {"PYTHONPATH": str(REPO), "COLUMNS": "400", **env}
    return subprocess.run(
        [sys.executable, "-m", "ragfactory.cli", "check", "--repair", "--root", str(root)],
        cwd=REPO,
        env=base,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_repair_whose_prefect_never_starts_leaves_the_loss_named_and_a_second_repair_ends_it(undisturbed, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(undisturbed, root)
    shard = root / SHARD
    recorded = json.loads((root / "_manifest" / f"{SHARD}.json").read_text())["rows"]
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])

    failed = _repair(root, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    [line] = [line for line in failed.stdout.splitlines() if line.startswith("error:")]
    assert line.endswith(
        f"; the repair did not finish: 1 shard(s) quarantined or missing ({SHARD}), their rows "
        f"not in the warehouse; `ragfactory check --repair --root {root}` finishes it"
    ), line
    assert "Traceback" not in failed.stdout + failed.stderr

    result = CliRunner().invoke(app, ["check", "--root", str(root)])
    assert result.exit_code == 1
    [stamp] = [p.name for p in (root / "_quarantine").iterdir()]
    assert result.output.splitlines() == [
        f"quarantined: {SHARD} (nodes): its {recorded} rows set aside in _quarantine/{stamp}/{SHARD}, not rebuilt yet",
        f"1 file(s) under {root} cannot be trusted; 1 of them quarantined or missing: their rows are not in the "
        f"warehouse; `ragfactory check --repair --root {root}` rebuilds the damaged ones",
    ]

    done = _repair(root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"run {RUN}: completed" in done.stdout
    assert done.stdout.splitlines()[-1] == f"ok: every shard file under {root} matches its manifest entry"
    assert table_rows(root) == table_rows(undisturbed)
    [before] = Warehouse(undisturbed).read("runs").to_pylist()
    [after] = Warehouse(root).read("runs").to_pylist()
    assert after["config_hash"] == before["config_hash"]
    logs = sorted((root / "logs").glob("repair-*.log"))
    # the repair flow's line, and the line of the build it ran again
    settings = {
        line.split(" - ")[-1].split("prefect settings: ")[1].rsplit(" api=", 1)[0]
        for log in logs
        for line in log.read_text().splitlines()
        if "prefect settings:" in line
    }
    [(home, timeout)] = [tuple(part.split("=", 1)[1] for part in line.split()) for line in settings]
    assert Path(home).name.startswith("ragfactory-prefect-") and timeout == "180"
    assert not Path(home).exists()  # removed when the command ended
