"""verl's reward for ``searchR1_<dataset>`` rows, at the path commands written by earlier exports
name: it loads ``tasks/rewards/verl_reward.py`` by path, as verl loads this file, so it needs no
ragfactory install in verl's environment."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "ragfactory_verl_reward", Path(__file__).resolve().parents[1] / "rewards" / "verl_reward.py"
)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)
compute_score = _module.compute_score
