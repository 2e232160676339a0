"""What the docs tell a reader to run or open exists: every ``python -m bench.X`` (and ``bench.X`` named in code),
every ``sqlqueue COMMAND``, every repository path in an inline code span (a test named ``path::name`` included),
every script run with ``bash`` and every relative link, with its anchor, in docs/*.md and README.md.

Fenced blocks are read for commands only: they also hold program output (profiles with the paths of their day)."""

from __future__ import annotations

import argparse
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from airflow_sqlqueue.cli.parser import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
#: A path into the repository: one of its top folders, then anything but spaces and quotes.
REPO_PATH = re.compile(r"(?<![\w/.-])((?:airflow_sqlqueue|bench|tests|scripts|docs|\.ci)/[^\s`'\"]*)")
BENCH_MODULE = re.compile(r"(?<![\w.])(bench(?:\.\w+)+)")


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _prose(text: str) -> str:
    """The page without its fenced blocks."""
    return FENCE.sub("", text)


def _spans(text: str) -> list[str]:
    return SPAN.findall(_prose(text))


def _command_lines(text: str) -> list[str]:
    """Shell lines: those of ``bash``/``console``/unnamed fenced blocks, and inline spans."""
    lines = [line for lang, body in FENCE.findall(text) if lang in ("", "bash", "console")
             for line in body.splitlines()]
    return [re.sub(r"^\s*\$\s+", "", line) for line in lines] + _spans(text)


@cache
def _cli() -> tuple[set[str], dict[str, bool]]:
    """The subcommands, and each top-level option with whether it takes a value."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    takes_value = {opt: action.nargs != 0 for action in parser._actions for opt in action.option_strings}
    return set(sub.choices), takes_value


def sqlqueue_commands(line: str) -> list[str]:
    """The subcommand of each ``sqlqueue ...`` invocation in one shell line (placeholders left out)."""
    commands, takes_value = [], _cli()[1]
    for segment in re.split(r"&&|\|\||[|;]|\$\(", line):
        try:
            words = shlex.split(segment, comments=True)
        except ValueError:  # an unbalanced quote: prose, or a line continued
            words = segment.split()
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value sqlqueue ...
            words = words[1:]
        if not words or words[0].rsplit("/", 1)[-1] != "sqlqueue":
            continue
        rest = iter(words[1:])
        for word in rest:
            if word.startswith("-"):
                if "=" not in word and takes_value.get(word, False):
                    next(rest, None)
                continue
            if re.fullmatch(r"[a-z][a-z-]*", word):
                commands.append(word)
            break
    return commands


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link: its text
    return re.sub(r"[^\w\- ]", "", text.lower().replace("`", "")).replace(" ", "-")


@cache
def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    for line in _prose(page.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            slug, n = github_anchor(m.group(1)), 1
            while slug in anchors:  # GitHub numbers repeated headings
                slug = f"{github_anchor(m.group(1))}-{n}"
                n += 1
            anchors.add(slug)
        anchors.update(re.findall(r"<a (?:name|id)=\"([^\"]+)\"", line))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_bench_module_the_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    run = set(re.findall(r"python -m (bench(?:\.\w+)+)", text))
    missing = sorted(m for m in run if _module_file(m) is None)
    named = {m for span in _spans(text) for m in BENCH_MODULE.findall(span)} - run
    missing += sorted(m for m in named if not _names_something(m))
    assert missing == [], f"{_name(page)} names bench modules (or names in them) that do not exist: {missing}"


def _module_file(module: str) -> Path | None:
    for candidate in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__main__.py"):
        if candidate.is_file():
            return candidate
    return None


def _names_something(dotted: str) -> bool:
    """A module, or a module and a function, class or constant defined in it (``bench.drain.run``)."""
    if _module_file(dotted) is not None:
        return True
    module, _, name = dotted.rpartition(".")
    source = _module_file(module)
    return source is not None and re.search(rf"^(?:async def |def |class ){name}\b|^{name}\b.*=",
                                            source.read_text(encoding="utf-8"), re.M) is not None


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_sqlqueue_command_the_page_runs_exists(page: Path) -> None:
    commands = _cli()[0]
    used = {c for line in _command_lines(page.read_text(encoding="utf-8")) for c in sqlqueue_commands(line)}
    unknown = sorted(used - commands)
    assert unknown == [], f"{_name(page)}: no such sqlqueue commands {unknown} (known: {sorted(commands)})"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_repository_path_the_page_shows_exists(page: Path) -> None:
    missing = []
    for span in _spans(page.read_text(encoding="utf-8")):
        for found in REPO_PATH.findall(span):
            path, _, test_name = found.rstrip(".,:;)").partition("::")
            path = re.sub(r":\d+(-\d+)?$", "", path)  # a line reference
            if any(c in path for c in "*<>{}[]$") or path.endswith("..."):
                continue  # a pattern or a placeholder
            target = ROOT / path
            if not target.exists():
                missing.append(found)
            elif test_name and not re.search(rf"def {re.escape(test_name.split('[')[0])}\b",
                                             target.read_text(encoding="utf-8")):
                missing.append(found)
    for line in _command_lines(page.read_text(encoding="utf-8")):  # scripts it runs from a clone
        line = re.sub(r"(?:^|\s)#.*", "", line)  # a shell comment
        missing += [script for script in re.findall(r"(?:^|[\s;&|])(?:bash|sh)\s+((?:\./)?[\w.][\w./-]*)", line)
                    if not (ROOT / script).is_file()]
    assert missing == [], f"{_name(page)} shows paths that are not in the repository: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_of_the_page_leads_somewhere(page: Path) -> None:
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", _prose(page.read_text(encoding="utf-8"))):
        if "://" in target or target.startswith("mailto:"):
            continue
        linked = (page.parent / target).resolve() if target else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}#{anchor}")
    assert broken == [], f"{_name(page)} links to what is not there: {broken}"


def test_the_command_reader_finds_commands_behind_options_and_leaves_placeholders() -> None:
    assert sqlqueue_commands("sqlqueue --json peek orders") == ["peek"]
    assert sqlqueue_commands("sqlqueue --conn-id sqlqueue_default --json receive orders") == ["receive"]
    assert sqlqueue_commands("export X=1 && SQLQUEUE_URL=sqlite:///q.db sqlqueue create orders | tee x") == ["create"]
    assert sqlqueue_commands("$NB --systems sqlqueue --producer-rate 100") == []  # a value, not an invocation
    assert sqlqueue_commands("sqlqueue COMMAND --help") == []
    assert github_anchor("Wake-ups: push on PostgreSQL, the database's files on SQLite, and the idle back-off") == \
        "wake-ups-push-on-postgresql-the-databases-files-on-sqlite-and-the-idle-back-off"
