"""Every relative link in README.md and docs/*.md reaches a file that exists and, with an
#anchor, a heading of that file, as GitHub names headings."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = html.unescape(heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of PAGE's headings; a repeated one gets -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(page: Path) -> list[str]:
    """The relative links of PAGE, outside code."""
    text = CODE.sub("", FENCE.sub("", page.read_text(encoding="utf-8")))
    return [u for u in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", u)]


def broken(page: Path) -> list[str]:
    wrong = []
    for url in links(page):
        path, _, anchor = url.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            wrong.append(f"{url}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            wrong.append(f"{url}: no such heading")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_slugs_follow_github() -> None:
    assert slug("preflight.json") == "preflightjson"
    assert slug("Leftovers and `infergate down`") == "leftovers-and-infergate-down"
    assert slug("vllm-&lt;level&gt;.json and requests.jsonl") == "vllm-leveljson-and-requestsjsonl"


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](#title) [b](#gone) [c](nowhere.md) `[d](x.md)`\n")
    assert broken(page) == ["#gone: no such heading", "nowhere.md: no such file"]
