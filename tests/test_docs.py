"""What the docs claim, held where a program can check it (issue 27, point 9):

* every throughput figure the README quotes is one that bench/RESULTS.md
  measured, found in a part of RESULTS.md about the same thing (the mirror's
  figure among the mirror's numbers, not any number of the same size);
* infra/terraform/README.md's tree lists exactly the modules and
  environments that exist;
* the README's console tools section: which tools take ``--bootstrap``
  (and its default) and which name a cluster, as the parser has them.

Reads files and builds parsers only: no process is started.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re

from broker.tools.__main__ import DEFAULT_BOOTSTRAP, build_parser

ROOT = pathlib.Path(__file__).resolve().parent.parent

UNITS = {"k": 1e3, "M": 1e6}
# what a figure is about; a README figure must be found in RESULTS.md in a
# paragraph or table row that names one of its subjects
SUBJECTS = ("mirror", "produce", "consume", "loader", "rows", "audit", "count", "lag")
# "2.82 M msg/s", "639 k msg/s", "15.2 k" (a table cell), "~270 k rows/s",
# "about 270,000 rows/s"
FIGURE = re.compile(r"(~|about )?(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s?"
                    r"(?:(k|M)\b\**\s?(?:msg/s|rows/s)?|\**\s?(?:msg/s|rows/s))", re.I)
NUMBER = re.compile(r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s?(k|M)?(?!\d)")
SEPARATOR = re.compile(r"\|[-| :]+\|")


def blocks(markdown: str) -> list[str]:
    """The paragraphs, and each table row on its own without the cells of
    columns headed "paper" or "target" (the paper's and the goals' figures
    are not measurements)."""
    out: list[str] = []
    lines = markdown.splitlines()
    paragraph: list[str] = []
    dropped: set[int] = set()
    for i, line in enumerate(lines):
        if line.startswith("|") or not line.strip():
            if paragraph:
                out.append("\n".join(paragraph))
                paragraph = []
        if not line.startswith("|"):
            if line.strip():
                paragraph.append(line)
            continue
        if SEPARATOR.fullmatch(line.strip()):
            continue
        cells = line.strip().strip("|").split("|")
        if i + 1 < len(lines) and SEPARATOR.fullmatch(lines[i + 1].strip()):     # a header
            dropped = {j for j, cell in enumerate(cells) if re.search("paper|target", cell, re.I)}
            continue
        out.append("|".join(c for j, c in enumerate(cells) if j not in dropped))
    if paragraph:
        out.append("\n".join(paragraph))
    return out


def subjects(text: str) -> set[str]:
    return {s for s in SUBJECTS if s in text.lower()}


def agrees(figure: re.Match, measured: float) -> bool:
    """``measured`` rounds to the figure as written ("2.82 M": to 10 k);
    "~" or "about" allows 5 %."""
    digits, unit = figure.group(2), UNITS.get(figure.group(3) or "", 1)
    value = float(digits.replace(",", ""))
    if figure.group(1):
        return abs(measured - value * unit) <= 0.05 * value * unit
    return round(measured / unit, len(digits.partition(".")[2])) == value


def readme_figures() -> list[tuple[re.Match, set[str]]]:
    return [(m, subjects(block)) for block in blocks((ROOT / "README.md").read_text())
            for m in FIGURE.finditer(block)]


def measured_numbers() -> list[tuple[float, set[str]]]:
    return [(float(m.group(1).replace(",", "")) * UNITS.get(m.group(2) or "", 1),
             subjects(block))
            for block in blocks((ROOT / "bench" / "RESULTS.md").read_text())
            for m in NUMBER.finditer(block)]


def test_every_throughput_figure_in_the_readme_was_measured():
    measured = measured_numbers()
    figures = readme_figures()
    assert len(figures) >= 10, [m.group(0) for m, _ in figures]     # the pattern still reads
    unfounded = [(m.group(0), sorted(about)) for m, about in figures
                 if not any(agrees(m, n) and (not about or about & where)
                            for n, where in measured)]
    assert unfounded == [], "README figures not in bench/RESULTS.md"


def test_a_figure_must_agree_with_a_measurement_about_the_same_thing():
    # the README's stale mirror figure before issue 27 ("about 0.4 M msg/s"
    # beside "make bench-mirror") agrees with no mirror measurement
    [(stale, about)] = [(m, subjects(b)) for b in blocks(
        "`make bench-mirror` measures it: about 0.4 M msg/s.") for m in FIGURE.finditer(b)]
    assert about == {"mirror"}
    assert not any(agrees(stale, n) and about & where for n, where in measured_numbers())
    assert agrees(FIGURE.search("1.40 M msg/s"), 1_401_892)
    assert not agrees(FIGURE.search("1.40 M msg/s"), 1_332_288)
    assert agrees(FIGURE.search("~270 k rows/s"), 272_641)


def test_the_terraform_readme_lists_the_modules_and_environments():
    terraform = ROOT / "infra" / "terraform"
    text = (terraform / "README.md").read_text()
    start = text.index("```\ninfra/terraform/") + 3
    tree = text[start:text.index("```", start)]
    listed = {section: set(re.findall(r"^    ([a-z0-9-]+)/", part, re.M))
              for section, part in zip(("modules", "environments"),
                                       tree.split("  environments/\n"))}
    for section, names in listed.items():
        assert names == {p.name for p in (terraform / section).iterdir() if p.is_dir()}, section


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_the_readme_says_which_console_tools_take_bootstrap():
    tools = _subcommands()
    options = {name: {o for a in p._actions for o in a.option_strings}
               for name, p in tools.items()}
    bootstrapped = {name for name, opts in options.items() if "--bootstrap" in opts}
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Console tools"):]
    section = section[:section.index("\n## ", 3)]
    [paragraph] = [b for b in blocks(section) if "talk to one broker" in b]
    claimed = set(re.findall(r"`([a-z]+)`", paragraph[:paragraph.index("talk to one broker")]))
    assert claimed == bootstrapped
    assert "`127.0.0.1:9092`" in paragraph and "`$SAMSA_BOOTSTRAP`" in paragraph
    assert DEFAULT_BOOTSTRAP == os.environ.get("SAMSA_BOOTSTRAP", "127.0.0.1:9092")
    for name in bootstrapped:
        [action] = [a for a in tools[name]._actions if "--bootstrap" in a.option_strings]
        assert action.default == DEFAULT_BOOTSTRAP and "SAMSA_BOOTSTRAP" in action.help, name
    # the others name a cluster, as the README says
    assert set(tools) - bootstrapped == {"groups", "reassign", "elect-leaders", "users", "acls",
                                         "zookeeper-acls", "http-users"}
    assert "`http-users` writes neither" in section     # a file, not a cluster
    for name in set(tools) - bootstrapped - {"http-users"}:
        assert {"--cluster", "--zookeeper"} <= options[name], name
    for name in tools:                       # every tool the section shows, and only those
        assert f"$T {name}" in section, name
