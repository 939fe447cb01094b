"""What every command group of the command line shares: the Typer apps, the console, the
``--root`` option, and the way a command fails, checks its inputs and runs a flow."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    help="ragfactory: build process-supervised training data for agentic RAG, then query it.\n\n"
    "Example:\n\n    ragfactory build --config configs/demo.yaml\n\n"
    '    ragfactory sql "select dataset, count(*) from questions group by 1"',
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
retrieval_app = typer.Typer(
    help="Retrieval over the warehouse's passages, and the Search-R1-compatible server.\n\n"
    'Example: `ragfactory retrieval search "Who directed Jaws?" -k 5`',
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
app.add_typer(retrieval_app, name="retrieval")

# Piped output (CI logs, `make demo | tee`) gets wide tables instead of rich's 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)

DEBUG_ENV = "RAGFACTORY_DEBUG"
# Commands whose Prefect home is the user's: `serve`'s server keeps its flow history there.
USER_PREFECT_HOME = frozenset({"serve"})
_prefect: dict[str, Callable[[], None]] = {}  # this process's Prefect settings, made once


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Print the traceback of a failure on screen too (it always goes to the run's log)"
        ),
    ] = False,
) -> None:
    """ragfactory: build process-supervised training data for agentic RAG, then query it."""
    from ragfactory.memory import tune_allocator

    tune_allocator()  # before any engine allocates: large freed blocks go back to the system
    if debug:  # the environment, not a global: a flow run in a subprocess or worker sees it too
        os.environ[DEBUG_ENV] = "1"
    from ragfactory.progress import quiet_bars_in_logs

    quiet_bars_in_logs()  # before any command imports transformers or tqdm
    # Before any command imports Prefect, which reads its settings once, at import. A process
    # that imported Prefect before calling the app (a test, a notebook) has its own settings.
    if "prefect" not in sys.modules:
        prefect_settings(temporary_home=ctx.invoked_subcommand not in USER_PREFECT_HOME)


def prefect_settings(temporary_home: bool = True) -> Callable[[], None]:
    """Prefect's settings for this process (``ragfactory/local_flows.py``: its home, the server's
    start-up timeout, the API), made once per process; the function that removes what they made."""
    if "cleanup" not in _prefect:
        from ragfactory.local_flows import prefect_local_defaults as local_defaults

        _prefect["cleanup"] = local_defaults(temporary_home)
    return _prefect["cleanup"]


RootOption = Annotated[
    str | None,
    typer.Option(
        "--root",
        help="Warehouse root: a folder, or an object store's URI such as "
        "s3://bucket/prefix (default: $RAGFACTORY_HOME, else ~/.ragfactory)",
    ),
]


def open_warehouse(root: str | Path | None, tables: Iterable[str] | None = None):
    """The warehouse at ``root`` (default: $RAGFACTORY_HOME, else ~/.ragfactory); imported here so
    that only the commands that use it load the warehouse code. An object store's mirror is
    brought up to the store first (only ``tables`` of it, when given), with a line saying what
    came down."""
    from ragfactory.warehouse.objectstore import ObjectStoreError
    from ragfactory.warehouse.store import Warehouse

    try:
        wh = Warehouse(root)
        if wh.store is not None:
            pulled = wh.pull(tables)
    except (ObjectStoreError, ValueError) as exc:
        fail(str(exc))
    if wh.store is not None:  # on stderr: a query's csv or json on stdout stays clean
        typer.echo(f"mirror of {wh.location} at {wh.root}: {pulled}", err=True)
    return wh


def fail(message: str) -> None:
    """Print ``message`` as one ``error:`` line and exit with code 1; never returns."""
    # soft_wrap: one line however long, so a refusal reads (and greps) as one line
    console.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=1)


def debug_requested() -> bool:
    """Whether the global ``--debug`` option (or ``RAGFACTORY_DEBUG=1``) was given."""
    return os.environ.get(DEBUG_ENV, "") not in {"", "0"}


def preflight(check, prefix: str = "") -> None:
    """Run a preflight check; a permanent error (missing file, unknown model, invalid config)
    exits with its one-line message, before any work or any run is recorded."""
    from ragfactory.schemas.errors import PermanentError

    try:
        check()
    except PermanentError as exc:
        if debug_requested():
            console.print_exception()
        fail(prefix + " ".join(str(exc).split()))


def validation_message(error: dict) -> str:
    """One pydantic error as ``field: message``; a whole-model check has no field, and its
    ``Value error, `` prefix says nothing."""
    message = error["msg"].removeprefix("Value error, ")
    where = ".".join(str(p) for p in error["loc"])
    return f"{where}: {message}" if where else message


def options_config(model_cls, root: Path | None, **fields):
    """A flow's pydantic config from command options (unset ones keep the model's defaults) and
    the warehouse root; a value that does not validate exits with the field named."""
    from pydantic import ValidationError

    fields["warehouse"] = {"root": str(root)} if root is not None else None
    try:
        return model_cls.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        fail("; ".join(validation_message(e) for e in exc.errors()))


class _ScreenWithoutTraceback(logging.Filter):
    """Drop a log record's traceback before a console handler prints it (the run's log file,
    which sees the record first, keeps it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


class _ScreenWithoutRoutineStates(logging.Filter):
    """Keep Prefect's routine state lines ("Finished in state Completed()", "Beginning flow run")
    off the screen: a build has one per task run, hundreds a night, and the progress bars and the
    summary say the same; the run's log keeps them, and every other state (failed, crashed,
    retrying) still shows."""

    ROUTINE = re.compile(r"(Finished in state Completed\(|Beginning (sub)?flow run|Created (task|subflow) run)")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name.startswith("prefect.") and self.ROUTINE.match(record.getMessage()))


@contextmanager
def logged_run(root: Path, command: str, after_failure: Callable[[], str] = str) -> Iterator[Path]:
    """Log everything the run logs (Prefect's task and flow logs, tracebacks included) to
    ``<root>/logs/<command>-<UTC time>-<pid>.log``, and keep tracebacks off the screen unless
    ``--debug``. An exception escaping the run exits with one line naming it and the log file,
    then what ``after_failure()`` adds (what the failure left behind).
    """
    import traceback

    from ragfactory.warehouse.guard import first_line

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = Path(root) / "logs" / f"{command}-{stamp}-{os.getpid()}.log"
    handler = _log_handler(Path(root), path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    screen = logging.getLogger()
    consoles, quiet, routine = list(screen.handlers), _ScreenWithoutTraceback(), _ScreenWithoutRoutineStates()
    screen.handlers.insert(0, handler)  # first, so it writes each traceback before a console drops it
    for console_handler in consoles if not debug_requested() else []:
        console_handler.addFilter(quiet)
        console_handler.addFilter(routine)
    try:
        yield path
    except typer.Exit:
        raise  # a failure the block already reported
    except Exception as exc:
        handler.stream.write("".join(traceback.format_exception(exc)))
        if debug_requested():
            traceback.print_exception(exc, file=sys.stderr)
        fail(f"{first_line(exc)} (log: {path}){after_failure()}")
    finally:
        screen.removeHandler(handler)
        handler.close()
        for console_handler in consoles:
            console_handler.removeFilter(quiet)
            console_handler.removeFilter(routine)


def run_flow(call: Callable, cleanup: Callable[[], None]) -> dict:
    """The summary of the flow run that ``call`` starts (``ragfactory/local_flows.py``)."""
    from ragfactory.local_flows import run_flow as run_local_flow

    def echo(line: str) -> None:
        console.print(f"[red]error:[/red] {escape(line)}", soft_wrap=True, highlight=False)

    return run_local_flow(call, echo, cleanup)


def _log_handler(root: Path, path: Path) -> logging.FileHandler:
    """The handler writing the run's log at ``path``; a root this user cannot write (no
    permission, a read-only file system, a file where the folder goes) is one ``error:`` line
    naming it, before anything runs."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return logging.FileHandler(path, encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        fail(f"the warehouse root {root} is not writable: cannot write the log in {path.parent} ({reason})")


def prefect_local_defaults(root: str | Path | None = None) -> Callable[[], None]:
    """Ready this process to start Prefect's server and other children: its Prefect settings
    (made before the command began) and a watchdog that ends those children if this process is
    SIGKILLed (``ragfactory/watchdog.py``); returns the function that removes what that made.
    With the warehouse ``root`` a running ``ragfactory serve`` serves, flows report to its server
    instead of a temporary one, and a line says so."""
    from ragfactory.local_flows import report_to_serving_stack
    from ragfactory.watchdog import start_watchdog

    start_watchdog()
    cleanup = prefect_settings()
    if root is not None and (api_url := report_to_serving_stack(root)):
        console.print(
            f"reporting to the Prefect server of `ragfactory serve`: {api_url.removesuffix('/api')}",
            soft_wrap=True,
            highlight=False,
        )
    return cleanup


def print_failures(summary: dict, log: Path, noun: str = "shard") -> None:
    """One ``error:`` line per failed shard of a run: what failed, why, and where the traceback is."""
    errors = summary.get("errors", {})
    for name in summary["failed_shards"]:
        reason = " ".join(str(errors.get(name) or "see the log").split())
        console.print(
            f"[red]error:[/red] {escape(f'{noun} {name} failed: {reason} (log: {log})')}",
            soft_wrap=True,
            highlight=False,
        )


def print_arrow(table, title: str | None = None, fmt: str = "table") -> None:
    """Print an arrow table as a rich table, CSV or JSON lines (``ragfactory.output``)."""
    from ragfactory.output import print_arrow as render

    render(table, console, title=title, fmt=fmt)


def key_values(pairs: list[str], flag: str) -> dict:
    """``key=value`` pairs of a repeatable option (``--trl``, ``--engine-option``), each value read
    as YAML (numbers, booleans, lists)."""
    import yaml

    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(f"{flag} {pair!r}: expected key=value, e.g. {flag} max_steps=100")
        overrides[key.strip()] = _scalar(yaml.safe_load(value))
    return overrides


def _scalar(value):
    """YAML 1.1 reads ``1e-4`` (no dot) as a string: a number in exponent form is a number."""
    if isinstance(value, str):
        try:
            return float(value) if value.strip().lower() not in ("nan", "inf", "-inf", "infinity") else value
        except ValueError:
            return value
    return value
