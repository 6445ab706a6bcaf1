"""What the load sends: distinct prompts of planned lengths, built with the served model's own
tokenizer, or read from a dataset file; and the levels a sweep runs (closed loop at a
concurrency, or open loop at a request rate).

The prompts follow `vllm bench serve --dataset-name random`, except that no two share a
prefix the engine could cache (docs/deploy-and-inference.md#prompts).
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infergate.inference.client import Body, post_json
from infergate.inference.load import LoadRun, OnDone, run_load, run_open_loop
from infergate.inference.plan import CHAT_PATH, chat_body
from infergate.plan.model import Inference

# Each /tokenize or /detokenize call's own deadline (a busy engine answers in milliseconds)
TOKENIZER_TIMEOUT_S = 30.0
# Re-encode and adjust at most this often, as vLLM's gen_prompt_decode_to_target_len does
MAX_ADJUSTMENTS = 10
# where the plan sets no count (docs/deploy-and-inference.md#requests-per-level)
MIN_REQUESTS = 64
WAVES = 4
MIN_OPEN_LOOP_S = 30.0
SHORTEST_REQUEST_S = 1.0


class WorkloadError(Exception):
    """The prompts cannot be built as planned: the tokenizer endpoint or a dataset file."""

    def __init__(self, found: str, remedy: str) -> None:
        super().__init__(f"{found}; {remedy}")
        self.found, self.remedy = found, remedy


@dataclass(frozen=True)
class Prompt:
    text: str
    input_tokens: int  # as the server's tokenizer counts the text (0: not counted, a dataset's)
    output_tokens: int  # the answer's planned length (max_tokens, with ignore_eos)


@dataclass(frozen=True)
class Level:
    """One level of the sweep: closed loop (`concurrency` requests always in flight, like
    `--max-concurrency N`) or open loop (Poisson arrivals at `rate` per second, like
    `--request-rate R`)."""

    concurrency: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        """How tests, figures and reports name the level: "c=16" or "4 req/s"."""
        return f"c={self.concurrency}" if self.rate is None else f"{self.rate:g} req/s"

    def requests(self, inference: Inference) -> int:
        """Requests the level sends (a duration level: prompts prepared before it repeats)."""
        if inference.requests_per_level is not None:
            return inference.requests_per_level
        if self.rate is None:
            streams = self.concurrency or 1
            # a duration level: a prompt per stream per second, as few repeats as can be
            timed = math.ceil((inference.duration_s or 0) * streams / SHORTEST_REQUEST_S)
            return max(MIN_REQUESTS, WAVES * streams, timed)
        seconds = inference.duration_s or MIN_OPEN_LOOP_S
        # Poisson: its count rarely exceeds mean + 3 sigma
        expected = self.rate * seconds
        return max(MIN_REQUESTS, math.ceil(expected + 3 * math.sqrt(expected)))


def levels(inference: Inference) -> tuple[Level, ...]:
    """The closed-loop levels, then the open-loop ones, in the plan's order."""
    closed = tuple(Level(concurrency=c) for c in inference.concurrency)
    return closed + tuple(Level(rate=r) for r in inference.request_rates)


def planned_lengths(count: int, mean: int, spread: float, rng: random.Random) -> list[int]:
    """Uniform integers in [floor((1 - spread) mean), ceil((1 + spread) mean)], at least 1,
    as vLLM's RandomDataset draws input and output lengths with --random-range-ratio."""
    low = max(1, math.floor(round(mean * (1 - spread), 6)))  # 100 x 1.1 is 110.00000000000001
    high = max(low, math.ceil(round(mean * (1 + spread), 6)))
    return [rng.randint(low, high) for _ in range(count)]


@dataclass(frozen=True)
class ServerTokenizer:
    """The served model's tokenizer through the server's /tokenize and /detokenize."""

    root: str  # http://head:8000, without /v1
    model: str
    api_key: str | None = None
    ca_bundle: str | None = None

    def encode(self, text: str) -> list[int]:
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        reply = self._post("/tokenize", body)
        tokens = reply.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise self.error("/tokenize", 200, f"no `tokens` list in {str(reply)[:200]}")
        return tokens

    def decode(self, tokens: Sequence[int]) -> str:
        reply = self._post("/detokenize", {"model": self.model, "tokens": list(tokens)})
        text = reply.get("prompt", reply.get("text"))  # vLLM: prompt; SGLang: text
        if not isinstance(text, str):
            raise self.error("/detokenize", 200, f"no `prompt` text in {str(reply)[:200]}")
        return text

    def _post(self, path: str, body: dict[str, object]) -> dict[str, object]:
        status, reply = post_json(
            self.root, path, body, TOKENIZER_TIMEOUT_S, self.api_key, self.ca_bundle
        )
        if status != 200 or not isinstance(reply, dict):
            raise self.error(path, status, str(reply)[:300])
        return reply

    def error(self, path: str, status: int, said: str) -> WorkloadError:
        return WorkloadError(
            f"{self.root}{path} answered {status or 'nothing'}: {said}",
            "the prompts are built with the served model's tokenizer, which vLLM and SGLang "
            "serve at the server root: let the endpoint through to /tokenize and /detokenize, "
            "or give inference.dataset (prompts from a file need no tokenizer)",
        )


# Plain words for the pool of token ids: every id the tokenizer makes of them is an ordinary
# token that decodes to text and back
_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ten",
    "ra",
    "vus",
    "el",
    "dor",
    "quin",
    "sa",
    "bre",
    "tho",
    "an",
    "pel",
    "gri",
    "um",
    "zo",
    "fen",
    "ish",
    "cor",
    "ya",
    "nol",
    "ber",
    "ix",
)
POOL_WORDS = 3000


def token_pool(tokenizer: ServerTokenizer, rng: random.Random) -> list[int]:
    """The distinct ids the server makes of a few thousand made-up words, shuffled."""
    words = (
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(POOL_WORDS)
    )
    pool = sorted(set(tokenizer.encode(" ".join(words))))
    rng.shuffle(pool)
    return pool


def exact_text(
    tokenizer: ServerTokenizer, tokens: list[int], pool: Sequence[int], rng: random.Random
) -> tuple[str, list[int]]:
    """Text whose re-encoding has len(tokens) tokens: decode, re-encode, cut the surplus or
    top up with random ids, as vLLM's gen_prompt_decode_to_target_len; after
    MAX_ADJUSTMENTS tries, the closest text and its true tokens."""
    target = len(tokens)
    text = tokenizer.decode(tokens)
    found = tokenizer.encode(text)
    for _ in range(MAX_ADJUSTMENTS):
        if len(found) == target:
            break
        short = target - len(found)
        adjusted = found[:target] if short < 0 else found + rng.choices(pool, k=short)
        text = tokenizer.decode(adjusted)
        found = tokenizer.encode(text)
    return text, found


def build_prompts(
    endpoint_root_url: str,
    model: str,
    count: int,
    input_tokens: int,
    output_tokens: int,
    spread: float,
    seed: int,
    api_key: str | None = None,
    ca_bundle: str | None = None,
) -> list[Prompt]:
    """COUNT distinct prompts, each with its input length counted by the server's tokenizer,
    each beginning with a token no other begins with (while the pool of ids lasts); the same
    seed gives the same prompts from the same tokenizer."""
    tokenizer = ServerTokenizer(endpoint_root_url.rstrip("/"), model, api_key, ca_bundle)
    rng = random.Random(seed)
    pool = token_pool(tokenizer, rng)
    if not pool:
        raise tokenizer.error("/tokenize", 200, "no tokens for a text of words")
    inputs = planned_lengths(count, input_tokens, spread, rng)
    outputs = planned_lengths(count, output_tokens, spread, rng)
    firsts: set[int] = set()
    prompts = []
    for i, (length, answer) in enumerate(zip(inputs, outputs, strict=True)):
        text, found = _distinct(tokenizer, pool, i, length, rng, firsts)
        firsts.update(found[:1])
        prompts.append(Prompt(text, len(found), answer))
    return prompts


def _distinct(
    tokenizer: ServerTokenizer,
    pool: Sequence[int],
    index: int,
    length: int,
    rng: random.Random,
    firsts: set[int],
) -> tuple[str, list[int]]:
    """A prompt of LENGTH tokens that starts with pool[index] (the pool shuffled: a random
    first token), or the next unused one where re-encoding merged it into a used one (a few
    tries; past the pool's size first tokens repeat, and prompts differ a token later)."""
    text, found = "", list[int]()
    for step in range(MAX_ADJUSTMENTS):
        first = pool[(index + step) % len(pool)]
        text, found = exact_text(tokenizer, [first, *rng.choices(pool, k=length - 1)], pool, rng)
        if found[:1] and found[0] not in firsts:
            break
    return text, found


def dataset_prompts(path: str | Path, count: int, output_tokens: int) -> list[Prompt]:
    """COUNT prompts from a ShareGPT-style JSON list or a JSONL file of {"prompt",
    "output_tokens"}, in order, repeated when the file has fewer; answers OUTPUT_TOKENS long
    unless a line says otherwise (docs/deploy-and-inference.md#prompts)."""
    found = _read_dataset(Path(path), output_tokens)
    if not found:
        raise WorkloadError(f"inference.dataset: {path} holds no prompts", _DATASET_FORMS)
    return [found[i % len(found)] for i in range(count)]


def _read_dataset(path: Path, output_tokens: int) -> list[Prompt]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"inference.dataset: cannot read {path}: {e}", _DATASET_FORMS) from None
    if text.lstrip().startswith("["):
        return _sharegpt(path, text, output_tokens)
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    return [_jsonl_prompt(path, n, line, output_tokens) for n, line in lines]


def _sharegpt(path: Path, text: str, output_tokens: int) -> list[Prompt]:
    try:
        items = json.loads(text)
    except ValueError as e:
        raise _malformed(path, getattr(e, "lineno", 0), f"not JSON: {e}") from None
    if not isinstance(items, list):
        raise _malformed(path, 1, "not a JSON list")
    prompts = []
    for i, item in enumerate(items):
        turns = item.get("conversations") if isinstance(item, dict) else None
        humans = [t for t in turns or () if isinstance(t, dict) and t.get("from") == "human"]
        human = humans[0].get("value") if humans else None
        if not isinstance(human, str) or not human:
            raise _malformed(path, 0, f"item [{i}] has no conversations turn from 'human'")
        prompts.append(Prompt(human, 0, output_tokens))
    return prompts


def _jsonl_prompt(path: Path, line_no: int, line: str, output_tokens: int) -> Prompt:
    try:
        row = json.loads(line)
    except ValueError as e:
        raise _malformed(path, line_no, f"not JSON: {e}") from None
    prompt = row.get("prompt") if isinstance(row, dict) else None
    if not isinstance(prompt, str) or not prompt:
        raise _malformed(path, line_no, 'no "prompt" string')
    answer = row.get("output_tokens", output_tokens)
    if not isinstance(answer, int) or isinstance(answer, bool) or answer < 1:
        raise _malformed(path, line_no, f'"output_tokens" {answer!r} is not a positive integer')
    return Prompt(prompt, 0, answer)


def _malformed(path: Path, line_no: int, said: str) -> WorkloadError:
    where = f"{path}, line {line_no}" if line_no else str(path)
    return WorkloadError(f"inference.dataset: {where}: {said}", _DATASET_FORMS)


_DATASET_FORMS = (
    'give a ShareGPT JSON list of {"conversations": [{"from": "human", "value": ...}, ...]} '
    'or JSONL lines of {"prompt": ..., "output_tokens": ...} (output_tokens optional)'
)


def chat_bodies(prompts: Sequence[Prompt], model: str) -> list[dict[str, object]]:
    """One chat request per prompt; `ignore_eos` (as `vllm bench serve --ignore-eos` sends it)
    makes every answer exactly its planned length, so tokens/s compares run to run."""
    return [chat_body(model, p.text, p.output_tokens, ignore_eos=True) for p in prompts]


def prompt_counts(inference: Inference) -> list[int]:
    """The warm-up's prompts, then each level's: every request of a sweep has its own
    (a duration level sends its prompts again from the first once it has sent them all)."""
    return [inference.warmup_requests] + [lv.requests(inference) for lv in levels(inference)]


def plan_prompts(
    inference: Inference,
    endpoint_root_url: str,
    model: str,
    api_key: str | None = None,
    ca_bundle: str | None = None,
    dataset_root: Path = Path(),
) -> list[list[Prompt]]:
    """The warm-up's prompts, then each level's, as prompt_counts says, from the plan's
    dataset (a path relative to DATASET_ROOT) or built with the server's tokenizer."""
    counts, i = prompt_counts(inference), inference
    if i.dataset is not None:
        found = dataset_prompts(dataset_root / i.dataset, sum(counts), i.output_tokens)
    else:
        found = build_prompts(
            endpoint_root_url,
            model,
            sum(counts),
            i.input_tokens,
            i.output_tokens,
            i.spread,
            i.seed,
            api_key,
            ca_bundle,
        )
    starts = list(itertools.accumulate(counts, initial=0))
    return [found[a:b] for a, b in itertools.pairwise(starts)]


def run_level(
    base_url: str,
    level: Level,
    bodies: Sequence[Body],
    inference: Inference,
    timeout_s: float,
    api_key: str | None = None,
    ca_bundle: str | None = None,
    on_done: OnDone | None = None,
) -> LoadRun:
    """One level of the sweep against `base_url` (the /v1 root), closed or open loop, for
    its requests or for the plan's duration_s."""
    if level.rate is None:
        return run_load(
            base_url,
            CHAT_PATH,
            bodies,
            level.concurrency or 1,
            timeout_s,
            api_key,
            ca_bundle,
            duration_s=inference.duration_s,
            on_done=on_done,
        )
    return run_open_loop(
        base_url,
        CHAT_PATH,
        bodies,
        level.rate,
        timeout_s,
        api_key,
        ca_bundle,
        seed=inference.seed,
        duration_s=inference.duration_s,
        on_done=on_done,
    )
