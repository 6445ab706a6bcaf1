"""Write docs/problems.md from the catalogue (infergate/catalogue.py).

Run it after changing a check or a code: python scripts/problem_docs.py
(selftest/unit/test_catalogue.py fails while the committed file differs from what this writes).
"""

from pathlib import Path

from infergate.catalogue_doc import problems_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "problems.md"

if __name__ == "__main__":
    DOCS.write_text(problems_markdown(), encoding="utf-8")
    print(f"wrote {DOCS}")
