"""The catalogue (infergate/catalogue.py) covers the suite: every check has one stable code,
no code is used twice, each root has one check, and docs/problems.md is what it generates."""

from __future__ import annotations

import re
from pathlib import Path

from infergate.catalogue import CHECKS, NODE_ROOTS, ROOT_FORMS, TIERS, root_check
from infergate.catalogue_doc import problems_markdown, suite_checks

DOCS = Path(__file__).resolve().parents[2] / "docs" / "problems.md"


def test_every_check_of_the_suite_has_an_entry_and_every_entry_a_check():
    checks = set(suite_checks())
    assert checks - set(CHECKS) == set(), "checks without a code"
    assert set(CHECKS) - checks == set(), "codes of checks that do not exist"


def test_codes_are_unique_and_well_formed():
    codes = [e.code for e in CHECKS.values()] + list(ROOT_FORMS)
    assert len(codes) == len(set(codes)), [c for c in codes if codes.count(c) > 1]
    assert [c for c in codes if not re.fullmatch(r"IG(-[A-Z0-9]+)+", c)] == []


def test_each_root_has_one_check_and_entries_hold_known_values():
    for root in (*NODE_ROOTS, "endpoint"):
        reporters = [n for n, e in CHECKS.items() if e.root == ("ssh" if root == "facts" else root)]
        assert len(reporters) == 1, (root, reporters)
        assert root_check(root) == reporters[0]
    for name, e in CHECKS.items():
        assert e.severity in ("fail", "warn"), name
        assert e.tier in TIERS, name
        assert e.needs in ("", *NODE_ROOTS, "endpoint"), name
        assert e.remedy, name
        assert e.group, name


def test_problems_doc_is_current():
    assert DOCS.read_text() == problems_markdown(), "run: python scripts/problem_docs.py"
