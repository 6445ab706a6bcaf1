"""Prompts with known answers, set per model in the plan (inference.probes), get them."""

from __future__ import annotations

import pytest

from infergate.fixtures.endpoint import ServedBy
from infergate.inference.client import stream_completion
from infergate.inference.endpoint import Endpoint
from infergate.inference.plan import CHAT_PATH, check_probe, probe_body
from infergate.plan.model import Inference

pytestmark = [pytest.mark.xdist_group("deployment"), pytest.mark.usefixtures("inference_report")]


def test_known_answer(
    endpoint: Endpoint, served_by: ServedBy, inference_plan: Inference, probe_index: int
) -> None:
    """The answer matches the plan's expectation, greedy and ending on the model's own end
    of sequence (no ignore_eos); a reasoning model's thinking is not the answer."""
    probe = inference_plan.probes[probe_index]
    body = probe_body(probe, endpoint.model)
    key, ca = endpoint.api_key, endpoint.ca_bundle
    record = stream_completion(endpoint.v1, CHAT_PATH, body, endpoint.request_s, key, ca)
    served_by.fail(check_probe(probe, record, thinking=inference_plan.thinking))
