"""Model judges and the parity matrix, on small inputs shaped like the recorded ones."""

import json

import pytest

from infergate.checks.model import (
    FileStat,
    check_model_files,
    check_model_hashes,
    check_model_parity,
    parse_find_files,
    parse_manifest,
    parse_safetensors_index,
)
from infergate.checks.parity import check_parity, differing, render_matrix

SHARDS = {
    "weight_map": {
        "a.w": "model-00001-of-00002.safetensors",
        "b.w": "model-00002-of-00002.safetensors",
    }
}


def stat(size: int) -> FileStat:
    return FileStat(size, 1.0, 1.0, 1)


def test_find_listing_parses_tab_separated_fields():
    text = "config.json\t656\t1762412210.5\t1762412211.25\t2621441\nbad line\n"
    assert parse_find_files(text) == {
        "config.json": FileStat(656, 1762412210.5, 1762412211.25, 2621441)
    }


def test_index_names_its_shards_and_a_missing_one_is_named():
    shards = parse_safetensors_index(json.dumps(SHARDS))
    files = {"model-00001-of-00002.safetensors": stat(5), "config.json": stat(1)}
    (problem,) = check_model_files("/m", files, shards, None)
    assert problem.found == "1 weight file(s) missing: model-00002-of-00002.safetensors"
    assert problem.remedy.endswith(
        "`rsync -a --info=progress2 NODE:/m/model-00002-of-00002.safetensors /m/`"
    )


def test_several_missing_shards_copy_only_what_is_absent():
    shards = parse_safetensors_index(json.dumps(SHARDS))
    (problem,) = check_model_files("/m", {"config.json": stat(1)}, shards, None)
    assert problem.remedy.endswith("`rsync -a --info=progress2 --ignore-existing NODE:/m/ /m/`")


def test_missing_directory_and_bad_config_are_named():
    (problem,) = check_model_files("/m", None, None, None)
    assert problem.found == "no model directory /m"
    (problem,) = check_model_files("/m", {"model.safetensors": stat(3)}, None, "not JSON: x")
    assert problem.found == "config.json unusable: not JSON: x"


def test_sizes_differing_name_the_node_and_the_file():
    listings = {"node1": {"a": stat(10), "b": stat(5)}, "node2": {"a": stat(9), "b": stat(5)}}
    problems = check_model_parity(listings)  # equal file counts: the last name is the reference
    assert list(problems) == ["node1"]
    assert problems["node1"][0].found == "1 file(s) differ from node2: a (10 vs 9)"


def test_hash_mismatch_with_two_nodes_names_both():
    hashes = {"node1": {"a": "1" * 64}, "node2": {"a": "2" * 64}}
    assert set(check_model_hashes(hashes, None)) == {"node1", "node2"}


def test_hash_mismatch_with_three_nodes_names_the_odd_one():
    hashes = {"n1": {"a": "1" * 64}, "n2": {"a": "1" * 64}, "n3": {"a": "2" * 64}}
    problems = check_model_hashes(hashes, None)
    assert list(problems) == ["n3"]
    assert problems["n3"][0].found.startswith("1 file(s) with other content: a sha256 222222222222")


def test_manifest_decides_who_is_wrong():
    manifest = parse_manifest(json.dumps({"checksums": {"a": "1" * 64}}))
    problems = check_model_hashes({"node1": {"a": "1" * 64}, "node2": {"a": "2" * 64}}, manifest)
    assert list(problems) == ["node2"]
    assert "vs manifest 111111111111" in problems["node2"][0].found


def test_manifest_from_the_hugging_face_tree_listing():
    listing = [
        {"type": "file", "path": "model.safetensors", "lfs": {"oid": "ab" * 32, "size": 1}},
        {"type": "file", "path": "config.json", "oid": "deadbeef"},
    ]
    assert parse_manifest(json.dumps(listing)) == {"model.safetensors": "ab" * 32}


def test_not_a_manifest_is_an_error():
    with pytest.raises(ValueError, match="not a manifest"):
        parse_manifest("{}")


def test_parity_names_the_odd_node_and_renders_the_differences():
    matrix = {
        "kernel": {"n1": "6.11", "n2": "6.11", "n3": "6.8"},
        "driver": {"n1": "580.95.05", "n2": "580.95.05", "n3": "580.95.05"},
    }
    problems = check_parity(matrix)
    assert list(problems) == ["n3"]
    assert problems["n3"][0].found == "kernel 6.8"
    assert problems["n3"][0].planned == "kernel as on the other nodes: 6.11"
    assert render_matrix(differing(matrix), ["n1", "n2", "n3"]).splitlines() == [
        "        n1    n2    n3",
        "kernel  6.11  6.11  6.8",
    ]


def test_parity_between_two_nodes_names_both():
    assert set(check_parity({"torch (image)": {"a": "2.9", "b": "2.10"}})) == {"a", "b"}
