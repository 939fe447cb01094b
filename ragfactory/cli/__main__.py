"""``python -m ragfactory.cli``: the same command line as the ``ragfactory`` script."""

from ragfactory.cli import app

app()
