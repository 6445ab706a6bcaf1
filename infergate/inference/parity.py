"""Reference parity: the served greedy answers against a recorded reference, token by token.
`parse_chat_logprobs` reads the API's answer, `compare` finds the first divergent position and
the logprob drift over the prefix before it, `check_parity` judges that against the plan.
Pure; the tolerances' defaults and why: docs/parity.md."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from infergate.inference.plan import chat_body
from infergate.inference.reference import Answer, Position, Reference, Topology
from infergate.plan.model import Parity
from infergate.problems import Problem

KEY = "inference.parity"


def parity_body(model: str, prompt: str, parity: Parity) -> dict[str, object]:
    """Greedy and not streamed, with each position's logprob and top-k."""
    top = parity.top_logprobs
    return chat_body(
        model, prompt, parity.max_tokens, temperature=0, logprobs=True, top_logprobs=top
    )


def request_of(parity: Parity) -> dict[str, object]:
    """The request's parameters as a reference records them (the prompt aside)."""
    body = parity_body("", "", parity)
    return {k: v for k, v in body.items() if k not in ("model", "messages")}


def reference_refused(ref: Reference, model: str, parity: Parity, path: str) -> str | None:
    """Why REF cannot judge this run, naming the key: another model, other request
    parameters, or a planned prompt it lacks; None where it can."""
    if ref.model != model:
        return (
            f"{KEY}.reference: {path} was recorded for model {ref.model!r}, this run serves "
            f"{model!r}: name a reference of {model!r}, or record one"
        )
    asked, was = request_of(parity), ref.request
    changed = sorted(k for k in asked.keys() | was.keys() if asked.get(k) != was.get(k))
    if changed:
        key = changed[0]
        return (
            f"{KEY}.{key}: {path} was recorded with {key} {was.get(key)!r}, this plan asks "
            f"{asked.get(key)!r}: plan it as recorded, or record again"
        )
    missing = [p for p in parity.prompts if ref.answer_to(p) is None]
    if missing:
        return (
            f"{KEY}.prompts: {len(missing)} not in the reference {path} (first: "
            f"{missing[0][:60]!r}): record the reference again for these prompts"
        )
    return None


def parse_chat_logprobs(prompt: str, reply: object) -> Answer:
    """The first choice of a /v1/chat/completions answer with `logprobs: true`; ValueError
    naming what is missing. A sample: `{"choices": [{"logprobs": {"content": [{"token": " Paris",
    "logprob": -0.01, "top_logprobs": [...]}]}, "finish_reason": "stop"}]}`."""
    choices = reply.get("choices") if isinstance(reply, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ValueError(f"no choices in the answer: {str(reply)[:200]}")
    logprobs = choices[0].get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list):
        raise ValueError(f"no logprobs.content in the answer's choice: {str(choices[0])[:200]}")
    positions = tuple(_position(item) for item in content)
    return Answer(prompt, positions, str(choices[0].get("finish_reason") or ""))


def _position(item: object) -> Position:
    if not isinstance(item, Mapping) or "token" not in item or "logprob" not in item:
        raise ValueError(f"a logprobs.content item without token and logprob: {str(item)[:120]}")
    top = tuple((str(t["token"]), float(t["logprob"])) for t in item.get("top_logprobs") or ())
    return Position(str(item["token"]), float(item["logprob"]), top)


@dataclass(frozen=True)
class Comparison:
    """One prompt's served answer against its reference."""

    prompt: str
    matched: int  # tokens equal from the first on
    total: int  # the reference's tokens
    reference_token: str | None  # at the first divergence; None: none
    served_token: str | None  # there; None: the served answer ended there
    max_drift: float  # max |logprob served - reference| of the chosen token, over the match
    drift_at: int | None  # the position of that maximum
    # the served token at the divergence in the reference's top-k: its rank (2 = the
    # reference's second choice) and how far below the reference's choice; None: not there
    rank: int | None = None
    margin: float | None = None

    @property
    def diverged(self) -> bool:
        return self.reference_token is not None

    def as_dict(self) -> dict[str, object]:
        """For results.json and the report."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def compare(reference: Answer, served: Answer) -> Comparison:
    """The first position where the tokens differ, and the drift before it. A served answer
    that goes on after the reference's ended is no divergence: the reference had no more."""
    ref, got = reference.positions, served.positions
    matched = _common_prefix(ref, got)
    drifts = [abs(got[i].logprob - ref[i].logprob) for i in range(matched)]
    worst = max(range(matched), key=drifts.__getitem__, default=None)
    drift = drifts[worst] if worst is not None else 0.0
    found = Comparison(reference.prompt, matched, len(ref), None, None, drift, worst)
    if matched == len(ref):
        return found
    there = ref[matched]
    token = got[matched].token if matched < len(got) else None
    rank, margin = _near(there, token)
    return replace(found, reference_token=there.token, served_token=token, rank=rank, margin=margin)


def _common_prefix(ref: Sequence[Position], got: Sequence[Position]) -> int:
    pairs = zip(ref, got, strict=False)
    differ = next((i for i, (r, s) in enumerate(pairs) if r.token != s.token), None)
    return min(len(ref), len(got)) if differ is None else differ


def _near(there: Position, served: str | None) -> tuple[int | None, float | None]:
    """The served token's rank among the reference's top-k there, and its logprob's gap."""
    tokens = [t for t, _ in there.top]
    if served is None or served not in tokens:
        return None, None
    i = tokens.index(served)
    return i + 1, there.logprob - there.top[i][1]


def check_parity(c: Comparison, parity: Parity, recorded_on: str) -> list[Problem]:
    """The matching prefix at least min_matching_tokens (or the whole reference, where it is
    shorter), and the drift over it at most max_logprob_drift."""
    problems = []
    needed = min(parity.min_matching_tokens, c.total)
    if c.matched < needed:
        problems.append(
            Problem(
                found=f"{_prompt(c)}: first divergence at position {c.matched}: reference "
                f"{c.reference_token!r}, served {_served(c)} ({c.matched} of {c.total} tokens "
                f"matched; max drift {c.max_drift:.3f})",
                planned=f"the first {needed} tokens as the reference recorded on {recorded_on} "
                f"({KEY}.min_matching_tokens)",
                remedy=_divergence_remedy(c),
            )
        )
    if c.max_drift > parity.max_logprob_drift:
        problems.append(
            Problem(
                found=f"{_prompt(c)}: logprob drift {c.max_drift:.3f} at position {c.drift_at} "
                f"over the {c.matched} matching tokens",
                planned=f"at most {parity.max_logprob_drift:g} ({KEY}.max_logprob_drift), "
                f"against the reference recorded on {recorded_on}",
                remedy=_DRIFT_REMEDY,
            )
        )
    return problems


def described(topology: Topology) -> str:
    """`1 node (node1), TP 1 PP 1, infergate-lab/vllm-cpu:0.32.0, engine 0.32.0`."""
    nodes = len(topology.nodes)
    parts = [f"{nodes} node(s) ({', '.join(topology.nodes)})" if nodes else topology.endpoint]
    if topology.tensor_parallel is not None:
        parts.append(f"TP {topology.tensor_parallel} PP {topology.pipeline_parallel}")
    parts += [
        p
        for p in (topology.image, topology.engine_version and f"engine {topology.engine_version}")
        if p
    ]
    return ", ".join(p for p in parts if p) or "an unnamed topology"


def _prompt(c: Comparison) -> str:
    short = c.prompt if len(c.prompt) <= 60 else c.prompt[:57] + "..."
    return f"prompt {short!r}"


def _served(c: Comparison) -> str:
    if c.served_token is None:
        return "nothing (the answer ended there)"
    if c.rank is None:
        return f"{c.served_token!r} (not in the reference's top-k there)"
    return f"{c.served_token!r} (the reference's choice #{c.rank} there, {c.margin:.3f} below)"


_TEMPLATE = (
    "compare the chat template (--chat-template, the model's tokenizer_config.json) and the "
    "generation config (--generation-config, generation_config.json) with the reference's "
    "deployment; then the dtype and quantization (--dtype, --quantization, --kv-cache-dtype)"
)
_NUMERICS = (
    "a near tie in the reference: topology-specific numerics (TP/PP reduction order, other "
    "kernels) can flip it; if other prompts match, lower {key}.min_matching_tokens to this "
    "position; if many diverge, check the dtype and quantization (--dtype, --quantization, "
    "--kv-cache-dtype), then the chat template and generation config"
)
_DRIFT_REMEDY = (
    "the same tokens with other probabilities: a lower precision or another quantization "
    "(--dtype, --quantization, --kv-cache-dtype) first, then topology-specific numerics "
    "(docs/parity.md has the drift measured between topologies); then the chat template"
)
# nats: a served token this close below the reference's choice is noise-prone; the lab's
# reference holds ties of 0 to 0.25 (its logits step by 0.125), docs/parity.md#tolerances
NEAR_TIE = 1.0


def _divergence_remedy(c: Comparison) -> str:
    """Leads with the likely cause: a near tie flipped by numerics, else the prompt itself."""
    if c.margin is not None and c.margin <= NEAR_TIE and c.matched > 0:
        return _NUMERICS.format(key=KEY)
    return _TEMPLATE
