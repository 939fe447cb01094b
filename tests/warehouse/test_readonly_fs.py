"""The warehouse:// file system: reads under the root, refuses every change and every way out."""

from __future__ import annotations

import pytest

from ragfactory.warehouse.readonly_fs import ReadOnlyError, WarehouseFileSystem


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "runs" / "run_id=r1").mkdir(parents=True)
    (root / "runs" / "run_id=r1" / "run.parquet").write_bytes(b"PAR1")
    (root / "runs" / "run_id=r1" / ".run.0f.tmp").write_bytes(b"half")
    (tmp_path / "secret.txt").write_text("s3cret")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    return root


def test_reads_and_lists_under_the_root(tree):
    fs = WarehouseFileSystem(tree)
    with fs.open("warehouse://runs/run_id=r1/run.parquet", "rb") as handle:
        assert handle.read() == b"PAR1"
    assert fs.ls("warehouse://runs/run_id=r1", detail=False) == [
        "runs/run_id=r1/.run.0f.tmp",
        "runs/run_id=r1/run.parquet",
    ]
    assert fs.glob("warehouse://**/*.parquet") == ["runs/run_id=r1/run.parquet"]
    assert fs.ls("warehouse://", detail=False) == ["runs"]  # the link out of the root is not listed


@pytest.mark.parametrize(
    "path", ["warehouse://../secret.txt", "warehouse://link.txt", "warehouse://runs/../../secret.txt"]
)
def test_every_way_out_of_the_root_is_refused(tree, path):
    fs = WarehouseFileSystem(tree)
    with pytest.raises(ReadOnlyError, match="resolves outside the warehouse root"):
        fs.open(path, "rb")
    with pytest.raises(ReadOnlyError, match="resolves outside the warehouse root"):
        fs.glob(path)


@pytest.mark.parametrize(
    "change",
    [
        lambda fs: fs.open("warehouse://runs/run_id=r1/run.parquet", "wb"),
        lambda fs: fs.open("warehouse://new.csv", "ab"),
        lambda fs: fs.open("warehouse://new.csv", "w"),
        lambda fs: fs.mkdir("warehouse://dump"),
        lambda fs: fs.makedirs("warehouse://dump/a"),
        lambda fs: fs.touch("warehouse://new.csv"),
        lambda fs: fs.rm("warehouse://runs", recursive=True),
        lambda fs: fs.rm_file("warehouse://runs/run_id=r1/run.parquet"),
        lambda fs: fs.rmdir("warehouse://runs/run_id=r1"),
        lambda fs: fs.mv("warehouse://runs/run_id=r1/run.parquet", "warehouse://moved.parquet"),
        lambda fs: fs.copy("warehouse://runs/run_id=r1/run.parquet", "warehouse://copied.parquet"),
        lambda fs: fs.pipe_file("warehouse://new.csv", b"x"),
    ],
)
def test_every_change_is_refused_and_nothing_changes(tree, change):
    before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    with pytest.raises(ReadOnlyError, match="the warehouse is read-only here"):
        change(WarehouseFileSystem(tree))
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before
    assert (tree / "runs" / "run_id=r1" / "run.parquet").read_bytes() == b"PAR1"
