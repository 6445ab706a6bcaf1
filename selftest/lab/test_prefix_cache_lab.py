"""The prefix-cache effect on the lab's real vLLM, which is why the load sends distinct prompts:
a prompt the engine has seen is answered sooner than a new one of the same length, and the
engine's own counters say it served the repeat from its cache.

vLLM V1 caches prefixes by default (vllm/engine/arg_utils.py: enable_prefix_caching falls to
the model's default, on for generative models; only RISC-V CPUs turn it off), in full KV
blocks; the CPU backend's block is 128 tokens unless set (vllm/platforms/cpu.py). A prompt
shorter than a block can never hit, so these prompts are six blocks long. Counters:
`vllm:prefix_cache_queries` and `vllm:prefix_cache_hits`, in tokens (vllm/v1/metrics/
loggers.py), exposed with prometheus_client's `_total` suffix.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator

import pytest

from infergate.inference.client import StreamRecord, get_json, stream_completion
from infergate.inference.engine_metrics import parse_prometheus_text
from infergate.inference.plan import CHAT_PATH
from infergate.inference.workload import build_prompts, chat_bodies
from infergate.plan.loader import load_plan
from infergate_lab import Lab
from infergate_lab.engine import serving_alone
from selftest.suite import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

SERVED = "smollm2-135m"  # inventories/lab.yaml's model.served_name
PORT = 18434
CONTAINER = "prefix-cache-lab"
BLOCK = 128  # tokens per KV block on vLLM's CPU backend
INPUT_TOKENS = 6 * BLOCK  # with the chat template, six full blocks to hit; max-model-len 1024
PAIRS = 15  # one new and one repeated request each, alternating: drift hits both alike
# The repeat skips the prefill of 768 of its ~800 tokens, which is most of a new prompt's TTFT
# on this CPU engine: measured with AVX-512 kernels, medians of 15, new 559 ms, repeated 46 ms
# (0.08x). A repeat slower than half a new prompt means the cache did not serve it.
MARGIN = 0.5
QUERIES, HITS = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"


@pytest.fixture(scope="module")
def server(engine: object, lab: Lab) -> Iterator[str]:
    """SmolLM2 served alone on node1 with vLLM's defaults, which the lab plan keeps."""
    with serving_alone(lab, "node1", SERVED, PORT, CONTAINER) as base:
        yield base


def cache_counters(base: str) -> tuple[float, float]:
    """(queried, hit) prompt tokens so far, summed over the engine's label sets."""
    status, text = get_json(base, "/metrics", 10)
    assert status == 200, f"{base}/metrics answered {status}: {text}"
    sums = {QUERIES: 0.0, HITS: 0.0}
    for sample in parse_prometheus_text(str(text)):  # not JSON: get_json hands the text
        if sample.name in sums:
            sums[sample.name] += sample.value
    return sums[QUERIES], sums[HITS]


def timed(base: str, body: dict[str, object]) -> tuple[StreamRecord, float, float]:
    """The request, and the prefix-cache tokens it queried and hit."""
    queried, hit = cache_counters(base)
    record = stream_completion(f"{base}/v1", CHAT_PATH, body, 120)
    assert record.ok, record.error
    queried_after, hit_after = cache_counters(base)
    return record, queried_after - queried, hit_after - hit


def test_lab_plan_keeps_prefix_caching_on():
    flags = load_plan(ROOT / "inventories" / "lab.yaml").engine.flags
    assert "--no-enable-prefix-caching" not in flags


def test_repeated_prompt_is_served_from_the_prefix_cache_sooner(server: str):
    prompts = build_prompts(server, SERVED, PAIRS + 1, INPUT_TOKENS, 2, 0.0, seed=14)
    repeated, *new = chat_bodies(prompts, SERVED)
    _, queried, _ = timed(server, repeated)  # fills the cache
    assert queried >= INPUT_TOKENS, f"the engine counted {queried} prefix-cache query tokens"
    fresh_ttft, again_ttft, fresh_hits, again_hits = [], [], [], []
    for body in new:
        record, _, hit = timed(server, body)
        fresh_ttft.append(record.ttft_s or 0.0)
        fresh_hits.append(hit)
        record, _, hit = timed(server, repeated)
        again_ttft.append(record.ttft_s or 0.0)
        again_hits.append(hit)
    fresh, again = statistics.median(fresh_ttft), statistics.median(again_ttft)
    seen = (f"median TTFT new {fresh * 1000:.1f} ms, repeated {again * 1000:.1f} ms; "
            f"hit tokens new {fresh_hits}, repeated {again_hits}")  # fmt: skip
    print(seen)
    assert fresh_hits == [0.0] * PAIRS, seen  # the template's shared prefix is under a block
    assert min(again_hits) >= INPUT_TOKENS, seen  # all six blocks, every time
    assert again < MARGIN * fresh, seen
