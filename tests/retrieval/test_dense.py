import socket
from pathlib import Path

import numpy as np
import pytest

from ragfactory.tasks.retrieval.config import DenseConfig
from ragfactory.tasks.retrieval.dense import (
    BUNDLED_MODEL,
    DenseParams,
    DenseRetriever,
    count_lists,
    count_probes,
    load_embedder,
    load_or_build_dense,
    resolve_model_path,
)
from ragfactory.tasks.retrieval.types import RetrievalError

from .conftest import HashingEmbedder, assert_ranked


def refuse_network(*args, **kwargs):
    raise OSError("network access attempted during an offline test")


@pytest.fixture(scope="module")
def offline():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse_network)
        patch.setattr(socket.socket, "connect_ex", refuse_network)
        yield


@pytest.fixture(scope="module")
def minilm(offline):
    """The bundled model, loaded once for the module with every outgoing connection refused."""
    return load_embedder(BUNDLED_MODEL, device="cpu", batch_size=16)


def test_bundled_model_loads_offline(minilm):
    assert (minilm.name, minilm.dim) == (BUNDLED_MODEL, 384)
    vectors = minilm.embed_queries(["hello", "world"])
    assert vectors.shape == (2, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Which flightless seabird is the deepest diver?", "p-penguin"),
        ("a drink made by pushing steam through roasted grounds", "p-coffee"),
        ("the first crewed landing on the lunar surface", "p-moon"),
        ("an ice mass in South America that keeps advancing", "p-glacier"),
    ],
)
def test_dense_finds_paraphrases(passages, minilm, query, expected):
    retriever = DenseRetriever.build(passages, minilm)
    [hits] = retriever.search([query], k=3)
    assert hits[0].passage_id == expected


def test_dense_batched_search_is_ranked(passages, minilm):
    retriever = DenseRetriever.build(passages, minilm)
    rows = retriever.search(["Paris landmark", "Italian instrument maker", "pasta"], k=4)
    assert_ranked(rows, n_queries=3, k=4)
    assert [row[0].passage_id for row in rows] == ["p-eiffel", "p-violin", "p-pasta"]
    assert retriever.search([], k=2) == []
    assert len(retriever.search(["x"], k=99)[0]) == 10


def index_mtimes(folder: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_dense_round_trip_does_not_rebuild(passages, minilm, tmp_path):
    queries = ["volcanic explosion", "world chess title", "river to the Black Sea"]
    first = load_or_build_dense(passages, tmp_path, DenseConfig(), embedder=minilm)
    stamps = index_mtimes(first.index_dir)
    second = load_or_build_dense(passages, tmp_path, DenseConfig(), embedder=minilm)
    assert (first.is_loaded, second.is_loaded) == (False, True)
    assert index_mtimes(second.index_dir) == stamps
    assert second.search(queries, k=3) == first.search(queries, k=3)


def test_loading_with_another_model_is_refused(passages, tmp_path):
    built = load_or_build_dense(passages, tmp_path, embedder=HashingEmbedder(name="model-a"))
    with pytest.raises(RetrievalError, match="built with 'model-a'"):
        DenseRetriever.load(built.index_dir, HashingEmbedder(name="model-b"))


def test_ivf_index_above_threshold(passages, hashing_embedder, tmp_path):
    params = DenseParams(model=hashing_embedder.name, ivf_threshold=5, min_points_per_list=2, probe_fraction=1.0)
    flat_params = DenseParams(model=hashing_embedder.name)
    flat = DenseRetriever.build(passages, hashing_embedder, flat_params)
    ivf = load_or_build_dense(passages, tmp_path, params, embedder=hashing_embedder)
    assert not flat.is_ivf and ivf.is_ivf
    assert ivf.index.nlist == 5 and ivf.index.nprobe == 5  # every list searched: exact here
    queries = ["emperor penguin dives", "Apollo Moon landing", "Danube river countries"]
    expected = flat.search(queries, k=2)
    assert [[h.passage_id for h in row] for row in ivf.search(queries, k=2)] == [
        [h.passage_id for h in row] for row in expected
    ]
    loaded = load_or_build_dense(passages, tmp_path, params, embedder=hashing_embedder)
    assert loaded.is_loaded and loaded.is_ivf and loaded.index.nprobe == 5
    assert loaded.search(queries, k=2) == ivf.search(queries, k=2)


@pytest.mark.parametrize(
    ("n", "expected"),
    [(10, 1), (1_000, 25), (200_001, 1789), (4_000_000, 8000)],
)
def test_count_lists_follows_sqrt_rule_with_enough_points(n, expected):
    assert count_lists(n, DenseParams()) == expected


@pytest.mark.parametrize(
    ("nlist", "expected"),
    [(1, 1), (5, 1), (309, 31), (1789, 179), (18_000, 256)],
)
def test_count_probes_takes_a_share_of_lists_within_bounds(nlist, expected):
    assert count_probes(nlist, DenseParams()) == expected


@pytest.mark.parametrize("alias", [BUNDLED_MODEL, f"sentence-transformers/{BUNDLED_MODEL}"])
def test_bundled_model_name_resolves_to_local_folder(alias):
    path = Path(resolve_model_path(alias))
    assert (path / "config.json").is_file()


def test_other_model_names_pass_through():
    assert resolve_model_path("/models/e5-base") == "/models/e5-base"


def test_unknown_model_fails_without_network(offline):
    with pytest.raises(RetrievalError, match="not available locally"):
        load_embedder("no-such-org/no-such-model", device="cpu")


def test_params_from_build_config():
    config = DenseConfig(model="/m", batch_size=8, ivf_threshold=7, device="cpu")
    params = DenseParams.from_config(config)
    assert (params.model, params.batch_size, params.ivf_threshold, params.device) == (
        "/m",
        8,
        7,
        "cpu",
    )
    assert DenseParams.from_config(None) == DenseParams()


def test_long_corpora_embed_in_slices_in_order():
    import numpy as np
    import pyarrow as pa

    from ragfactory.tasks.retrieval import dense

    class Numbering:
        dim, batch_size, name = 2, 8, "numbering"

        def embed_passages(self, texts):
            return np.array([[float(t.split("\n")[1]), 0.0] for t in texts])

    n = dense.PROGRESS_MIN_PASSAGES + 5
    passages = pa.table({"title": ["t"] * n, "text": [str(i) for i in range(n)]})
    vectors = dense.embed_passages(passages, Numbering())
    assert vectors.shape == (n, 2)
    assert vectors[:, 0].tolist() == [float(i) for i in range(n)]
