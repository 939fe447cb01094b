"""Write-to-a-temporary-then-rename (ragfactory/atomic.py): files and folders."""

from __future__ import annotations

import pytest

from ragfactory.atomic import atomic_dir, atomic_path, atomic_write_bytes, atomic_write_text


def _names(folder):
    return sorted(p.name for p in folder.iterdir())


def test_the_temporary_is_a_hidden_sibling_ending_in_tmp(tmp_path):
    target = tmp_path / "shard.parquet"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path
        assert tmp.name.startswith(".shard.parquet.") and tmp.name.endswith(".tmp")
        assert len(tmp.name) == len(".shard.parquet.") + 32 + len(".tmp")
        assert not tmp.exists()
        tmp.write_text("new")
    assert _names(tmp_path) == ["shard.parquet"]


def test_success_replaces_the_target(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    assert atomic_write_text(target, "new\n") == target
    assert target.read_text() == "new\n"
    assert _names(tmp_path) == ["a.json"]
    atomic_write_bytes(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    assert _names(tmp_path) == ["a.json"]


def test_a_failure_in_the_block_keeps_the_old_target_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="writer broke"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("writer broke")
    assert target.read_text() == "old"
    assert _names(tmp_path) == ["a.json"]


def test_a_block_that_writes_nothing_fails_and_keeps_the_target(tmp_path):
    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(FileNotFoundError):
        with atomic_path(target):
            pass
    assert target.read_text() == "old"
    assert _names(tmp_path) == ["a.json"]


def test_a_failed_rename_leaves_no_temporary(tmp_path):
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_text("theirs")
    with pytest.raises(OSError):
        atomic_write_text(target, "a file cannot replace a folder")
    assert _names(tmp_path) == ["taken"]
    assert (target / "inside").read_text() == "theirs"


def test_folder_appears_whole_on_success(tmp_path):
    target = tmp_path / "index"
    with atomic_dir(target) as tmp:
        assert not tmp.exists() and tmp.parent == tmp_path and tmp.name.startswith(".index.")
        tmp.mkdir()
        (tmp / "a.bin").write_bytes(b"12")
        assert not target.exists()
    assert _names(tmp_path) == ["index"]
    assert (target / "a.bin").read_bytes() == b"12"


def test_folder_failure_leaves_nothing(tmp_path):
    target = tmp_path / "index"
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            tmp.mkdir()
            (tmp / "a.bin").write_bytes(b"12")
            raise RuntimeError("save failed")
    assert _names(tmp_path) == []


def _theirs(tmp_path):
    target = tmp_path / "index"
    target.mkdir()
    (target / "manifest.json").write_text("theirs")
    return target


def _fill(tmp):
    tmp.mkdir()
    (tmp / "manifest.json").write_text("ours")


def test_an_existing_folder_is_an_error_by_default_and_stays(tmp_path):
    target = _theirs(tmp_path)
    with pytest.raises(OSError):
        with atomic_dir(target) as tmp:
            _fill(tmp)
    assert (target / "manifest.json").read_text() == "theirs"
    assert _names(tmp_path) == ["index"]


def test_replace_swaps_an_existing_folder_for_ours(tmp_path):
    target = _theirs(tmp_path)
    (target / "stale.bin").write_bytes(b"x")
    with atomic_dir(target, replace=True) as tmp:
        _fill(tmp)
    assert _names(target) == ["manifest.json"]
    assert (target / "manifest.json").read_text() == "ours"
    assert _names(tmp_path) == ["index"]


def test_replace_keeps_the_old_folder_when_the_block_fails(tmp_path):
    target = _theirs(tmp_path)
    with pytest.raises(RuntimeError):
        with atomic_dir(target, replace=True) as tmp:
            _fill(tmp)
            raise RuntimeError("conversion failed")
    assert (target / "manifest.json").read_text() == "theirs"
    assert _names(tmp_path) == ["index"]


def test_finished_keeps_the_winners_folder_and_discards_ours(tmp_path):
    target = _theirs(tmp_path)
    with atomic_dir(target, finished=lambda f: (f / "manifest.json").is_file()) as tmp:
        _fill(tmp)
    assert (target / "manifest.json").read_text() == "theirs"
    assert _names(tmp_path) == ["index"]


def test_finished_refusing_the_existing_folder_raises(tmp_path):
    target = tmp_path / "index"
    target.mkdir()
    (target / "torn.bin").write_bytes(b"x")
    with pytest.raises(OSError):
        with atomic_dir(target, finished=lambda f: (f / "manifest.json").is_file()) as tmp:
            _fill(tmp)
    assert _names(target) == ["torn.bin"]
    assert _names(tmp_path) == ["index"]


def test_replace_and_finished_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="replace or finished"):
        with atomic_dir(tmp_path / "index", replace=True, finished=bool):
            pass
