"""Write a seeded world to a folder: three entity-disjoint question files, a corpus, a manifest
and a build config that ingests them.

    OUT/train.jsonl, OUT/valid.jsonl, OUT/test.jsonl   questions in the ``world`` format
    OUT/corpus.jsonl                                   every passage, Search-R1 layout
    OUT/world.json                                     the spec and what was written
    OUT/build.yaml                                     datasets, partitions and corpus of a build

A question row has MuSiQue's layout (``question_decomposition`` with ``#n`` references, so
SEPR has gold plans; ``paragraphs`` with ``is_supporting``) plus ``rung``, ``entities`` and
``partition``. Its paragraphs are its supporting passages and a few distractors of its split;
the corpus holds every entity's passage once, with its content id (``passage_id``), so the ids a
row names are the ids the retriever returns. Passages past those of the questions' entities are
distractors made from their index: the corpus streams out in constant memory.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from ragfactory.tasks.data.passages import passage_id
from ragfactory.tasks.data.world.entities import Allocator, Component, distractor
from ragfactory.tasks.data.world.names import Namer
from ragfactory.tasks.data.world.questions import RUNGS, Question, make_questions

SPLITS = ("train", "valid", "test")
GENERATOR_VERSION = 1  # bump when the same spec would write other files


@dataclass(frozen=True)
class WorldSpec:
    seed: int = 0
    questions: int = 1000  # over the three splits
    passages: int = 0  # the corpus's size; 0: just the passages of the questions' entities
    shares: tuple[float, float, float] = (0.6, 0.15, 0.25)  # train, valid, test
    rungs: tuple[str, ...] = RUNGS
    distractors_per_question: int = 3  # paragraphs of the question's split beside its supporting ones
    # each fact's passage also names another object of its kind (facts.MENTIONS): a lookup is then
    # answered by reading the relation, not by taking the one city or year its passage names
    mentions: bool = False

    def __post_init__(self):
        if self.questions < len(SPLITS):
            raise ValueError(f"questions must be >= {len(SPLITS)} (one per split), got {self.questions}")
        if self.passages < 0:
            raise ValueError(f"passages must be >= 0, got {self.passages}")
        if len(self.shares) != 3 or min(self.shares) <= 0 or abs(sum(self.shares) - 1) > 1e-9:
            raise ValueError(f"shares must be three positive numbers summing to 1, got {self.shares}")
        unknown = sorted(set(self.rungs) - set(RUNGS))
        if unknown or not self.rungs:
            raise ValueError(f"rungs must be some of {', '.join(RUNGS)}, got {', '.join(self.rungs) or 'none'}")
        if self.passages and self.passages < self.entity_passages():
            raise ValueError(
                f"passages must be 0 or >= {self.entity_passages():,} (the passages of the questions' "
                f"entities), got {self.passages:,}"
            )

    def entity_passages(self) -> int:
        """How many passages the questions' entities take (one each), before any distractor."""
        return sum(sum(Component.sizes(n).values()) for n in self.split_sizes().values())

    def split_sizes(self) -> dict[str, int]:
        valid = max(1, round(self.questions * self.shares[1]))
        test = max(1, round(self.questions * self.shares[2]))
        return {"train": self.questions - valid - test, "valid": valid, "test": test}


def question_row(q: Question, n: int, split: str, spec: WorldSpec, component: Component, rng) -> dict:
    """One question in the ``world`` format (MuSiQue's layout and the world's own fields)."""
    names = component.by_name()
    support = list(dict.fromkeys(s["subject"] for s in q.steps))
    others = [e for e in component.all() if e.name not in support]
    chosen = [names[s] for s in support] + rng.sample(others, min(spec.distractors_per_question, len(others)))
    rng.shuffle(chosen)
    paragraphs = [
        {
            "idx": i,
            "title": e.passage(spec.seed)[0],
            "paragraph_text": e.passage(spec.seed)[1],
            "is_supporting": e.name in support,
        }
        for i, e in enumerate(chosen)
    ]
    position = {e.name: i for i, e in enumerate(chosen)}
    steps = [
        {
            "id": i + 1,
            "question": s["question"],
            "answer": s["answer"],
            "paragraph_support_idx": position[s["subject"]],
            "relation": s["relation"],
        }
        for i, s in enumerate(q.steps)
    ]
    return {
        "id": f"s{spec.seed}-{split}-{n:06d}",
        "question": q.question,
        "answer": q.answer,
        "answer_aliases": [],
        "answerable": True,
        "question_decomposition": steps,
        "paragraphs": paragraphs,
        "rung": q.rung,
        "entities": q.entities,
        "partition": split,
    }


def _corpus_line(title: str, text: str) -> str:
    return json.dumps({"id": passage_id(title, text), "contents": f'"{title}"\n{text}'}, ensure_ascii=False)


def _write_questions(out: Path, spec: WorldSpec, namer: Namer) -> tuple[Allocator, list[Component], dict]:
    allocator, components, counts = Allocator(namer), [], {}
    for split, size in spec.split_sizes().items():
        rng = random.Random(f"{spec.seed}:{split}")
        mentions = random.Random(f"{spec.seed}:{split}:mentions") if spec.mentions else None
        component = Component.make(allocator, rng, size, mentions)
        questions = make_questions(component, rng, size, spec.rungs)
        with (out / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            for n, q in enumerate(questions):
                f.write(json.dumps(question_row(q, n, split, spec, component, rng), ensure_ascii=False) + "\n")
        counts[split] = {rung: sum(q.rung == rung for q in questions) for rung in spec.rungs}
        components.append(component)
    return allocator, components, counts


def _write_corpus(out: Path, spec: WorldSpec, namer: Namer, allocator: Allocator, components: list[Component]) -> dict:
    own = [e for c in components for e in c.all()]
    extra = max(0, spec.passages - len(own))
    base = dict(allocator.next)
    with (out / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for entity in own:
            f.write(_corpus_line(*entity.passage(spec.seed)) + "\n")
        for n in range(extra):
            f.write(_corpus_line(*distractor(namer, spec.seed, base, n, extra).passage(spec.seed)) + "\n")
    return {"question_entities": len(own), "distractors": extra, "total": len(own) + extra}


def build_config(out: Path, name: str = "world") -> dict:
    """A build config's data sections for the world in ``out``: one dataset per split file, each
    file its own partition, and the world's corpus alone (not the rows' paragraphs again)."""
    root = out.resolve()
    datasets = [
        {"name": name, "format": "world", "path": str(root / f"{split}.jsonl"), "split": split, "partition": split}
        for split in SPLITS
    ]
    return {
        "name": name,
        "datasets": datasets,
        "corpus": {"from_datasets": False, "files": [str(root / "corpus.jsonl")]},
        "retrieval": {"default": "bm25", "top_k": 3, "bm25": {"enabled": True}, "dense": {"enabled": False}},
    }


def generate(spec: WorldSpec, out: Path) -> dict:
    """Write the world of ``spec`` into ``out`` (created); returns its manifest."""
    out.mkdir(parents=True, exist_ok=True)
    namer = Namer(spec.seed)
    allocator, components, counts = _write_questions(out, spec, namer)
    passages = _write_corpus(out, spec, namer, allocator, components)
    manifest = {"generator_version": GENERATOR_VERSION, "spec": asdict(spec), "questions": counts, "passages": passages}
    (out / "world.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (out / "build.yaml").write_text(yaml.safe_dump(build_config(out), sort_keys=False), encoding="utf-8")
    return manifest
