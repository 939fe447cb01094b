import pyarrow as pa
import pytest

from ragfactory.tasks.retrieval.index_store import (
    MANIFEST_FILE,
    content_key,
    load_or_build,
    select_passages,
)


def table(ids, titles, texts):
    return pa.table({"passage_id": ids, "title": titles, "text": texts})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"passage_id": ["a"], "text": ["x"]}), r"missing column\(s\) \['title'\]"),
        (table(*[pa.array([], pa.string())] * 3), "no rows"),
        (table(["a", None], ["t", "t"], ["x", "y"]), r"passages.passage_id: null at row 1"),
        (table(["a", "b"], ["t", "t"], ["x", None]), r"passages.text: null at row 1"),
        (table(["a", "b", "a"], ["t"] * 3, ["x", "y", "z"]), "duplicate id 'a'"),
    ],
)
def test_select_passages_refuses_bad_tables(data, message):
    with pytest.raises(ValueError, match=message):
        select_passages(data)


def test_select_passages_keeps_three_columns_and_fills_titles():
    data = pa.table({"passage_id": ["a"], "source": ["s"], "title": [None], "text": ["x"]})
    out = select_passages(data)
    assert out.column_names == ["passage_id", "title", "text"]
    assert out.column("title").to_pylist() == [""]


def test_content_key_tracks_content_and_settings():
    base = table(["a", "b"], ["A", "B"], ["one", "two"])
    key = content_key(base, {"k1": 1.5})
    assert key == content_key(base, {"k1": 1.5})
    assert key != content_key(base, {"k1": 1.2})
    assert key != content_key(table(["a", "b"], ["A", "B"], ["one", "two!"]), {"k1": 1.5})
    assert key != content_key(table(["b", "a"], ["B", "A"], ["two", "one"]), {"k1": 1.5})
    # Moving bytes between neighbouring fields must change the key.
    assert key != content_key(table(["a", "b"], ["A", "B"], ["onet", "wo"]), {"k1": 1.5})


def test_content_key_ignores_chunking_and_slicing():
    whole = table(["a", "b", "c"], ["A", "B", "C"], ["one", "two", "three"])
    chunked = pa.concat_tables([whole.slice(0, 1), whole.slice(1, 2)])
    assert chunked.column("text").num_chunks == 2
    padded = table(["z", "a", "b", "c"], ["Z", "A", "B", "C"], ["0", "one", "two", "three"])
    padded = padded.slice(1)
    assert content_key(whole, {}) == content_key(chunked, {}) == content_key(padded, {})


def save_text(value, folder):
    (folder / "value.txt").write_text(value)


def test_load_or_build_builds_once_then_loads(tmp_path):
    folder = tmp_path / "idx-1"
    built = []
    build = lambda: built.append(1) or "fresh"  # noqa: E731
    load = lambda path: (path / "value.txt").read_text()  # noqa: E731
    first = load_or_build(folder, build, save_text, load, {"kind": "test"})
    second = load_or_build(folder, build, save_text, load, {"kind": "test"})
    assert first == ("fresh", False)
    assert second == ("fresh", True)
    assert built == [1]
    assert (folder / MANIFEST_FILE).is_file()


def test_failed_save_leaves_nothing_behind(tmp_path):
    def broken_save(value, folder):
        (folder / "partial.bin").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        load_or_build(tmp_path / "idx", lambda: "x", broken_save, lambda p: "never", {})
    assert list(tmp_path.iterdir()) == []


def test_a_folder_another_process_finished_first_is_kept(tmp_path):
    folder = tmp_path / "idx"

    def build_while_another_finishes():
        folder.mkdir()
        (folder / "value.txt").write_text("theirs")
        (folder / MANIFEST_FILE).write_text("{}")
        return "ours"

    load = lambda path: (path / "value.txt").read_text()  # noqa: E731
    assert load_or_build(folder, build_while_another_finishes, save_text, load, {}) == ("ours", False)
    assert (folder / "value.txt").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]


def test_a_folder_without_manifest_in_the_way_is_an_error(tmp_path):
    folder = tmp_path / "idx"

    def build_while_another_leaves_a_torn_folder():
        folder.mkdir()
        (folder / "partial.bin").write_text("half")
        return "ours"

    with pytest.raises(OSError):
        load_or_build(folder, build_while_another_leaves_a_torn_folder, save_text, lambda p: "never", {})
    assert [p.name for p in folder.iterdir()] == ["partial.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]
