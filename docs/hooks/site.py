"""MkDocs hooks for the sstq-fl site (``hooks:`` in mkdocs.yml); nothing here is part of the package.

* Maths: ``pymdownx.arithmatex`` (generic mode) marks every formula; this hook renders each one to
  MathML at build time (latex2mathml), so the pages need no JavaScript, CDN or font download and
  browsers show them natively.
* Benchmark figures: a page may show a committed plot by its repository path
  (``benchmarks/results/....png``, written relative to the page); the hook adds exactly the figures
  the pages name to the site, so they are not copied into ``docs/``.
* API pages: the package's docstrings use reST roles (``:mod:`x```); they are shown as code.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from latex2mathml.converter import convert
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"benchmarks/results/[A-Za-z0-9_./=+-]+?\.png")
MATH = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc|obj):(<code>)~?")


def on_files(files: Files, config) -> Files:
    """Add every committed figure that a page names to the site, under its repository path."""
    docs = Path(config["docs_dir"])
    wanted = {m.group(0) for page in docs.rglob("*.md") for m in FIGURE.finditer(page.read_text(encoding="utf-8"))}
    for rel in sorted(wanted):
        if (ROOT / rel).is_file() and files.get_file_from_path(rel) is None:
            files.append(File(rel, src_dir=str(ROOT), dest_dir=config["site_dir"], use_directory_urls=False))
    return files


def _mathml(match: re.Match) -> str:
    tag, body = match.group(1), html.unescape(match.group(2)).strip()
    block = tag == "div"
    for left, right in ((r"\[", r"\]"), (r"\(", r"\)"), ("$$", "$$"), ("$", "$")):
        if body.startswith(left) and body.endswith(right):
            body = body[len(left):len(body) - len(right)]
            break
    mathml = convert(body.strip(), display="block" if block else "inline")
    return f'<{tag} class="arithmatex">{mathml}</{tag}>'


def on_page_content(content: str, page, config, files) -> str:
    """Formulas to MathML; reST roles in docstrings to plain code."""
    return ROLE.sub(r"\1", MATH.sub(_mathml, content))
