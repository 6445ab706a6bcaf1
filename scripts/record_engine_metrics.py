"""Record the lab vLLM's Prometheus `/metrics` under load, as test data for
infergate.inference.engine_metrics (selftest/unit/test_engine_metrics.py), and show the Scraper
working against the real engine.

    flock /tmp/infergate-lab.lock python scripts/record_engine_metrics.py   # the lab up

SmolLM2 served alone on node1 (`serving_alone`, as selftest/lab/test_inference_lab.py serves
it); 16 streamed chat requests of 64 tokens at concurrency 8 while a Scraper reads
`/metrics` every 0.5 s; one body, read once the engine counts running requests, is written to
`selftest/data/lab/vllm-metrics.txt`. Prints what the Scraper recorded.
"""

from __future__ import annotations

import threading
from pathlib import Path

from infergate.inference.client import get_json
from infergate.inference.engine_metrics import Scraper, engine_figures, parse_prometheus_text
from infergate.inference.load import run_load
from infergate.inference.plan import CHAT_PATH, chat_body
from infergate_lab import Lab
from infergate_lab.engine import ensure_engine, serving_alone

OUT = Path(__file__).resolve().parents[1] / "selftest" / "data" / "lab" / "vllm-metrics.txt"
SERVED, PORT = "smollm2-135m", 18434


def main() -> None:
    lab = Lab(say=print)
    ensure_engine(lab, say=print)
    with serving_alone(lab, "node1", SERVED, PORT, "infergate-record-metrics") as base:
        body = chat_body(SERVED, "Count from one to one hundred.", 64, ignore_eos=True)
        done = threading.Event()

        def load() -> None:
            run_load(f"{base}/v1", CHAT_PATH, [body] * 16, 8, 120.0)
            done.set()

        with Scraper(base, interval_s=0.5) as scraper:
            scraper.level("c=8")
            thread = threading.Thread(target=load)
            thread.start()
            text = body_under_load(base, done)
            thread.join()
        OUT.write_text(str(text))
    print(f"wrote {OUT}")
    for s in scraper.samples:
        print(f"{s.t_s:6.2f} s {s.level}: {dict(s.values)}")
    print(f"problem: {scraper.problem!r}")


def body_under_load(base: str, done: threading.Event) -> str:
    """The first body read once the engine says requests are running (whatever the CPU's
    speed); the last one read when the load ended first."""
    text = ""
    while not done.wait(0.2):
        _, found = get_json(base, "/metrics", 10)
        text = str(found)
        if engine_figures(parse_prometheus_text(text)).get("running", 0) > 0:
            return text
    return text


if __name__ == "__main__":
    main()
