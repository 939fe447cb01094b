"""A seeded world of invented multi-hop facts: questions a small model can learn to search for.

Real benchmarks ask about entities a model may have read about; here every entity is invented
(``names``), every fact is stated in its subject's passage (``facts``, ``entities``), questions
climb in rungs from one-hop lookups to three-hop chains with gold decompositions
(``questions``), and the train, valid and test questions share no entity, so a trained model that
answers more test questions learned to search and read, not the facts. ``generate`` writes a
world to a folder the build ingests (docs/world.md).
"""

from ragfactory.tasks.data.world.facts import RELATIONS, read_fact
from ragfactory.tasks.data.world.generate import SPLITS, WorldSpec, build_config, generate
from ragfactory.tasks.data.world.questions import RUNGS

__all__ = ["RELATIONS", "RUNGS", "SPLITS", "WorldSpec", "build_config", "generate", "read_fact"]
