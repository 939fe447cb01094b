"""The declared options (tasks/training/methods/options.py) say what the code they describe does:
each TRL default is the config class's, each method option's the default of the code reading it,
and every option a spec names is declared."""

from __future__ import annotations

import dataclasses

import pytest

from ragfactory.tasks.training.methods import METHODS
from ragfactory.tasks.training.methods.options import CONFIG_DEFAULTS, METHOD_OPTIONS, Option, method_options
from ragfactory.tasks.training.methods.spec import _load


@pytest.mark.parametrize("method", list(METHODS))
def test_each_trl_default_is_the_config_classs_unless_the_spec_sets_it(method):
    spec = METHODS[method]
    fields = {f.name: f for f in dataclasses.fields(spec.config_class)}
    for option in method_options(spec):
        name = option.key.removeprefix("trl.")
        if option.key.startswith("trl.") and name not in spec.defaults:
            assert fields[name].default == option.default, (method, name)


def test_every_config_class_with_its_own_defaults_is_one_a_method_names():
    assert set(CONFIG_DEFAULTS) == {spec.config for spec in METHODS.values()}
    for config, defaults in CONFIG_DEFAULTS.items():
        fields = {f.name: f.default for f in dataclasses.fields(_load(config))}
        assert {k: fields[k] for k in defaults} == dict(defaults), config


def test_the_method_options_defaults_are_their_readers():
    from ragfactory.tasks.training.agentic import AgenticOptions
    from ragfactory.tasks.training.prm.trainer import PRMOptions

    for reader in (AgenticOptions, PRMOptions):
        for field in dataclasses.fields(reader):
            default = list(field.default) if isinstance(field.default, tuple) else field.default
            assert METHOD_OPTIONS[field.name].default == default, field.name
    # the prm reward's (tasks/training/prm/reward.py) and r3_process's metric (tasks/search/r3/training.py)
    assert [METHOD_OPTIONS[k].default for k in ("prm_model", "prm_aggregate", "metric")] == ["latest:prm", "min", "em"]


def test_every_option_a_spec_names_is_declared_with_help():
    for spec in METHODS.values():
        assert all(isinstance(o, Option) and o.help for o in method_options(spec)), spec.name


def test_a_typed_value_is_parsed_by_its_kind():
    steps = Option("trl.max_steps", "int", -1, "steps", minimum=-1)
    assert (steps.parse("12"), steps.parse(" -1 ")) == (12, -1)
    assert Option("trl.learning_rate", "float", 5e-5, "lr", 0).parse("1e-4") == 0.0001
    assert Option("lora.enabled", "bool", False, "on").parse("on") is True
    assert Option("lora.enabled", "bool", True, "on").parse(None) is False
    assert Option("options.sources", "list", [], "s").parse(" a, ,b ") == ["a", "b"]
    assert Option("options.grammar", "str", None, "g").parse("  ") is None
    trackers = METHOD_OPTIONS["trackers"]
    assert trackers.parse("mlflow, tensorboard") == ["mlflow", "tensorboard"]
    with pytest.raises(ValueError, match="^options.trackers: 'neptune' is not one of tensorboard, mlflow, wandb$"):
        trackers.parse("mlflow, neptune")
