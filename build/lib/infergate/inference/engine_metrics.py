"""The engine's own view of the load: its Prometheus `/metrics`, scraped about once a second
while the sweep runs, as EngineSample tuples for the report's pictures.

Counts are summed over label sets (one per engine or DP rank); the KV-cache usage, a
fraction of each engine's own cache, is their mean (docs/deploy-and-inference.md#engine-metrics).
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

from infergate.inference.client import get_json
from infergate.inference.samples import EngineSample

# figure -> the names that carry it, the first one present wins: vLLM's
# vllm/v1/metrics/loggers.py, SGLang's python/sglang/srt/metrics/collector.py
NAMES: Mapping[str, tuple[str, ...]] = {
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "sglang:token_usage",
    ),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "preemptions": ("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"),
}
_AVERAGED = {"kv_cache_usage"}

_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\])*"'
_SAMPLE = re.compile(
    rf"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    rf"(?:\{{\s*(?P<labels>(?:{_LABEL}\s*,?\s*)*)\}})?"
    r"\s+(?P<value>\S+)(?:\s+-?\d+)?"
)
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\.|[^"\\])*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]  # values as written, escapes (\" \\ \n) kept
    value: float


def parse_prometheus_text(text: str) -> list[Sample]:
    """Every sample of a `GET /metrics` body in the text format; ValueError names the first
    line that is none.

    Sample: ``vllm:num_requests_running{engine="0",model_name="smollm2-135m"} 3.0``
    """
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        found = _SAMPLE.fullmatch(stripped)
        if not found:
            raise ValueError(f"line {number} is not a Prometheus sample: {stripped[:200]!r}")
        labels = dict(_LABEL_PAIR.findall(found.group("labels") or ""))
        samples.append(Sample(found.group("name"), labels, _number(found.group("value"), number)))
    return samples


def _number(value: str, line: int) -> float:
    try:
        return float(value)  # also NaN, +Inf, -Inf, as the format writes them
    except ValueError:
        raise ValueError(f"line {line}: {value!r} is not a number") from None


def engine_figures(samples: Iterable[Sample]) -> dict[str, float]:
    """KV-cache usage, running, waiting and preemptions (total) from vLLM's or SGLang's
    names; a figure the engine does not report is left out."""
    by_name: dict[str, list[float]] = {}
    for s in samples:
        by_name.setdefault(s.name, []).append(s.value)
    figures = {}
    for figure, names in NAMES.items():
        values = next((by_name[n] for n in names if n in by_name), None)
        if values:
            figures[figure] = statistics.fmean(values) if figure in _AVERAGED else sum(values)
    return figures


class Scraper:
    """GET {base}/metrics about every `interval_s` in a thread, from `with` to its end,
    recording an EngineSample per answer once the sweep names its first level (`level`);
    the warm-up before it is not recorded. Never raises: the last failure is `problem`."""

    def __init__(
        self,
        base: str,
        api_key: str | None = None,
        ca_bundle: str | None = None,
        interval_s: float = 1.0,
    ) -> None:
        self.base, self._key, self._ca = base, api_key, ca_bundle  # base: http://HOST:PORT
        self.interval_s = interval_s
        self.problem = ""  # the last scrape's failure, "" when it answered
        self._samples: list[EngineSample] = []
        self._level = ""
        self._start = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="infergate-scrape", daemon=True)

    def level(self, label: str) -> None:
        """The sweep says which level runs from now on (LevelSamples.label)."""
        with self._lock:
            if not self._level:
                self._start = time.perf_counter()
            self._level = label

    @property
    def samples(self) -> tuple[EngineSample, ...]:
        with self._lock:
            return tuple(self._samples)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.scrape_once()
            if self._stop.wait(self.interval_s):
                return

    def scrape_once(self) -> None:
        """One GET; a sample appended when a level runs and the body carried a figure."""
        timeout_s = min(5.0, 5 * self.interval_s)
        status, body = get_json(self.base, "/metrics", timeout_s, self._key, self._ca)
        now = time.perf_counter()
        try:
            figures = _figures_of(status, body, self.base)
        except ValueError as e:
            self.problem = str(e)
            return
        self.problem = ""
        with self._lock:
            if self._level:
                self._samples.append(EngineSample(now - self._start, self._level, figures))


def _figures_of(status: int, body: object, base: str) -> dict[str, float]:
    url = f"{base}/metrics"
    if status != 200 or not isinstance(body, str):
        raise ValueError(f"GET {url}: HTTP {status or 'no answer'}: {str(body)[:200]}")
    figures = engine_figures(parse_prometheus_text(body))
    if not figures:
        raise ValueError(f"GET {url} answered none of vLLM's or SGLang's load figures")
    return figures
