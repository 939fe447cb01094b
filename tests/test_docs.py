"""Docs cite what is in the repository: docs/architecture.md by section, docs/papers.md by paper
name. No tracked file may cite the old design notes, a tracker ticket, or a paper by the number
of a private copy; those point at nothing a reader of the repository has.

The scan reads every tracked text file (``git ls-files``) except third-party data: the bundled
benchmark datasets and vendored minified scripts. It takes well under a second.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"
PAPERS = REPO / "docs" / "papers.md"
PAPER_NAMES = ("DecEx-RAG", "ReasonRAG", "APEX-Searcher", "R3-RAG", "TreePS-RAG")

# Third-party text: dataset rows may say anything, minified scripts are full of digits.
SKIPPED = re.compile(r"^(ragfactory/data/[^/]+/[^/]+\.jsonl|ragfactory/dashboard/static/vendor/)")

# Each pattern is written so that this file's own source does not match it.
FORBIDDEN = {
    "the design notes": re.compile(r"\bDESIGN\.md\b"),
    "a tracker ticket": re.compile(
        r"\b[Ii]ssues? ?#?[0-9]+|\b[Tt]he issue\b|\b[Ii]ssue's\b|\b[Ii]ssue [\"(]|[(]issue\b|\bissue:"
    ),
    # a three-digit paper number as a word, not inside a number (1,000 / 0.001 / 10_000), and
    # the file names of the papers' private copies
    "a paper by file number": re.compile(r"(?<![\w.,:+/#-])00[0-4](?![\w.])|\b00[0-4]_[0-9a-f]{6}"),
}
# The header comments of the output grammars cite papers by the old numbers and must stay as
# they are: a grammar's whole text, comments included, is hashed into the call id of every
# constrained request (``tasks/llm/types.py`` ``Grammar.key``), so editing one would change the
# ids of cached completions and of the golden rows (tests/search/test_golden_ids.py). Their
# lines name the paper too ("DecEx-RAG termination decision ..."); docs/papers.md maps each
# grammar to its paper. Only that pattern, only in those comment lines, is let through.
HASHED_COMMENTS = (re.compile(r"^tasks/(search/[^/]+/)?prompts/[^/]+\.lark$"), "a paper by file number", "//")
# What each pattern's matches all contain, lower-cased: files without it are not searched.
NEEDLES = {"the design notes": "design", "a tracker ticket": "issue", "a paper by file number": "00"}


def tracked_text_files() -> dict[str, str]:
    """Tracked files (and new ones git does not ignore) by path, as text; binary files (a NUL
    byte in their head) left out."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    files = {}
    for name in listed.stdout.decode().split("\0"):
        path = REPO / name
        if not name or SKIPPED.match(name) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        files[name] = data.decode("utf-8", errors="replace")
    return files


def citations(text: str, name: str = "") -> list[str]:
    """``"<line>: <what>: <text>"`` for every forbidden citation in ``text`` (file ``name``)."""
    files, exempt, comment = HASHED_COMMENTS
    found = []
    lowered = text.lower()
    for what, pattern in FORBIDDEN.items():
        # a plain substring first (fast), the pattern over the file, lines only where it hits
        if NEEDLES[what] not in lowered or not pattern.search(text):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            match = pattern.search(line)
            if match and files.match(name) and what == exempt and line.startswith(comment):
                continue
            if match:
                found.append(f"{number}: {what}: {match.group(0)!r}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_the_scan_sees_the_repository():
    files = tracked_text_files()
    assert "tests/test_docs.py" in files and "docs/architecture.md" in files
    assert "docs/images/dashboard-runs.png" not in files  # binary
    assert len(files) > 200


def test_no_tracked_file_cites_outside_the_repository():
    bad = [f"{name}:{hit}" for name, text in sorted(tracked_text_files().items()) for hit in citations(text, name)]
    assert not bad, "cite docs/architecture.md (section) or docs/papers.md (paper name) instead:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "text",
    [
        "see " + "DESIGN" + ".md, Core contracts",
        "as the " + "issue says",
        "(" + "issue" + " 25)",
        "Issue" + " 13 emptied it",
        "issue" + " #37",
        "the " + "issue" + "'s figure",
        "Target (" + "issue" + "):",
        "(" + "issue" + ' "Batcher")',
        "(" + "00" + "4, §2.3)",
        "paper " + "00" + "2",
        "papers/" + "00" + "3_baf7cfc1ed44dc3a.txt",
    ],
)
def test_the_check_catches_a_citation(text):
    assert citations(text)


@pytest.mark.parametrize(
    "text",
    [
        "1,000 questions",
        "beta=0.001",
        "10_000_000 rows",
        "a question issues it",
        "is issued",
        "(TreePS-RAG, §2.3)",
        "arXiv:2510.05691",
        "T00:00:04Z",
        "0x004f",
    ],
)
def test_the_check_lets_numbers_and_words_through(text):
    assert citations(text) == []


def test_only_the_hashed_grammar_comments_keep_their_numbers():
    cite = "// DecEx-RAG termination (" + "00" + "0, Table 4)"
    assert citations(cite, "tasks/search/decex/prompts/decex_termination.lark") == []
    assert citations(cite, "tasks/search/decex/prompts/decex_termination.txt")
    assert citations("start: " + cite[3:], "tasks/search/decex/prompts/decex_termination.lark")
    assert citations("// see DESIGN" + ".md", "tasks/search/decex/prompts/decex_termination.lark")


def _sections(markdown: str) -> set[str]:
    """Heading texts without backticks or a trailing parenthesis: "Tree and the nodes table"."""
    titles = re.findall(r"^#{2,4} (.+)$", markdown, flags=re.M)
    return {re.sub(r"\s*\(.*\)$", "", t).replace("`", "").strip() for t in titles}


def test_every_architecture_citation_names_a_section():
    sections = _sections(ARCHITECTURE.read_text(encoding="utf-8"))
    cited = {
        (name, section)
        for name, text in tracked_text_files().items()
        for section in re.findall(r'docs/architecture\.md,\s+"([^"]+)"', text)
    }
    assert cited, "no file cites a section of docs/architecture.md"
    missing = sorted(f"{name}: {section!r}" for name, section in cited if " ".join(section.split()) not in sections)
    assert not missing, f"no such section in docs/architecture.md: {missing}"


def test_papers_page_has_each_paper_with_its_arxiv_id():
    text = PAPERS.read_text(encoding="utf-8")
    assert _sections(text) >= set(PAPER_NAMES)
    assert len(set(re.findall(r"arXiv:(\d{4}\.\d{5})", text))) == 5
