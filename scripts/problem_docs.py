"""Write docs/problems.md from the catalogue (infergate/catalogue.py), and the README's table
of the commands a node needs from infergate/checks/tools.py.

Run it after changing a check or a code: python scripts/problem_docs.py
(selftest/unit/test_catalogue.py fails while a committed file differs from what this writes).
"""

from pathlib import Path

from infergate.catalogue_doc import problems_markdown, readme_with_tools

ROOT = Path(__file__).resolve().parents[1]
DOCS, README = ROOT / "docs" / "problems.md", ROOT / "README.md"

if __name__ == "__main__":
    DOCS.write_text(problems_markdown(), encoding="utf-8")
    README.write_text(readme_with_tools(README.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {DOCS} and the tools table of {README}")
