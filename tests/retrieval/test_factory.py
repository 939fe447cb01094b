import pytest

from ragfactory.tasks.retrieval import Retriever, make_retriever, make_retriever_from_config
from ragfactory.tasks.retrieval.bm25 import BM25Retriever
from ragfactory.tasks.retrieval.client import HttpRetriever
from ragfactory.tasks.retrieval.config import BM25Config, RetrievalConfig
from ragfactory.tasks.retrieval.dense import DenseRetriever


def test_bm25_in_memory_and_on_disk(passages, tmp_path):
    memory = make_retriever("bm25", passages=passages, bm25=BM25Config(k1=1.2))
    disk = make_retriever("bm25", passages=passages, index_root=tmp_path)
    assert isinstance(memory, BM25Retriever) and memory.index_dir is None
    assert memory.params.k1 == 1.2
    assert disk.index_dir.parent == tmp_path
    assert isinstance(disk, Retriever)


def test_dense_with_given_embedder(passages, hashing_embedder, tmp_path):
    retriever = make_retriever("dense", passages=passages, index_root=tmp_path, embedder=hashing_embedder)
    assert isinstance(retriever, DenseRetriever)
    assert retriever.search(["Danube river"], k=1)[0][0].passage_id == "p-river"


def test_config_prefers_server_url(passages):
    config = RetrievalConfig(server_url="http://127.0.0.1:9/retrieve")
    retriever = make_retriever_from_config(config, passages)
    assert isinstance(retriever, HttpRetriever) and retriever.url == "http://127.0.0.1:9/retrieve"


def test_config_default_kind(passages, tmp_path):
    retriever = make_retriever_from_config(RetrievalConfig(), passages, tmp_path)
    assert isinstance(retriever, BM25Retriever) and retriever.is_loaded is False


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("http", {}, "needs a url"),
        ("bm25", {}, "needs passages"),
        ("splade", {}, "unknown retriever kind 'splade'"),
    ],
)
def test_bad_requests_are_refused(kind, options, message):
    with pytest.raises(ValueError, match=message):
        make_retriever(kind, **options)


def test_a_registered_kind_is_built_by_name_from_the_config(passages):
    """A plugged retriever (here a fake) is named in the config like a built-in one."""
    from ragfactory.tasks.retrieval.factory import register_retriever, unregister_retriever
    from tests.fakes import FixedRetriever

    fake, seen = FixedRetriever({"q": ["hit"]}), {}

    def factory(**options):
        seen.update(options)
        return fake

    register_retriever("fixed:test", factory)
    try:
        retriever = make_retriever_from_config(RetrievalConfig(default="fixed:test"), passages)
        assert retriever is fake and retriever.search(["q"], k=1) == [["hit"]]
        assert seen["passages"] is passages
        with pytest.raises(ValueError, match="'fixed:test' is already registered"):
            register_retriever("fixed:test", factory)
    finally:
        unregister_retriever("fixed:test")
    with pytest.raises(ValueError, match=r"unknown retriever kind 'fixed:test'; registered in this process: bm25"):
        make_retriever("fixed:test")


def test_a_misspelt_kind_is_refused_by_the_config():
    with pytest.raises(ValueError, match="retriever kind 'bm52' is neither a built-in retriever"):
        RetrievalConfig(default="bm52")
