"""What the world's teacher engines share: each question's gold decomposition, and wrong answers.

A teacher engine (one a strategy registers for its own step prompts, docs/world.md) plays the
larger model that writes a cold start's or a search's steps on the seeded world. It reads the
question out of the prompt, looks its gold decomposition up here, follows it through the
documents the prompt shows, and at temperature ``t`` errs with probability ``t``: ``wrong_answer``
is then its answer, a name no passage holds (or another year).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from ragfactory.tasks.data.world.names import Namer

_WRONG = Namer(1_000_003)  # names no world of a smaller seed uses


@dataclass(frozen=True)
class Gold:
    steps: list[str]
    relations: list[str]
    rung: str


def load_world(folder: Path) -> dict[str, Gold]:
    """Every world question's decomposition by question text."""
    gold = {}
    for split in ("train", "valid", "test"):
        for line in (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            steps = row["question_decomposition"]
            gold[row["question"].strip()] = Gold(
                [s["question"] for s in steps], [s["relation"] for s in steps], row["rung"]
            )
    return gold


def world_digest(folder: Path) -> str:
    """The world's short content hash, for a teacher's fingerprint (its answers change with it)."""
    return hashlib.sha256((folder / "world.json").read_bytes()).hexdigest()[:16]


def wrong_answer(right: str | None, rng: random.Random) -> str:
    """An answer that is not ``right``: a year 1 to 40 off for a year, else an unused name."""
    if right is not None and right.isdigit():
        return str(int(right) + rng.choice([-1, 1]) * rng.randint(1, 40))
    return _WRONG.name("city", rng.randrange(1_000_000))


def errs(temperature: float, rng: random.Random) -> bool:
    """Whether a sample at ``temperature`` errs: with probability ``temperature`` (0 never)."""
    return rng.random() < temperature


def world_option(engine: str, options: dict) -> Path:
    """The folder a teacher engine's one option, ``world``, names, checked."""
    unknown = sorted(set(options) - {"world"})
    if unknown or "world" not in options:
        raise ValueError(f"{engine} takes one option, world (a folder `ragfactory world` wrote); got {sorted(options)}")
    folder = Path(options["world"])
    if not (folder / "world.json").is_file():
        raise ValueError(f"{engine}: {folder} holds no world.json (write one with `ragfactory world {folder}`)")
    return folder


class Teacher:
    """A teacher engine's ``Backend`` shape: the world's gold decompositions loaded once, a
    fingerprint that changes with the world and the teacher's ``VERSION``, and each sample ``i``
    of a request drawn from its own ``random.Random(seed + i)``; a subclass writes one step from a
    prompt in ``_step`` (a strategy's prompt layout is its own)."""

    KIND = ""  # the strategy whose prompts it answers, in the fingerprint
    VERSION = 1  # bump when the same prompt would get another step

    def __init__(self, folder: Path):
        self.folder = folder
        self.gold = load_world(folder)
        self.fingerprint = f"world-teacher/{self.KIND}/v{self.VERSION}/{world_digest(folder)}"

    def generate_batch(self, requests: list) -> list[list]:
        return [[self._step(r, random.Random(f"{r.sampling.seed + i}")) for i in range(r.sampling.n)] for r in requests]

    def _step(self, request, rng: random.Random):
        raise NotImplementedError
