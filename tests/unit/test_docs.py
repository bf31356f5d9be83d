"""The documentation holds to the code: every relative link (and its anchor) in README.md and docs/ resolves,
every `make <target>` and `metrics-sched <command>` quoted exists, the configuration reference table is the one
generated from the config field table, and no page states a config field's default other than that table's."""

from __future__ import annotations

import argparse
import dataclasses
import re
import tomllib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from adapters.bounded_answer import DEFAULT_MAX_RESPONSE_BYTES
from metrics_sched.app.cli import build_parser
from metrics_sched.config import DEFAULT_PLUGINS
from metrics_sched.config.durations import parse_duration
from metrics_sched.config.errors import ArgsError, ConfigError
from metrics_sched.config.reference import BEGIN, END, defaults, replace_table
from metrics_sched.plugins import in_tree_registry

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted([README, *(ROOT / "docs").rglob("*.md")])
CONFIGURATION = ROOT / "docs" / "configuration.md"
README_MAX_LINES = 250

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
_LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def prose(text: str) -> str:
    """The text without fenced code blocks and inline code (links inside code are not links)."""
    return _INLINE_CODE.sub(" ", _FENCE.sub(" ", text))


def code_snippets(text: str) -> Iterator[str]:
    """Every line of a fenced block, and every inline code span: where commands are quoted."""
    for block in _FENCE.finditer(text):
        yield from block.group(0).splitlines()[1:-1]
    for span in _INLINE_CODE.finditer(_FENCE.sub(" ", text)):
        yield span.group(2)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text without markup, lower case, punctuation but - and _ dropped,
    spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", _FENCE.sub("", page.read_text()), re.M):
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        out.add(anchor if count == 0 else f"{anchor}-{count}")
        seen[anchor] = count + 1
    return out


def links(page: Path) -> Iterator[str]:
    text = prose(page.read_text())
    for match in _LINK.finditer(text):
        yield match.group(1)
    for match in _IMAGE.finditer(text):
        yield match.group(1)


def test_the_readme_is_a_front_page() -> None:
    assert len(README.read_text().splitlines()) <= README_MAX_LINES


def test_the_pages_are_found() -> None:
    names = {rel(p) for p in PAGES}
    for topic in ("deploying", "configuration", "plugins", "sources", "observability", "runbooks", "rebalancing",
                  "preemption-and-gangs", "dra", "security", "benchmarks", "known-limits", "comparison"):
        assert f"docs/{topic}.md" in names, topic


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {rel(dest)}")
    assert not broken, f"{rel(page)}: {broken}"


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md")}
    assert not sorted(rel(p) for p in pages - linked)


# -- commands quoted in the docs ------------------------------------------------------------------------
def make_targets() -> set[str]:
    out: set[str] = set()
    for match in re.finditer(r"^([A-Za-z0-9][\w./ -]*?)\s*:(?!=)", (ROOT / "Makefile").read_text(), re.M):
        out.update(match.group(1).split())
    return out


_MAKE = re.compile(r"(?:^|[\s;&|(])make\s+((?:[A-Za-z_][\w]*=\S*\s+)*)([a-z][\w-]*)")


def test_every_make_target_quoted_exists() -> None:
    targets = make_targets()
    assert {"demo", "test", "image", "lint"} <= targets
    missing = []
    for page in PAGES:
        for snippet in code_snippets(page.read_text()):
            for match in _MAKE.finditer(snippet):
                if match.group(2) not in targets:
                    missing.append(f"{rel(page)}: make {match.group(2)}")
    assert not missing


def cli_parser() -> argparse.ArgumentParser:
    """The parser with the commands pyproject registers (the dev tooling's too), installed or not."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["metrics_sched.cli"]
    commands = [EntryPoint(name, value, "metrics_sched.cli") for name, value in scripts.items()]
    return build_parser(commands)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


# `metrics-sched` where a command starts: the line's or span's start, after a shell separator, or a path to it.
_CLI = re.compile(r"(?:^|[;&|(]\s*|\$\s+|\s(?:\S*/))metrics-sched((?:\s+[a-z][\w-]*)+)")


def test_every_metrics_sched_command_quoted_exists() -> None:
    top = subcommands(cli_parser())
    assert {"run", "explain", "check-config", "config", "replay", "demo", "devcluster"} <= set(top)
    unknown, seen = [], 0
    for page in PAGES:
        for snippet in code_snippets(page.read_text()):
            for match in _CLI.finditer(snippet.strip()):
                words = match.group(1).split()
                seen += 1
                if words[0] not in top:
                    unknown.append(f"{rel(page)}: metrics-sched {words[0]}")
                    continue
                verbs = subcommands(top[words[0]])
                if verbs and len(words) > 1 and words[1] not in verbs:
                    unknown.append(f"{rel(page)}: metrics-sched {words[0]} {words[1]}")
    assert seen >= 10, "the pattern finds the commands the docs quote"
    assert not unknown


# -- defaults -------------------------------------------------------------------------------------------
def test_the_configuration_table_is_the_generated_one() -> None:
    # Regenerate with: python -m metrics_sched.config.reference --write docs/configuration.md
    page = CONFIGURATION.read_text()
    assert page.count(BEGIN) == 1 and page.count(END) == 1
    assert replace_table(page) == page


def field_lookup() -> dict[str, object]:
    """Names a page may give a config field: its full path (`leaderElection.leaseDuration`, `metrics.<name>.ttl`),
    without list steps (`profiles.shadow`), and its last name alone where no other field has that last name."""
    table = defaults()
    out: dict[str, object] = {}
    by_leaf: dict[str, list[str]] = {}
    for path, value in table.items():
        out[path] = value
        out[path.replace("[]", "")] = value
        by_leaf.setdefault(re.split(r"[.\]]", path)[-1], []).append(path)
    for leaf, paths in by_leaf.items():
        if len(paths) == 1 and leaf not in out:
            out[leaf] = table[paths[0]]
    # Plugin args by name, where every plugin that has the arg gives it the same default and no config field is
    # named so (`bindTimeoutSeconds`, `topologyKey`).
    by_arg: dict[str, set[object]] = {}
    for args in plugin_defaults().values():
        for name, value in args.items():
            by_arg.setdefault(name, set()).add(value)
    for name, values in by_arg.items():
        if len(values) == 1 and name not in out and name not in by_leaf:
            out[name] = next(iter(values))
    # The one source field every adapter shares with the same default (adapters/bounded_answer.py).
    out["maxResponseBytes"] = DEFAULT_MAX_RESPONSE_BYTES
    return out


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def plugin_defaults() -> dict[str, dict[str, object]]:
    """{plugin: {arg (as the YAML spells it): default}} of every in-tree plugin's scalar args."""
    out: dict[str, dict[str, object]] = {}
    for name, spec in in_tree_registry(third_party=False).catalog().items():
        try:
            args = spec.parse_args({})
        except ArgsError:  # a plugin with a required arg (NodeLabelFilter) has no defaults to state
            continue
        if args is None or not dataclasses.is_dataclass(args):
            continue
        out[name] = {camel(f.name): getattr(args, f.name) for f in dataclasses.fields(args)
                     if isinstance(getattr(args, f.name), str | int | float | bool | type(None))}
    return out


_BYTES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def same_value(stated: str, default: object) -> bool | None:
    """Whether a stated default equals the table's; None when the words are not a value at all."""
    text = stated.strip().strip("`'\"").rstrip(".")
    if default is None:
        return None if text not in ("null", "none", "None") else True
    if isinstance(default, bool):
        words = {"true": True, "on": True, "false": False, "off": False}
        return None if text.lower() not in words else words[text.lower()] is default
    if isinstance(default, int | float):
        match = re.fullmatch(r"([\d,_]+(?:\.\d+)?)\s*(KiB|MiB|GiB|Ki|Mi|Gi)?", text)
        if not match:
            return None
        number = float(match.group(1).replace(",", "").replace("_", "")) * _BYTES.get(match.group(2) or "", 1)
        return number == float(default)
    if isinstance(default, str) and re.fullmatch(r"[\d.]+(ns|us|µs|ms|s|m|h)", default):
        try:
            seconds = parse_duration(text.replace(" ", "").replace("min", "m"), "stated")
            return seconds == parse_duration(default, "default")
        except ConfigError:
            try:
                return float(text.rstrip("s ")) == parse_duration(default, "default")
            except ValueError:
                return None
    if isinstance(default, str):
        return None if not re.fullmatch(r"[\w./:-]+", text) else text == default
    return None


# A backticked field, then within the same clause "default", "defaults to", "default:" and the value.
_STATED = re.compile(r"`([A-Za-z][\w.<>\[\]]*)`([^`.;|\n]{0,80}?)\bdefaults?\b(?:\s+(?:is|of|to|here))?\s*[:=]?\s*"
                     r"\(?(`[^`]+`|\d[\d.,]*(?:\s?(?:KiB|MiB|GiB|Ki|Mi|Gi|ms|s|min|m|h)\b)?|[^\s,;)]+)")


# A backticked field with its value in parentheses right after it: "`leaseDuration` (15 s)".
_STATED_IN_PARENS = re.compile(r"`([A-Za-z][\w.]*)` \((`?[\d][\d.,]*(?: ?[a-zA-Z]{1,3})?`?)\)")


def default_statements(page: Path) -> Iterator[tuple[str, str]]:
    text = page.read_text()
    if BEGIN in text:  # the generated table states the table's defaults by construction
        text = text[:text.index(BEGIN)] + text[text.index(END):]
    text = _FENCE.sub(" ", text)
    for match in _STATED.finditer(text):
        yield match.group(1), match.group(3).rstrip(".")
    for match in _STATED_IN_PARENS.finditer(text):
        yield match.group(1), match.group(2)
    # Tables with a "default" column.
    for table in re.finditer(r"^\|(.+)\|\n\|[-| :]+\|\n((?:\|.*\|\n?)+)", text, re.M):
        header = [c.strip().lower() for c in table.group(1).split("|")]
        if "default" not in header:
            continue
        column = header.index("default")
        for row in table.group(2).splitlines():
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            names = re.findall(r"`([^`]+)`", cells[0])
            if len(names) == 1 and column < len(cells):
                yield names[0], cells[column]


def test_no_page_states_a_default_other_than_the_field_table() -> None:
    lookup = field_lookup()
    wrong, checked = [], 0
    for page in PAGES:
        for field, stated in default_statements(page):
            if field not in lookup:
                continue
            verdict = same_value(stated, lookup[field])
            if verdict is None:
                continue
            checked += 1
            if not verdict:
                wrong.append(f"{rel(page)}: `{field}` default {stated}, the field table says {lookup[field]!r}")
    assert not wrong
    assert checked >= 3, "the statement finder finds the docs' statements of defaults"


def test_the_default_finder_reads_the_phrasings_the_docs_use(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("Set `leaseDuration` (default `20s`) and `bindWorkers`, default 64.\n\n"
                    "| field | default |\n|---|---|\n| `audit.ringSize` | `500` |\n\nWithin `retryPeriod` (3 s).\n")
    stated = dict(default_statements(page))
    lookup = field_lookup()
    assert stated == {"leaseDuration": "`20s`", "bindWorkers": "64", "audit.ringSize": "`500`", "retryPeriod": "3 s"}
    assert same_value(stated["retryPeriod"], lookup["retryPeriod"]) is False
    assert same_value(stated["leaseDuration"], lookup["leaseDuration"]) is False
    assert same_value(stated["bindWorkers"], lookup["bindWorkers"]) is True
    assert same_value(stated["audit.ringSize"], lookup["audit.ringSize"]) is False
    assert same_value("5m", lookup["cacheCompareInterval"]) is True
    assert same_value("100Mi", lookup["audit.file.maxBytes"]) is True
    page.write_text("`maxResponseBytes` (default 64 MiB, after decompression); "
                    "`cacheCompareInterval` defaults to 5 min.")
    stated = dict(default_statements(page))
    assert stated == {"maxResponseBytes": "64 MiB", "cacheCompareInterval": "5 min"}
    assert same_value(stated["maxResponseBytes"], lookup["maxResponseBytes"]) is True
    assert same_value(stated["cacheCompareInterval"], lookup["cacheCompareInterval"]) is True


def test_the_default_plugins_listed_are_the_loaders() -> None:
    text = " ".join(CONFIGURATION.read_text().split())
    listed = re.search(r"Default plugins \([^)]*\): (.+?)\. The constraint plugins", text)
    assert listed, "docs/configuration.md lists the default plugins"
    stated: dict[str, list[tuple[str, int | None]]] = {}
    for part in listed.group(1).split("; "):
        point, _, names = part.partition(" ")
        weighted = re.findall(r"`(\w+)`(?:\N{MULTIPLICATION SIGN}(\d+))?", names)
        stated[point] = [(n, int(w) if w else None) for n, w in weighted]
    wanted = {point: [(r.name, r.weight if point == "score" else None) for r in refs]
              for point, refs in DEFAULT_PLUGINS.items() if refs}
    assert stated == wanted


def yaml_scalar(text: str) -> object:
    text = text.strip()
    words: dict[str, object] = {"null": None, "true": True, "false": False}
    if text in words:
        return words[text]
    try:
        return float(text)
    except ValueError:
        return text


def test_the_plugin_args_listed_have_the_plugins_defaults() -> None:
    text = CONFIGURATION.read_text()
    section = text.split("Plugin args (defaults):", 1)[1].split("\n\n", 2)[1]
    plugins = plugin_defaults()
    wrong, checked = [], 0
    for line in re.findall(r"^- (.+(?:\n  .+)*)", section, re.M):
        named = re.match(r"`(\w+)`(?:, `(\w+)`)*", line)
        assert named, line
        for plugin in re.findall(r"`(\w+)`", line[:named.end()]):
            for span in re.findall(r"`([^`]*:[^`]*)`", line[named.end():]):
                # Top-level `key: value` pairs only: the text outside braces and brackets.
                flat = re.sub(r"\{[^{}]*\}|\[[^\[\]]*\]", "", re.sub(r"\{[^{}]*\}", "", span))
                for key, value in re.findall(r"(\w+): ([^,]+)", flat):
                    if key not in plugins.get(plugin, {}) or not value.strip():
                        continue
                    checked += 1
                    default = plugins[plugin][key]
                    stated = yaml_scalar(value)
                    if stated != default and not (isinstance(stated, float) and stated == default):
                        wrong.append(f"{plugin}.{key}: docs {value.strip()}, plugin {default!r}")
    assert not wrong
    assert checked >= 10
