"""The one catalogue of failure signatures: each failure once, each reader given its part."""

import pytest

from infergate.checks.inimage_ran import check_nccl_ran
from infergate.engines.signatures import CATALOGUE, ENGINES, RENDEZVOUS, named, signatures_for


def test_each_signature_is_named_once_and_applies_somewhere():
    names = [s.name for s in CATALOGUE]
    assert len(names) == len(set(names))
    assert all(s.contexts <= ENGINES | {RENDEZVOUS} and s.contexts for s in CATALOGUE)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        # torch 2.x TCPStore, the head waiting for a rank: in a vLLM log and in the probe alike
        (
            "torch.distributed.DistStoreError: Timed out after 61 seconds waiting for clients. "
            "1/2 clients joined.",
            "rank-missing",
        ),
        ("no rendezvous within 30 s", "rank-missing"),  # the in-image probe's own deadline
        (
            "DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: 29501, useIpv6: false, code: -98, name: EADDRINUSE, message: address "
            "already in use",
            "port-taken",
        ),
    ],
)
def test_a_line_reads_the_same_in_a_launch_and_in_the_rendezvous(line, name):
    for context in ("vllm", RENDEZVOUS):
        assert next(s for s in signatures_for(context) if s.search(line)).name == name


def test_a_failed_rendezvous_before_nccl_gets_the_catalogues_remedy():
    result = {"error": "RuntimeError: Unable to find address for: fab1"}
    (problem,) = check_nccl_ran(result)
    assert problem.remedy == named("gloo-no-address").remedy
