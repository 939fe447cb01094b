"""The `ragfactory` command line: build data, query the warehouse, serve retrieval.

``app`` is the console script (``ragfactory = "ragfactory.cli:app"``). Each command group is a
module that registers its commands on ``app`` when imported, in the order ``--help`` lists them:
``warehouse`` (sql, tables, check), ``building`` (build), ``training`` (train), ``evaluation``
(evaluate) and ``serving`` (serve, retrieval serve and search). A command imports what it runs
(flows, the warehouse, pyarrow) in its body, so ``ragfactory --help`` loads typer and rich only.
"""

from __future__ import annotations

# isort: off
from ragfactory.cli import warehouse, building, training, evaluation, serving  # noqa: F401  (they register, in order)
from ragfactory.cli import corpus, world  # noqa: F401  (register `ragfactory corpus`, `ragfactory world`)

# isort: on
from ragfactory.cli.building import print_build_summary
from ragfactory.cli.common import app, console, logged_run, print_arrow, print_failures
from ragfactory.cli.evaluation import print_comparison

__all__ = ["app", "console", "logged_run", "print_arrow", "print_build_summary", "print_comparison", "print_failures"]
