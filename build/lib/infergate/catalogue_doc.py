"""docs/problems.md, generated from the catalogue and the suite's own checks: each code with
its meaning (the check's docstring, its requirement in words), its check and its remedy; and
the README's table of the commands a node needs, from infergate/checks/tools.py."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

from infergate.catalogue import CHECKS, ENDPOINT_ROOT, NODE_ROOTS, ROOT_FORMS, root_check
from infergate.checks.tools import TOOLS
from infergate.suites import PACKAGES


def suite_checks() -> dict[str, str]:
    """Every check of the suite (a test function's name) and its module's file name."""
    found = {}
    for phase in PACKAGES:
        package = importlib.import_module(phase)
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("test_"):
                continue
            module = importlib.import_module(f"{phase}.{info.name}")
            for name, function in inspect.getmembers(module, inspect.isfunction):
                if name.startswith("test_") and function.__module__ == module.__name__:
                    found[name] = f"{phase.rpartition('.')[2]}/{info.name}.py"
    return found


def requirement(check: str) -> str:
    """CHECK's requirement in words: the first sentence of its docstring."""
    for phase in PACKAGES:
        for info in pkgutil.iter_modules(importlib.import_module(phase).__path__):
            module = importlib.import_module(f"{phase}.{info.name}")
            function = getattr(module, check, None)
            if function is not None:
                text = " ".join((inspect.getdoc(function) or "").split())
                return re.split(r"(?<=[.;:])\s", text, maxsplit=1)[0].rstrip(".;:")
    return check


def problems_markdown() -> str:
    files = suite_checks()
    lines = [
        "# Problems",
        "",
        "Every problem the suite reports, by its stable code. Generated from",
        "`infergate/catalogue.py` by `python scripts/problem_docs.py`; do not edit.",
        "A `warn` is reported but does not fail the run: the cluster still serves.",
        "",
        "## Roots",
        "",
        "A node's checks depend on these, in this order; where one fails, its check fails once",
        "for the node and every check that needs it is skipped, naming it.",
        "",
        "| root | reported by | code |",
        "| --- | --- | --- |",
    ]
    for root in (*NODE_ROOTS, "endpoint"):
        check = root_check(root)
        code = "IG-HOST-FACTS-UNREADABLE" if root == "facts" else CHECKS[check].code
        lines.append(f"| {root} | `{check}` | {code} |")
    lines += ["", "## Codes", "", "| code | severity | check | meaning | remedy |"]
    lines.append("| --- | --- | --- | --- | --- |")
    for check, e in sorted(CHECKS.items(), key=lambda kv: kv[1].code):
        where = f"`{files.get(check, '?')}::{check}`"
        lines.append(f"| {e.code} | {e.severity} | {where} | {requirement(check)} | {e.remedy} |")
    for code, (group, remedy) in sorted(ROOT_FORMS.items()):
        root = ENDPOINT_ROOT if group == "inference" else "ssh"
        check = f"`{files.get(root_check(root), '?')}::{root_check(root)}`"
        form = f"a form of the {root if root == ENDPOINT_ROOT else group} root"
        lines.append(f"| {code} | fail | {check} | {form} | {remedy} |")
    return "\n".join(lines) + "\n"


TOOLS_BEGIN = "<!-- tools: from infergate/checks/tools.py by scripts/problem_docs.py -->"
TOOLS_END = "<!-- end of tools -->"


def tools_markdown() -> str:
    """The README's table of the commands a node needs, and their packages."""
    lines = ["| command | Debian, Ubuntu | RHEL | for |", "| --- | --- | --- | --- |"]
    for t in TOOLS:
        gpu = " (GPU nodes only)" if t.gpu_only else ""
        lines.append(f"| `{t.name}` | {t.debian} | {t.rhel} | {t.used_for}{gpu} |")
    return "\n".join(lines)


def readme_with_tools(readme: str) -> str:
    """README with its tools table regenerated between the two markers."""
    head, begin, rest = readme.partition(TOOLS_BEGIN)
    _, end, tail = rest.partition(TOOLS_END)
    if not begin or not end:
        raise ValueError(f"the README lacks {TOOLS_BEGIN} ... {TOOLS_END}")
    return f"{head}{TOOLS_BEGIN}\n{tools_markdown()}\n{TOOLS_END}{tail}"
