"""Every file the reports are written as, each named once with the format module that renders
it: the registry the writers read. A preflight is preflight.json and preflight.html; an
inference run is results.json, results.csv and report.html, and each level, as it ends,
vllm-<level>.json and its lines of requests.jsonl.

Every file is for this user alone (0700, 0600), and the per-level files carry no secret."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from infergate.inference.client import StreamRecord
from infergate.inference.metrics import LevelSummary
from infergate.plan.apikey import redact_data
from infergate.plan.secrets import private_dir, write_private
from infergate.reports import (
    inference_csv,
    inference_html,
    inference_json,
    preflight_html,
    preflight_json,
)
from infergate.reports.inference import Results
from infergate.reports.preflight import Preflight
from infergate.reports.requests_jsonl import request_lines
from infergate.reports.vllm_json import vllm_result

Report = TypeVar("Report")


@dataclass(frozen=True)
class Format(Generic[Report]):
    name: str  # the file, in the report's folder
    render: Callable[[Report], str]


PREFLIGHT = (
    Format("preflight.json", preflight_json.render_json),
    Format("preflight.html", preflight_html.render_html),
)
RESULTS = (
    Format("results.json", inference_json.render_json),
    Format("results.csv", inference_csv.render_csv),
    Format("report.html", inference_html.render_html),
)


def write(out_dir: Path, report: Report, formats: Sequence[Format[Report]]) -> dict[str, Path]:
    """REPORT in each of FORMATS into OUT_DIR, in their order; each file's path by its name."""
    private_dir(out_dir)
    paths = {f.name: out_dir / f.name for f in formats}
    for f in formats:
        write_private(paths[f.name], f.render(report))
    return paths


def write_preflight(out_dir: Path, report: Preflight) -> tuple[Path, Path]:
    """preflight.json and preflight.html into OUT_DIR; their paths."""
    paths = write(out_dir, report, PREFLIGHT)
    return paths["preflight.json"], paths["preflight.html"]


def write_report(out_dir: Path, results: Results) -> tuple[Path, Path]:
    """results.json, results.csv and report.html into OUT_DIR; the JSON's and the page's paths."""
    paths = write(out_dir, results, RESULTS)
    return paths["results.json"], paths["report.html"]


class LevelWriter:
    """Writes each level as it ends: `vllm-<level>.json`, and its requests appended to
    requests.jsonl (emptied when the writer is made, at the start of the sweep); every text
    with the secrets taken out."""

    def __init__(self, out_dir: Path, model: str, date: str, secrets: Sequence[str] = ()) -> None:
        self.out_dir, self.model, self.date = out_dir, model, date
        self.secrets = tuple(secrets)
        write_private(out_dir / "requests.jsonl", "")

    def write(self, summary: LevelSummary, records: Sequence[StreamRecord]) -> Path:
        result = vllm_result(summary, records, model=self.model, date=self.date)
        path = self.out_dir / f"vllm-{level_slug(summary)}.json"
        write_private(path, json.dumps(redact_data(result, self.secrets)) + "\n")
        lines = [redact_data(line, self.secrets) for line in request_lines(summary, records)]
        text = "".join(json.dumps(line) + "\n" for line in lines)
        write_private(self.out_dir / "requests.jsonl", text, append=True)
        return path


def level_slug(summary: LevelSummary) -> str:
    """A level's name in a file name: c16, or 2.5rps."""
    if summary.request_rate is not None:
        return f"{summary.request_rate:g}rps"
    return f"c{summary.concurrency}"
