"""Damaged warehouse files: what a query, `tables` and `check` say, and `check --repair`.

One small DecEx build (3 HotpotQA questions, a scripted engine, the real flow, BM25 index and
warehouse) is made once; each test damages its own copy, as a disk, a person or a tool would,
and after `check --repair` every table equals the undisturbed build's row for row.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from ragfactory.cli import app
from ragfactory.flows.build import build
from ragfactory.warehouse.integrity import check
from ragfactory.warehouse.store import Warehouse
from tests.fakes import ScriptedBackend, registered_engine
from tests.faults.tables import table_rows
from tests.flows.scripted_policies import decex_config, decex_hotpotqa

# Each test, build copy and repair included, ends within this many seconds (a build of 3 questions
# with the scripted engine takes about 20 s here); a hang fails the test instead of the suite.
pytestmark = pytest.mark.timeout(300)

runner = CliRunner()
RUN = "decex-test"  # the run id every test names, set by the build below


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    root = tmp_path_factory.mktemp("undisturbed") / "wh"
    with registered_engine(ScriptedBackend(decex_hotpotqa)):
        summary = build(decex_config(root), run_id=RUN)
    assert summary["status"] == "completed"
    return root


@pytest.fixture
def damaged(undisturbed, tmp_path, engines):
    """A copy of the undisturbed warehouse (whose runs record the original root) to damage."""
    engines(ScriptedBackend(decex_hotpotqa))
    root = tmp_path / "copy"
    shutil.copytree(undisturbed, root)
    return root


def _cli(*args: str):
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error:")]


def _nodes_shard(root: Path) -> Path:
    return root / "nodes" / f"run_id={RUN}" / "decex-0000.parquet"


def test_a_truncated_shard_fails_only_its_table_and_repair_rebuilds_it(undisturbed, damaged):
    shard = _nodes_shard(damaged)
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[: size // 2])
    relative = f"nodes/run_id={RUN}/decex-0000.parquet"

    code, out = _cli("sql", "select count(*) as n from questions", "--root", str(damaged), "--format", "csv")
    assert code == 0 and out.splitlines() == ['"n"', "3"]
    code, out = _cli("sql", "select count(*) from nodes", "--root", str(damaged))
    assert code == 1
    assert _error_lines(out) == [
        f"error: query failed: Invalid Input Error: table nodes cannot be read: damaged file {relative} "
        f"({size // 2} bytes, recorded {size}); list the damage with "
        f"`ragfactory check --root {damaged}`, rebuild it with `ragfactory check --repair --root {damaged}`"
    ]
    code, out = _cli("tables", "--root", str(damaged))
    assert code == 1
    assert "│ questions " in out and "│ nodes " in out and "damaged" in out
    assert len(_error_lines(out)) == 1 and relative in _error_lines(out)[0]

    code, out = _cli("check", "--root", str(damaged))
    assert code == 1
    assert out.splitlines()[0].startswith(f"damaged: {relative} (nodes): ")
    assert out.splitlines()[-1] == (
        f"1 file(s) under {damaged} cannot be trusted; `ragfactory check --repair "
        f"--root {damaged}` rebuilds the damaged ones"
    )

    code, out = _cli("check", "--repair", "--root", str(damaged))
    assert code == 0, out
    assert f"run {RUN}: completed" in out
    assert out.splitlines()[-1] == f"ok: every shard file under {damaged} matches its manifest entry"
    quarantined = list((damaged / "_quarantine").rglob("decex-0000.parquet"))
    assert len(quarantined) == 1 and quarantined[0].stat().st_size == size // 2
    assert shard.stat().st_size == size
    assert table_rows(damaged) == table_rows(undisturbed)


def test_a_shard_with_rows_removed_is_named_and_repaired(undisturbed, damaged):
    shard = _nodes_shard(damaged)
    rows = pq.read_table(shard)
    assert rows.num_rows > 1
    pq.write_table(rows.slice(0, 1), shard)

    code, out = _cli("sql", "select count(*) from nodes", "--root", str(damaged))
    assert code == 1 and f"damaged file nodes/run_id={RUN}/decex-0000.parquet" in _error_lines(out)[0]
    problems = check(Warehouse(damaged))
    assert [(p.kind, p.path) for p in problems] == [("damaged", f"nodes/run_id={RUN}/decex-0000.parquet")]
    assert f"1 rows, recorded {rows.num_rows}" in problems[0].detail

    code, out = _cli("check", "--repair", "--root", str(damaged))
    assert code == 0, out
    assert table_rows(damaged) == table_rows(undisturbed)


def test_a_deleted_index_file_is_named_and_the_index_rebuilt(undisturbed, damaged):
    folders = sorted((damaged / "artifacts" / "indexes").glob("bm25-*"))
    assert len(folders) == 1
    victim = sorted(p for p in folders[0].rglob("*.npy"))[0]
    name = victim.relative_to(folders[0]).as_posix()
    victim.unlink()

    code, out = _cli("check", "--root", str(damaged))
    assert code == 1
    assert out.splitlines()[0] == (f"damaged: artifacts/indexes/{folders[0].name} (index): {name} is missing")
    code, out = _cli("check", "--repair", "--root", str(damaged))
    assert code == 0, out
    assert victim.is_file()
    original = undisturbed / "artifacts" / "indexes" / folders[0].name
    assert {
        p.relative_to(original).as_posix(): p.read_bytes()
        for p in original.rglob("*")
        if p.is_file() and p.name != "manifest.json"
    } == {
        p.relative_to(folders[0]).as_posix(): p.read_bytes()
        for p in folders[0].rglob("*")
        if p.is_file() and p.name != "manifest.json"
    }
    assert table_rows(damaged) == table_rows(undisturbed)


@contextlib.contextmanager
def read_only(root: Path):
    """``root`` made read-only for this process: by permissions for an ordinary user, by a
    read-only bind mount for root (whom permissions do not stop)."""
    if os.geteuid() != 0:
        paths = [root, *root.rglob("*")]
        for path in paths:
            path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            for path in paths:
                path.chmod(0o755 if path.is_dir() else 0o644)
        return
    mounted = subprocess.run(["mount", "--bind", str(root), str(root)], capture_output=True, text=True)
    assert mounted.returncode == 0, f"cannot make {root} read-only: {mounted.stderr}"
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(root)], capture_output=True, text=True)
        assert remount.returncode == 0, f"cannot make {root} read-only: {remount.stderr}"
        yield
    finally:
        subprocess.run(["umount", str(root)], check=True)


def test_tables_and_check_work_on_a_read_only_root(undisturbed, tmp_path):
    root = tmp_path / "wh"
    shutil.copytree(undisturbed, root)
    catalog = (root / "catalog.duckdb").read_bytes()
    with read_only(root):
        with pytest.raises(OSError):
            (root / "probe").write_text("")
        code, out = _cli("tables", "--root", str(root))
        assert code == 0, out
        assert f"catalog: {root / 'catalog.duckdb'} not refreshed: {root} is read-only for this user" in out
        questions = next(line for line in out.splitlines() if line.startswith("│ questions "))
        assert questions.split("│")[3].strip() == "3"
        code, out = _cli("check", "--root", str(root))
        assert code == 0, out
        assert out.splitlines()[-1] == f"ok: every shard file under {root} matches its manifest entry"
        code, out = _cli("sql", "select count(*) as n from nodes", "--root", str(root), "--format", "csv")
        assert code == 0 and int(out.splitlines()[1]) > 0
    assert (root / "catalog.duckdb").read_bytes() == catalog


def test_a_damaged_trainer_file_fails_check_by_name_and_repair_rebuilds_it(undisturbed, damaged):
    relative = f"artifacts/llamafactory/{RUN}/decex_sft.parquet"
    trainer_file = damaged / relative
    size = trainer_file.stat().st_size
    trainer_file.write_bytes(trainer_file.read_bytes()[: size // 2])

    for args in (["check"], ["check", "--exports"]):
        code, out = _cli(*args, "--root", str(damaged))
        assert code == 1 and "Traceback" not in out, out
        assert out.splitlines()[0].startswith(f"damaged: {relative} (export): {size // 2} bytes, recorded {size}")
    code, out = _cli("check", "--repair", "--root", str(damaged))
    assert code == 0, out
    assert trainer_file.read_bytes() == (undisturbed / relative).read_bytes()
    code, out = _cli("check", "--exports", "--root", str(damaged))
    assert code == 0, out


def test_a_dataset_card_datasets_cannot_read_is_named_by_check_and_by_check_exports(damaged):
    folder = damaged / "sft_examples" / f"run_id={RUN}"
    card = folder / "README.md"
    card.write_text(card.read_text().replace("configs:", "configs: [", 1))
    code, out = _cli("check", "--root", str(damaged))
    assert code == 1 and out.splitlines()[0].startswith(f"damaged: sft_examples/run_id={RUN}/README.md (export): ")

    # a card written before cards were recorded: `--adopt` vouches for it, the loader still refuses it
    (damaged / "_manifest" / "sft_examples" / f"run_id={RUN}" / "README.md.json").unlink()
    code, out = _cli("check", "--adopt", "--exports", "--root", str(damaged))
    assert code == 1 and "Traceback" not in out, out
    [line] = [line for line in out.splitlines() if line.startswith("unloadable:")]
    assert line.startswith(f"unloadable: {folder}: ")


def test_a_command_on_a_read_only_root_is_one_line_naming_the_root(undisturbed, tmp_path, engines):
    engines(ScriptedBackend(decex_hotpotqa))
    root = tmp_path / "wh"
    shutil.copytree(undisturbed, root)
    config = tmp_path / "build.yaml"
    config.write_text(yaml.safe_dump(decex_config(root).model_dump(mode="json")))
    why = "Read-only file system" if os.geteuid() == 0 else "Permission denied"  # see read_only
    line = f"error: the warehouse root {root} is not writable: cannot write the log in {root / 'logs'} ({why})"
    with read_only(root):
        for args in (["build", "--config", str(config)], ["train", "--method", "sft", "--run-id", RUN]):
            code, out = _cli(*args, "--root", str(root))
            assert (code, _error_lines(out)) == (1, [line]), out
            assert "Traceback" not in out
    assert table_rows(root) == table_rows(undisturbed)
