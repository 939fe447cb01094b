"""What a confined warehouse query may run, decided from DuckDB's own parse of each statement.

This is the first of two walls (the second is the connection itself, ``warehouse.confined``):
a statement runs only if DuckDB's parser calls it a SELECT (which covers ``with … select``,
``describe``, ``show``, ``summarize``, ``pivot … in (…)``, ``values``, ``from t``), or an EXPLAIN
or EXPLAIN ANALYZE of one. Everything else is refused by its kind, so a kind added to DuckDB later
is refused too. EXPLAIN ANALYZE runs what it wraps, so the wrapped statement is parsed again and
judged on its own; PREPARE and EXECUTE are refused outright, since the prepared text would run
without passing here. Inside a SELECT, each table function must be a known reader or generator
(``checkpoint()``, ``enable_logging()``, ``query('…')`` and the like are refused), and a reader's
paths must be ``warehouse://`` paths written as literals, so they are known before anything
runs (a computed one is refused). Keywords inside string literals are just text.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import duckdb

from ragfactory.warehouse.readonly_fs import PREFIX, PartialTable, ReadOnlyError, WarehouseFileSystem

ALLOWED_KIND = "SELECT"

# Table functions that read files: their literal path arguments must be warehouse:// paths.
READERS = frozenset(
    {
        "read_parquet",
        "parquet_scan",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_json_objects",
        "read_json_objects_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "read_ndjson_objects",
        "read_text",
        "read_blob",
        "glob",
        "sniff_csv",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "parquet_full_metadata",
        "parquet_bloom_probe",
    }
)
# Table functions that only compute, or describe the in-memory catalog.
GENERATORS = frozenset(
    {
        "range",
        "generate_series",
        "unnest",
        "repeat",
        "repeat_row",
        "json_each",
        "json_tree",
        "summary",
        "query_table",
        "icu_calendar_names",
        "pg_timezone_names",
        "test_all_types",
        "test_vector_types",
        "which_secret",
    }
)
INTROSPECTION_PREFIXES = ("duckdb_", "pragma_")
READ_ONLY_HINT = "only select / with … select / describe / show / summarize / explain run here"


class Refused(ValueError):
    """A statement the read-only SQL surface will not run; the message names what and why."""


class WriteRefused(Refused):
    """A statement whose kind can change state: a write, a setting, an attach, an install."""


class ReadRefused(Refused):
    """A read of something other than the warehouse, or a table function that is not a reader."""


def check_read_only(sql: str, con: duckdb.DuckDBPyConnection | None = None, root: Path | None = None) -> list:
    """The parsed statements of ``sql`` if every one may run; otherwise raise ``Refused``.

    ``con`` serializes SELECTs to JSON for the function checks (any connection will do; this
    thread's parser connection when none is given). With ``root``, a literal ``warehouse://``
    path that resolves outside it (``..``, a link out) is refused here too, even where only a
    plan would be made.
    """
    statements = _parse(sql)
    if not statements:
        raise ValueError("the query is empty")
    con = con if con is not None else parser_connection()
    for statement in statements:
        _check_statement(statement, con, WarehouseFileSystem(root) if root else None)
    return statements


def _check_statement(statement, con: duckdb.DuckDBPyConnection, fs, wrapper: str = "") -> None:
    kind = statement.type.name
    if kind == "EXPLAIN":
        label, inner = _explained(statement.query)
        _check_statement(inner, con, fs, f"{wrapper}{label} ")
        return
    if kind != ALLOWED_KIND:
        raise WriteRefused(
            f"refused: {wrapper}{kind} statements are not allowed: {_why(kind, wrapper)}; "
            f"the warehouse is read-only here ({READ_ONLY_HINT})"
        )
    _check_functions(_serialized(statement.query, con), fs)


def _why(kind: str, wrapper: str) -> str:
    if "ANALYZE" in wrapper:
        return f"EXPLAIN ANALYZE runs the {kind} it explains"
    if kind in {"PREPARE", "EXECUTE"}:
        return "a prepared statement would run later without being checked"
    if kind == "MULTI":
        return "it runs several statements behind one (for PIVOT, list the values: pivot … on c in (…))"
    return "it could change a file, a setting or the catalog"


def _explained(text: str) -> tuple[str, object]:
    """``EXPLAIN [ANALYZE | (options)] <statement>``: the label to report and the inner statement."""
    tokens, words = _words(text)
    position = 1  # words[0] is EXPLAIN: the parser said so
    options = []
    if words[position : position + 1] == ["analyze"]:
        options, position = ["analyze"], position + 1
    elif words[position : position + 1] == ["("]:
        closing = words.index(")", position) if ")" in words[position:] else len(words)
        options, position = words[position + 1 : closing], closing + 1
    label = "EXPLAIN ANALYZE" if "analyze" in options else "EXPLAIN"
    if position >= len(tokens):
        raise WriteRefused(f"refused: {label} of nothing the parser could classify")
    inner = _parse(text[tokens[position] :])
    if len(inner) != 1:
        raise WriteRefused(f"refused: {label} must wrap exactly one statement, not {len(inner)}")
    return label, inner[0]


_PARSERS = threading.local()


def parser_connection() -> duckdb.DuckDBPyConnection:
    """This thread's in-memory connection for parsing and type names, never for data.

    DuckDB's module-level functions (``duckdb.extract_statements``, ``duckdb.from_arrow``) share
    one default connection per process, and a connection used by two threads at once refuses the
    second ("connection is busy"): the build's shards run in threads, so each thread parses on
    its own connection.
    """
    con = getattr(_PARSERS, "con", None)
    if con is None:
        con = _PARSERS.con = duckdb.connect()
    return con


def _parse(text: str) -> list:
    try:
        return parser_connection().extract_statements(text)
    except duckdb.Error as exc:
        # What DuckDB cannot parse it cannot classify either: refused, with the parser's reason.
        raise Refused(f"refused: the parser cannot classify this query ({first_line(exc)})") from exc


def _words(text: str) -> tuple[list[int], list[str]]:
    """Start offsets and lower-cased text of the tokens that are not comments."""
    found = duckdb.tokenize(text)
    ends = [start for start, _ in found[1:]] + [len(text)]
    kept = [
        (start, text[start:end].strip().lower()) for (start, kind), end in zip(found, ends) if kind.name != "comment"
    ]
    return [start for start, _ in kept], [word for _, word in kept]


def serialized_tree(query: str, con: duckdb.DuckDBPyConnection) -> dict:
    """DuckDB's parse tree of a SELECT (``json_serialize_sql``); ``error`` is set in it when the
    parser cannot describe the statement."""
    return json.loads(con.execute("select json_serialize_sql($q)", {"q": query}).fetchall()[0][0])


def _serialized(query: str, con: duckdb.DuckDBPyConnection) -> dict:
    tree = serialized_tree(query, con)
    if tree.get("error"):
        # The parser called it a SELECT but cannot describe it: what it would run is unknown.
        raise ReadRefused(f"refused: a statement the parser cannot describe ({tree.get('error_message')})")
    return tree


def _check_functions(tree, fs) -> None:
    for node in walk_tree(tree):
        if node.get("type") == "BASE_TABLE" and _is_path(str(node.get("table_name", ""))):
            # `from 'file.csv'` is a reader in disguise (DuckDB's replacement scan)
            _check_paths("from", [node["table_name"]], fs)
        if node.get("type") != "TABLE_FUNCTION":
            continue
        function = node.get("function") or {}
        name = str(function.get("function_name", "")).lower()
        if name in READERS:
            _check_paths(name, literal_paths(function), fs)
        elif name not in GENERATORS and not name.startswith(INTROSPECTION_PREFIXES):
            raise ReadRefused(
                f"refused: table function {name}() does not run here; only file readers over "
                f"{PREFIX} paths, generators (range, unnest, …) and duckdb_*/pragma_* listings do"
            )


def _is_path(name: str) -> bool:
    return "/" in name or "\\" in name or "." in name


def _check_paths(reader: str, paths: list[str] | None, fs) -> None:
    """``reader`` is a table function's name, or "from" for a path used as a table."""
    if paths is None:
        raise ReadRefused(
            f"refused: {reader}() with a path computed by the query; write the {PREFIX} path "
            "(or a list of them) as a literal, so it can be checked before anything runs"
        )
    for path in paths:
        call = f"from {path!r}" if reader == "from" else f"{reader}({path!r})"
        if not path.startswith(PREFIX):
            raise ReadRefused(
                f"refused: {call} reads outside the warehouse; only {PREFIX} paths "
                f"are readable here (e.g. {PREFIX}questions/*/*.parquet)"
            )
        try:
            if fs is not None:
                fs.check_pattern(path)
                if reader != "glob":  # a listing shows what is there; a read must be whole
                    fs.check_whole(path)
        except ReadOnlyError as exc:
            raise ReadRefused(f"refused: {call}: {exc}") from exc
        except PartialTable as exc:
            raise Refused(f"{call}: {exc}") from exc


def walk_tree(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk_tree(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk_tree(value)


def literal_paths(function: dict) -> list[str] | None:
    """A reader's literal path or literal list of paths; None when the query computes it."""
    arguments = function.get("arguments") or []
    if not arguments:
        return []
    first = arguments[0].get("expression") or {}
    items = [first]
    if first.get("class") == "FUNCTION" and first.get("function_name") in {"list_value", "array_value"}:
        items = [arg.get("expression") or {} for arg in first.get("arguments", [])]
    literal = [
        item
        for item in items
        if item.get("class") == "CONSTANT" and (item.get("literal") or {}).get("kind") == "STRING"
    ]
    return [item["literal"]["text"] for item in literal] if len(literal) == len(items) else None


def first_line(exc: BaseException) -> str:
    """An error's message without DuckDB's LINE/caret context, for one-line reports."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
