"""The one base of every config section the flows take (``flows/config.py`` and the sections
beside the code they parameterise: ``tasks/*/config.py``).

Unknown keys are refused, so a typo in a YAML file is an error that names the key rather than a
silently ignored setting; sections are frozen, so a config is a value: it hashes
(``flows/config_hash.py``), caches and travels to workers as it was read.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: unknown keys refused, fields frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
