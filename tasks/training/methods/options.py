"""What a method's training can be told beside its export, declared once: each option's place in
the train flow's ``config``, its type, default and help.

``method_options(spec)`` lists a method's: the TRL config keys every run may set (steps, epochs,
learning rate, batch), the keys its spec's ``defaults`` set (with those values), its config's own
(DPO's and GRPO's ``beta``), its ``options`` and those every method reads (``TrainConfig.options``). The dashboard's Train
form draws a field per option and checks a typed value with ``Option.parse`` before anything is
submitted (``ragfactory/dashboard/train_form.py``); the run-wide fields (base model, LoRA, more
builds) are declared by ``TrainConfig`` and ``LoraSection`` themselves.

The TRL defaults here are those of the TRL release the project runs (its config classes are not
imported to read them: that takes seconds); ``tests/training/test_method_options.py`` checks
each against the class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragfactory.tasks.training.methods.spec import COMMON_OPTIONS
from ragfactory.tasks.training.trackers import TRACKERS

KINDS = ("int", "float", "bool", "str", "list")


@dataclass(frozen=True)
class Option:
    """One option: ``key`` is its place in the config (``trl.max_steps``, ``options.top_k``,
    ``lora.r``, ``base_model``); ``kind`` one of ``KINDS`` (a list is of strings); ``minimum``
    the least number it takes; ``choices`` the values a string takes (empty: any)."""

    key: str
    kind: str
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()

    def with_default(self, default: Any) -> Option:
        return Option(self.key, self.kind, default, self.help, self.minimum, self.choices)

    def parse(self, text: str | None) -> Any:
        """The value typed in a form (a ticked box: any text; unticked: None); ValueError naming
        the option and what it takes. Empty is None for a string, [] for a list."""
        if self.kind == "bool":
            return text is not None
        text = (text or "").strip()
        if self.kind == "list":
            return [self._chosen(part.strip()) for part in text.split(",") if part.strip()]
        if self.kind == "str":
            return self._chosen(text) or None
        return self._number(text)

    def _chosen(self, text: str) -> str:
        if text and self.choices and text not in self.choices:
            raise ValueError(f"{self.key}: {text!r} is not one of {', '.join(self.choices)}")
        return text

    def _number(self, text: str) -> int | float:
        try:
            value = int(text) if self.kind == "int" else float(text)
        except ValueError:
            raise ValueError(
                f"{self.key}: {text!r} is not {'an integer' if self.kind == 'int' else 'a number'}"
            ) from None
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{self.key}: {value} is below its minimum {self.minimum:g}")
        return value


def _trl(name: str, kind: str, default: Any, help: str, minimum: float | None = None) -> Option:
    return Option(f"trl.{name}", kind, default, help, minimum)


# TRL config keys by name: their help, and TRL's default where every config class shares it
TRL_OPTIONS: Mapping[str, Option] = {
    o.key.removeprefix("trl."): o
    for o in (
        _trl("max_steps", "int", -1, "Optimizer steps to train; -1: num_train_epochs passes over the export", -1),
        _trl("num_train_epochs", "float", 3.0, "Passes over the export when max_steps is -1", 0),
        _trl("learning_rate", "float", 5e-5, "Peak learning rate, decayed linearly to 0 by the last step", 0),
        _trl("per_device_train_batch_size", "int", 8, "Rows in one forward pass", 1),
        _trl("gradient_accumulation_steps", "int", 1, "Forward passes summed into one optimizer step", 1),
        _trl("max_length", "int", 1024, "Tokens kept of a row (prompt and completion); longer rows are cut", 2),
        _trl("completion_only_loss", "bool", None, "Only the completion (assistant) tokens carry loss"),
        _trl("activation_checkpointing", "bool", False, "Recompute activations in the backward pass: less memory"),
        _trl("precompute_ref_log_probs", "bool", False, "Reference log-probs computed once, before training"),
        _trl("precompute_ref_batch_size", "int", None, "Rows per forward pass of that precomputation", 1),
        _trl("num_generations", "int", 8, "Completions sampled per prompt: the group an advantage is relative to", 2),
        _trl("max_completion_length", "int", 256, "Tokens generated per completion", 1),
        _trl("beta", "float", 0.0, "Weight of the KL divergence to the reference model (DPO: its temperature)", 0),
    )
}
# what a config class sets otherwise than TRL_OPTIONS (TRL 1.16, transformers 5.24)
CONFIG_DEFAULTS: Mapping[str, Mapping[str, Any]] = {
    "trl:SFTConfig": {"learning_rate": 2e-5},
    "trl:DPOConfig": {"learning_rate": 1e-6, "beta": 0.1},
    "trl:GRPOConfig": {"learning_rate": 1e-6, "beta": 0.0},
    "transformers:TrainingArguments": {},
    "ragfactory.tasks.training.tree_advantage:TreeAdvantageConfig": {"beta": 0.001},
}
# the keys every run may set, whatever its method
EVERY_RUN = (
    "max_steps",
    "num_train_epochs",
    "learning_rate",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
)


def _option(name: str, kind: str, default: Any, help: str, minimum=None, choices=()) -> Option:
    return Option(f"options.{name}", kind, default, help, minimum, tuple(choices))


# ``TrainConfig.options`` keys by name (a spec's ``options``), with their readers' defaults
METHOD_OPTIONS: Mapping[str, Option] = {
    o.key.removeprefix("options."): o
    for o in (
        _option("max_turns", "int", 4, "Search turns a rollout may take before it must answer", 1),
        _option("top_k", "int", 3, "Passages each search returns", 1),
        _option(
            "retriever", "str", None, "Retriever of the searches; empty: the build's default", None, ("bm25", "dense")
        ),
        _option("sources", "list", [], "Passage sources searched (comma-separated); empty: the build's inputs"),
        _option("grammar", "str", None, "A step grammar each turn is held to (e.g. treeps_step); empty: free sampling"),
        _option("turn_tokens", "int", 128, "Tokens one turn may take under the grammar", 1),
        _option(
            "metric", "str", "em", "Answer metric of the strategies' outcome rewards", None, ("em", "f1", "cover_em")
        ),
        _option(
            "prm_model", "str", "latest:prm", "The prm reward's step reward model: a model id, folder or latest:NAME"
        ),
        _option("prm_aggregate", "str", "min", "How the prm reward folds step scores", None, ("min", "last", "mean")),
        _option("heldout_fraction", "float", 0.1, "Share of step-label rows held out to score the model", 0),
        _option("max_length", "int", 1024, "Tokens kept of a step-label row", 2),
        _option("trackers", "list", [], "Where the logged numbers also go, under the model's folder", None, TRACKERS),
    )
}


def method_options(spec) -> list[Option]:
    """A method's TRL options (with its spec's defaults, else its config's, else TRL's), then its
    ``options`` and those every method reads; KeyError names an undeclared one."""
    config = CONFIG_DEFAULTS.get(spec.config, {})
    names = [*EVERY_RUN, *(k for k in (*spec.defaults, *config) if k not in EVERY_RUN)]
    merged = {**config, **spec.defaults}
    trl = [TRL_OPTIONS[name].with_default(merged.get(name, TRL_OPTIONS[name].default)) for name in dict.fromkeys(names)]
    return trl + [METHOD_OPTIONS[name] for name in (*spec.options, *COMMON_OPTIONS)]
