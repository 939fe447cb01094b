"""The Train page's form, drawn from what a method declares: a field per option, with its type,
default and help, grouped as the train flow's ``config`` nests them.

The run-wide fields are ``TrainConfig``'s own (``flows/config.py``: the base model, the lineage
name, more builds, seed, checkpoints; GRPO's rewards and task) and ``LoraSection``'s; the TRL
keys and the method's ``options`` are its declared ``Option``s (``tasks/training/methods/
options.py``). A submitted value is parsed by its declaration, and refused naming the field,
before anything reaches Prefect; a field left at its default is not sent (the flow applies the
same default), and the JSON box's keys are laid over the fields' for anything else.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.training.methods.options import Option, method_options

RUN_FIELDS = ("base_model", "name", "more_run_ids", "seed", "save_steps", "allow_downloads")
LORA_FIELDS = ("enabled", "r", "alpha", "dropout")
# the hidden input naming the method whose fields a posted form carries (a post without it, or
# for another method, sends the JSON box alone)
MARKER = "fields_of"


@dataclass(frozen=True)
class Field:
    """One field as drawn: its option, the text (or tick) it shows, and whether it was refused."""

    option: Option
    value: Any
    invalid: bool = False

    @property
    def id(self) -> str:
        return "opt-" + self.option.key.replace(".", "-")

    @property
    def text(self) -> str:
        """The value as typed into an input: empty for None, a list comma-separated."""
        if self.value is None:
            return ""
        if isinstance(self.value, list):
            return ", ".join(str(v) for v in self.value)
        return str(self.value)

    @property
    def default_text(self) -> str:
        if isinstance(self.option.default, bool):
            return "on" if self.option.default else "off"
        return Field(self.option, self.option.default).text or "none"


def _kind(annotation) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is list:
        return "list"
    return {int: "int", float: "float", bool: "bool"}.get(annotation, "str")


def declared(key: str, info) -> Option:
    """A pydantic field of the flow's config as an option: its description is the help."""
    minimum = next((m.ge for m in info.metadata if hasattr(m, "ge")), None)
    default = info.get_default(call_default_factory=True)
    return Option(key, _kind(info.annotation), default, info.description or "", minimum)


def form_groups(method: str) -> list[tuple[str, list[Option]]]:
    """A method's options in the groups the form draws: run, TRL, LoRA, method options."""
    from ragfactory.flows.config import TrainConfig
    from ragfactory.tasks.training.config import LoraSection
    from ragfactory.tasks.training.methods import method_spec

    spec = method_spec(method)
    run = list(RUN_FIELDS)
    run += ["rewards"] if spec.rewarded else []
    run += ["task"] if "task" in spec.optional else []
    options = method_options(spec)
    groups = [
        ("run", [declared(k, TrainConfig.model_fields[k]) for k in run]),
        ("TRL config (trl)", [o for o in options if o.key.startswith("trl.")]),
        ("LoRA adapters (lora)", [declared(f"lora.{k}", LoraSection.model_fields[k]) for k in LORA_FIELDS]),
        ("method options (options)", [o for o in options if o.key.startswith("options.")]),
    ]
    return [(title, group) for title, group in groups if group]


def _get(config: Mapping, key: str) -> tuple[bool, Any]:
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def _set(config: dict, key: str, value: Any) -> None:
    *parents, last = key.split(".")
    for part in parents:
        config = config.setdefault(part, {})
    config[last] = value


def _drop(config: Mapping, key: str) -> dict:
    """``config`` without ``key`` (and without a section it leaves empty)."""
    head, _, rest = key.partition(".")
    out = dict(config)
    if not rest:
        out.pop(head, None)
    elif isinstance(out.get(head), Mapping):
        out[head] = _drop(out[head], rest)
        if not out[head]:
            del out[head]
    return out


def prefilled(method: str, config: Mapping[str, Any]) -> tuple[list[tuple[str, list[Field]]], dict]:
    """The form's fields showing ``config``'s values (the deployment's) or their defaults, and
    what of ``config`` no field holds (the JSON box's)."""
    rest, groups = dict(config), []
    for title, options in form_groups(method):
        fields = []
        for option in options:
            found, value = _get(config, option.key)
            fields.append(Field(option, value if found else option.default))
            rest = _drop(rest, option.key)
        groups.append((title, fields))
    return groups, rest


def submitted(method: str, form: Mapping[str, str]) -> dict[str, Any]:
    """The config the posted fields set (those off their defaults); ValueError naming a refused
    field, with ``.fields`` holding the form as typed."""
    if form.get(MARKER) != method:
        return {}
    config: dict[str, Any] = {}
    for _, options in form_groups(method):
        for option in options:
            raw = form.get(option.key)
            if option.kind != "bool" and raw is None:
                continue  # not posted: the default
            if option.kind in ("int", "float") and not raw.strip():
                continue  # left empty: the default
            value = option.parse(raw)
            if value != option.default:
                _set(config, option.key, value)
    return config


def as_typed(method: str, form: Mapping[str, str], refused: str | None) -> list[tuple[str, list[Field]]]:
    """The fields as a person typed them, the one ``refused`` names marked."""
    groups = []
    for title, options in form_groups(method):
        fields = []
        for option in options:
            raw = form.get(option.key)
            value = raw is not None if option.kind == "bool" else raw
            fields.append(Field(option, value, invalid=option.key == refused))
        groups.append((title, fields))
    return groups


def refused_key(message: str) -> str | None:
    """The field a refusal names (``trl.max_steps: ...``), or None."""
    key, sep, _ = message.partition(":")
    return key if sep and " " not in key else None


def merged(fields: dict[str, Any], box: dict[str, Any]) -> dict[str, Any]:
    """The fields' config with the JSON box's keys laid over it, section by section."""
    out = json.loads(json.dumps(fields))
    for key, value in box.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out
