"""A deny-list of versions known to break multi-GPU inference, judged over the versions the
in-image probe already reads (its `versions` section). The list is a data file,
infergate/data/known_bad.yaml, each entry with the public source that shows the failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import yaml

from infergate.problems import Problem

DATA = files("infergate").joinpath("data/known_bad.yaml")


@dataclass(frozen=True)
class KnownBad:
    """A deny-list entry: `component` is a key of the in-image probe's versions section,
    `source` a public URL that shows the failure, `use` what to use instead."""

    component: str
    versions: frozenset[str]
    why: str
    source: str
    use: str


def load_known_bad(text: str | None = None) -> tuple[KnownBad, ...]:
    """The deny-list (the packaged file unless TEXT is given); an entry without a source URL
    is an error, so none can be added unsourced."""
    entries = yaml.safe_load(DATA.read_text() if text is None else text) or []
    return tuple(_entry(i, e) for i, e in enumerate(entries))


def _entry(i: int, entry: Mapping[str, Any]) -> KnownBad:
    source = str(entry.get("source", ""))
    if not source.startswith("https://"):
        raise ValueError(f"known_bad.yaml entry {i} ({entry.get('component')}): no source URL")
    return KnownBad(
        component=str(entry["component"]),
        versions=frozenset(str(v) for v in entry["versions"]),
        why=str(entry["why"]),
        source=source,
        use=str(entry["use"]),
    )


def _base(version: str) -> str:
    """A version without its local part: torch's "2.11.0+cu130" is 2.11.0."""
    return version.split("+", 1)[0]


def check_known_bad(
    versions: Mapping[str, Any], deny: tuple[KnownBad, ...] | None = None
) -> list[Problem]:
    """No version the image carries is on the deny-list; versions the probe could not read
    are a problem of their own (the list cannot be judged)."""
    if "error" in versions:
        return [
            Problem(
                found=f"the image's versions are unknown: {str(versions['error'])[:300]}",
                planned="the in-image probe's versions, judged against the known-bad list",
                remedy="run the image's python by hand: `docker run --rm $IMG python3 -c "
                '"import torch; print(torch.__version__, torch.cuda.nccl.version())"`',
            )
        ]
    deny = load_known_bad() if deny is None else deny
    return [
        Problem(
            found=f"{bad.component} {versions[bad.component]} in the image: {bad.why} "
            f"({bad.source})",
            planned=f"no {bad.component} version on the known-bad list",
            remedy=f"rebuild or pick an image with another {bad.component}: {bad.use}",
        )
        for bad in deny
        if isinstance(versions.get(bad.component), str)
        and _base(versions[bad.component]) in bad.versions
    ]
