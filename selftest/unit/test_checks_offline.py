"""Offline nodes: the hub dial's target and answers (recorded), tokenizer sources, and
HF_HUB_OFFLINE where the hub is out of reach."""

import subprocess
from pathlib import Path

import pytest

from infergate.checks.disk import volumes_of
from infergate.checks.offline import (
    HubTarget,
    check_offline_mode,
    check_sources_local,
    hub_section,
    hub_target,
    offline_set,
    parse_hub_dial,
    planned_sources,
)
from infergate.plan.model import InventoryError, parse_inventory
from selftest.unit.test_inventory import lab_with

DATA = Path(__file__).parents[1] / "data" / "disk"
HUB = hub_target({})
REFUSED = "ConnectionRefusedError [Errno 111] Connection refused"


def test_the_hub_is_huggingface_unless_the_env_says_otherwise():
    assert (HUB.endpoint, HUB.host, HUB.port) == ("https://huggingface.co", "huggingface.co", 443)
    mirror = hub_target({"HF_ENDPOINT": "http://10.252.0.11:9"})
    assert (mirror.host, mirror.port) == ("10.252.0.11", 9)
    proxied = hub_target({"HF_ENDPOINT": "https://hf-mirror.com", "https_proxy": "proxy:3128"})
    assert proxied == HubTarget("https://hf-mirror.com", "proxy", 3128)


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("hub-dial-ok.txt", None),
        ("hub-dial-refused.txt", REFUSED),
        ("hub-dial-unresolvable.txt", "gaierror [Errno -2] Name or service not known"),
    ],
)
def test_recorded_dial_answers(name, said):
    assert parse_hub_dial((DATA / name).read_text()) == said


def test_a_dial_past_its_deadline_says_so():
    assert parse_hub_dial("") == "no answer in time"


def test_the_section_dials_for_real_and_always_prints():
    """Against a port of this machine's loopback where nothing listens: refused, exit 0."""
    name, command = hub_section(HubTarget("x", "127.0.0.1", 9))
    done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
    assert (name, done.returncode) == ("hub-dial", 0)
    assert parse_hub_dial(done.stdout) == REFUSED


@pytest.mark.parametrize(
    ("value", "offline"), [("1", True), ("true", True), ("0", False), ("", False)]
)
def test_offline_as_huggingface_hub_reads_it(value, offline):
    assert offline_set({"HF_HUB_OFFLINE": value}) is offline


def test_tokenizer_flags_in_both_forms():
    flags = ["--max-model-len", "1024", "--tokenizer", "org/tok", "--tokenizer-path=/m/tok"]
    assert planned_sources(flags) == [("--tokenizer", "org/tok"), ("--tokenizer-path", "/m/tok")]


def test_a_hub_id_tokenizer_is_red_and_says_whether_the_node_reaches_the_hub():
    (problem,) = check_sources_local([("--tokenizer", "org/tok")], "/srv/m", [], HUB, REFUSED)
    reach = f"this node does not reach https://huggingface.co ({REFUSED})"
    assert problem.found == f"--tokenizer org/tok, a hub id ({reach})"
    assert problem.remedy.startswith(
        "download it once (`hf download org/tok --local-dir /srv/m/tokenizer`)"
    )
    (reached,) = check_sources_local([("--tokenizer", "org/tok")], "/srv/m", [], HUB, None)
    assert "this node reaches https://huggingface.co" in reached.found


def test_a_local_tokenizer_must_be_mounted_into_the_container():
    volumes = volumes_of(["-v", "/data/tok:/tok:ro"])
    sources = [("--tokenizer", "/srv/m/tok"), ("--tokenizer", "/tok/a"), ("--tokenizer", "/other")]
    (problem,) = check_sources_local(sources, "/srv/m", volumes, HUB, None)
    assert problem.found == "--tokenizer /other, a path no mount brings into the container"
    assert problem.remedy == "add `-v /other:/other:ro` to engine.docker_args"


def test_no_node_reaches_the_hub_and_offline_unset_is_red_on_each():
    problems = check_offline_mode({"n1": REFUSED, "n2": REFUSED}, {"n1": False, "n2": False}, "e")
    assert set(problems) == {"n1", "n2"}
    assert "no node reaches it, and HF_HUB_OFFLINE is not 1" in problems["n1"][0].found
    assert (
        problems["n1"][0].remedy == 'set HF_HUB_OFFLINE: "1" in engine.env (or in this node\'s env)'
    )


def test_the_nodes_that_reach_the_hub_are_named():
    problems = check_offline_mode({"n1": None, "n2": REFUSED}, {"n1": False, "n2": False}, "e")
    assert list(problems) == ["n2"]
    assert f"e unreachable from this node ({REFUSED}), n1 reach(es) it" in problems["n2"][0].found


def test_offline_set_or_the_hub_reached_is_green():
    assert check_offline_mode({"n1": REFUSED, "n2": None}, {"n1": True, "n2": False}, "e") == {}


def test_a_model_given_as_a_hub_id_is_a_plan_error_with_the_download():
    with pytest.raises(InventoryError) as e:
        parse_inventory(lab_with(("model.path", "HuggingFaceTB/SmolLM2-135M-Instruct")))
    assert "is not an absolute path but a hub id" in str(e.value)
    local = "/srv/models/SmolLM2-135M-Instruct"
    assert f"hf download HuggingFaceTB/SmolLM2-135M-Instruct --local-dir {local}" in str(e.value)
