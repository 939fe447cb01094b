"""``ragfactory world``: write a seeded world of invented multi-hop facts (docs/world.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ragfactory.cli.common import app, console, fail


@app.command()
def world(
    out: Annotated[Path, typer.Argument(help="The folder to write (created)")],
    seed: Annotated[int, typer.Option(help="Names, facts and questions; another seed, another world")] = 0,
    questions: Annotated[int, typer.Option(help="Questions over train, valid and test")] = 1000,
    passages: Annotated[int, typer.Option(help="Corpus size; 0: only the questions' entities")] = 0,
    shares: Annotated[str, typer.Option(help="Train, valid and test shares of the questions")] = "0.6,0.15,0.25",
    rungs: Annotated[
        str, typer.Option(help="Question rungs: lookup, bridge, comparison, chain")
    ] = "lookup,bridge,comparison,chain",
    mentions: Annotated[
        bool, typer.Option(help="Each fact's passage also names another city, year or company: read, not matched")
    ] = False,
) -> None:
    """Write a world: entity-disjoint train / valid / test questions in rungs (one-hop lookups,
    two-hop bridges and comparisons, three-hop chains) with gold decompositions, a corpus of
    their passages and distractors, and `build.yaml`, the data sections of a build over it.

    Example: `ragfactory world --seed 0 --questions 1200 --passages 5000 world/`
    """
    from ragfactory.tasks.data.world import WorldSpec, generate

    try:
        split_shares = tuple(float(x) for x in shares.split(","))
    except ValueError:
        fail(f"world: --shares takes three numbers such as 0.6,0.15,0.25, got {shares!r}")
    try:
        wanted = tuple(r.strip() for r in rungs.split(",") if r.strip())
        spec = WorldSpec(seed, questions, passages, split_shares, wanted, mentions=mentions)
        manifest = generate(spec, out)
    except ValueError as exc:
        fail(f"world: {exc}")
    sizes = spec.split_sizes()
    for split, counts in manifest["questions"].items():
        rows = ", ".join(f"{n} {rung}" for rung, n in counts.items())
        console.print(f"{split}: {sizes[split]} questions ({rows}) -> {out / (split + '.jsonl')}")
    p = manifest["passages"]
    console.print(f"corpus: {p['total']:,} passages ({p['distractors']:,} distractors) -> {out / 'corpus.jsonl'}")
    console.print(f"build config: {out / 'build.yaml'} (add a search section, then `ragfactory build --config` it)")
