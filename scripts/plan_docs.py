"""Write docs/plan-keys.md, the reference of every plan key, from the plan's parser.

Run it after changing a plan key: python scripts/plan_docs.py (selftest/unit/test_plan_schema.py
fails while the committed file differs from what this writes).
"""

from pathlib import Path

from infergate.plan.schema import plan_keys_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "plan-keys.md"

if __name__ == "__main__":
    DOCS.write_text(plan_keys_markdown(), encoding="utf-8")
    print(f"wrote {DOCS}")
