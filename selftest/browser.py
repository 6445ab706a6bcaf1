"""A report page as a person sees it: rendered by a real headless Chromium (Debian's
`chromium`, installed on first use like the lab's packages), which says whether every image
decoded and how many data cells each table has, and takes a screenshot.

The page itself carries no script (the reports are static). A copy beside it gets one that,
once the page has loaded, writes what it found into the DOM, which `--dump-dom` prints.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from infergate_lab.shell import ensure_packages, which

_PROBE = """<script>
addEventListener("load", () => {
  const images = [...document.images].map(i => [i.alt, i.complete && i.naturalWidth > 0]);
  const all = [...document.querySelectorAll("table")];
  const tables = all.map(t => t.querySelectorAll("td").length);
  const widths = all.map(t => Math.ceil(t.getBoundingClientRect().width));
  const page = [document.documentElement.scrollWidth, window.innerWidth];
  const out = document.createElement("pre");
  out.id = "infergate-page-check";
  out.textContent = JSON.stringify({images, tables, widths, page, title: document.title});
  document.body.appendChild(out);
});
</script>"""
_FOUND = re.compile(r'<pre id="infergate-page-check">(.*?)</pre>', re.S)
_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]


@dataclass(frozen=True)
class PageCheck:
    title: str
    images: tuple[tuple[str, bool], ...]  # each image's alt text, and whether it decoded
    tables: tuple[int, ...]  # each table's data cells
    screenshot: Path
    table_widths: tuple[int, ...] = ()  # each table's width in CSS px
    scroll_width: int = 0  # the document's, against the window's inner width
    window_width: int = 0

    @property
    def broken_images(self) -> list[str]:
        return [alt for alt, loaded in self.images if not loaded]

    @property
    def empty_tables(self) -> list[int]:
        return [i for i, cells in enumerate(self.tables) if not cells]


def chromium() -> str:
    ensure_packages({"chromium": "chromium"})
    found = which("chromium")
    assert found, "chromium is not on PATH after installing Debian's chromium"
    return found


def check_page(page: Path, screenshot: Path, width: int = 1280) -> PageCheck:
    """Render `page` in headless Chromium: what its images and tables came to, and a
    full-width screenshot of its first screen at `screenshot`."""
    probed = page.with_name(f".probed-{page.name}")
    probed.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    browser = chromium()
    try:
        dom = _run(
            [
                browser,
                *_FLAGS,
                f"--window-size={width},900",
                "--virtual-time-budget=5000",
                "--dump-dom",
                probed.as_uri(),
            ]
        )
    finally:
        probed.unlink()
    _run(
        [
            browser,
            *_FLAGS,
            f"--window-size={width},2400",
            f"--screenshot={screenshot}",
            page.as_uri(),
        ]
    )
    found = _FOUND.search(dom)
    assert found, f"the page's probe did not run; chromium printed: {dom[-500:]!r}"
    data = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    return PageCheck(
        title=data["title"],
        images=tuple((alt, bool(ok)) for alt, ok in data["images"]),
        tables=tuple(data["tables"]),
        screenshot=screenshot,
        table_widths=tuple(data["widths"]),
        scroll_width=data["page"][0],
        window_width=data["page"][1],
    )


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{argv[0]} exited {done.returncode}: {done.stderr[-800:]}"
    return done.stdout
