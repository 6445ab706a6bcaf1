"""The annotated example plan the wheel ships (infergate/data/plan-example.yaml), which
`infergate plan init` writes: two DGX Spark-like GPU nodes serving a 119 GB FP8 MoE with vLLM,
tensor parallel 2, SGLang in its comments. Each value an operator must give reads `TODO: what
goes here`, which the parser refuses naming the key (infergate.plan.values.unfilled).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

EXAMPLE = files("infergate").joinpath("data/plan-example.yaml")


def write_example(out: Path, force: bool = False) -> None:
    """Write the example plan to OUT; raise FileExistsError where OUT exists, unless FORCE."""
    with out.open("w" if force else "x", encoding="utf-8") as f:
        f.write(EXAMPLE.read_text(encoding="utf-8"))
