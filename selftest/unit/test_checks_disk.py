"""Disk space and shared compile caches: parsers and judges on recorded findmnt outputs."""

import subprocess
from pathlib import Path

import pytest

from infergate.checks.disk import (
    ContainerPlan,
    DiskFacts,
    Mount,
    cache_dirs,
    container_plan,
    disk_section,
    host_path,
    parse_disk_section,
    parse_findmnt_raw,
    volumes_of,
    written_paths,
)
from infergate.checks.disk_space import (
    JIT_HEADROOM_GIB,
    Need,
    cache_needs,
    check_disk_space,
    copy_needs,
    largest_image_gib,
)
from infergate.checks.probe import Section
from infergate.checks.shared_caches import check_shared_caches, writable_places

DATA = Path(__file__).parents[1] / "data" / "disk"
GIB = 2**30
LAB_ARGS = ("-v", "/root/.cache/vllm:/root/.cache/vllm")


def recorded(name: str, after: str) -> list[str]:
    """The output lines that follow the `## ...` line holding AFTER in a recording."""
    text = (DATA / name).read_text().split("\n## ")
    block = next(b for b in text if after in b.splitlines()[0])
    return [ln for ln in block.splitlines()[1:] if ln and not ln.startswith("rc=")]


# --- parsing ------------------------------------------------------------------------------


def test_findmnt_line_recorded_on_h200():
    (line,) = recorded("findmnt-h200.txt", "-T /root/.cache/vllm")
    assert parse_findmnt_raw(line) == Mount("ext4", "/dev/vda", 68697530368, "/")


def test_stacked_mounts_read_as_the_top_one():
    lines = recorded("findmnt-h200.txt", "-T /dev/shm")
    assert len(lines) == 2  # the probe keeps the last (`tail -n 1`): the mount on top
    assert parse_findmnt_raw(lines[-1]).target == "/dev/shm"


def test_two_column_form_recorded_on_h200():
    (line,) = recorded("findmnt-fstype-source-h200.txt", "findmnt")
    assert parse_findmnt_raw(line) == Mount("ext4", "/dev/vda", None, None)


def test_escaped_blank_in_a_source_is_read_back():
    mount = parse_findmnt_raw(r"cifs //files/ai\x20cache 1024 2048 /mnt/ai\x20cache")
    assert (mount.source, mount.target) == ("//files/ai cache", "/mnt/ai cache")


@pytest.mark.parametrize("line", ["", "ext4", "ext4 /dev/vda lots 1 /", "findmnt: not found"])
def test_anything_else_is_not_a_findmnt_line(line):
    with pytest.raises(ValueError, match="not a findmnt line"):
        parse_findmnt_raw(line)


def test_disk_section_recorded_in_the_lab():
    facts = parse_disk_section((DATA / "disk-section-lab.txt").read_text())
    assert facts.docker_root == "/var/lib/infergate-lab/nodes/node2/docker"
    assert facts.image_bytes
    assert facts.image_bytes > GIB
    assert facts.mounts["/root/.cache/vllm"].fstype == "ext4"
    assert set(facts.mounts) == {
        facts.docker_root,
        "/root/.cache/vllm",
        "/srv/models/SmolLM2-135M-Instruct",
    }


def test_disk_section_runs_here_for_real(tmp_path):
    """The section's script on this machine: a path not made yet is asked of its parent, and
    no Docker engine here is no Docker root, not a failure."""
    missing = tmp_path / "not" / "made"
    name, script = disk_section("no/such-image:1", [str(tmp_path), str(missing)])
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30)
    assert (name, done.returncode) == ("disk", 0), done.stderr
    facts = parse_disk_section(done.stdout)
    here, there = facts.mounts[str(tmp_path)], facts.mounts[str(missing)]
    assert (there.fstype, there.source, there.target) == (here.fstype, here.source, here.target)
    assert here.avail is not None  # a live disk: free space differs between the two asks


# --- where the caches are -----------------------------------------------------------------


def test_cache_defaults_under_root_and_the_env_that_moves_them():
    assert cache_dirs({}) == {
        "HF_HOME": "/root/.cache/huggingface",
        "VLLM_CACHE_ROOT": "/root/.cache/vllm",
        "TRITON_CACHE_DIR": "/root/.triton/cache",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root",
    }
    moved = cache_dirs({"XDG_CACHE_HOME": "/cache", "HOME": "/home/u", "DG_JIT_CACHE_DIR": "~/dg"})
    assert moved["HF_HOME"] == "/cache/huggingface"
    assert moved["TRITON_CACHE_DIR"] == "/home/u/.triton/cache"
    assert moved["DG_JIT_CACHE_DIR"] == "/home/u/dg"


def test_volumes_map_container_paths_to_the_host():
    volumes = volumes_of(
        ["-v", "/data/hf:/cache/hf", "--volume=/nfs/models:/models:ro,z", "-v", "named:/x"]
    )
    assert [(v.source, v.read_only) for v in volumes] == [
        ("/data/hf", False),
        ("/nfs/models", True),
        ("named", False),
    ]
    assert host_path("/cache/hf/hub", volumes) == "/data/hf/hub"
    assert host_path("/cache/hfx", volumes) is None  # not under /cache/hf
    assert host_path("/x/y", volumes) is None  # a named volume: under the Docker root


def test_the_lab_plan_asks_about_its_cache_volume_and_model():
    plan = container_plan({"VLLM_HOST_IP": "10.252.0.11"}, LAB_ARGS)
    assert written_paths(plan, "/srv/models/m") == ["/root/.cache/vllm", "/srv/models/m"]


# --- room ---------------------------------------------------------------------------------

ROOT = "/var/lib/docker"


def facts_with(avail_gib: dict[str, float], image_bytes: int | None = 3 * GIB) -> DiskFacts:
    """Each path on a file system of its own (by its free space), or sharing one."""
    mounts = {p: Mount("ext4", f"/dev/{g}", int(g * GIB), f"/fs{g}") for p, g in avail_gib.items()}
    return DiskFacts(ROOT, image_bytes, mounts)


def test_room_everywhere_passes():
    facts = facts_with({ROOT: 50, "/root/.cache/vllm": 50})
    needs = cache_needs(container_plan({}, LAB_ARGS).env, volumes_of(LAB_ARGS), ROOT)
    assert check_disk_space(needs, facts) == []


def test_a_cache_short_of_headroom_is_named_with_what_fills_it():
    facts = facts_with({ROOT: 50, "/root/.cache/vllm": 0.5})
    needs = cache_needs({}, volumes_of(LAB_ARGS), ROOT)
    (problem,) = check_disk_space(needs, facts)
    assert problem.found == "0.5 GiB free on /fs0.5 (ext4 /dev/0.5), which holds /root/.cache/vllm"
    assert (
        problem.planned
        == f"at least {JIT_HEADROOM_GIB:g} GiB free there: 4 GiB JIT headroom (VLLM_CACHE_ROOT)"
    )
    assert problem.remedy.startswith(
        "free 3.5 GiB on /fs0.5: `du -xh -d 2 /fs0.5 | sort -h | tail`"
    )
    assert "docker system prune" not in problem.remedy


def test_headroom_counts_once_per_file_system_and_copies_add_up():
    """The Docker root and the model on one disk without the image or the model: both copies
    and one headroom must fit there."""
    mount = Mount("ext4", "/dev/nvme0n1p2", 10 * GIB, "/")
    facts = DiskFacts(ROOT, None, {ROOT: mount, "/root/.cache/vllm": mount, "/srv/m": mount})
    needs = [
        *cache_needs({}, volumes_of(LAB_ARGS), ROOT),
        *copy_needs(facts, "img:1", 5.0, ("/srv/m", 2.0)),
    ]
    (problem,) = check_disk_space(needs, facts)
    assert problem.planned.startswith(
        "at least 11 GiB free there: 5 GiB image img:1, not on this node"
    )
    assert "2 GiB model.size_gib, not on this node (copied here)" in problem.planned
    assert problem.planned.endswith(
        "; 4 GiB JIT headroom (VLLM_CACHE_ROOT; HF_HOME, TRITON_CACHE_DIR, "
        "TORCHINDUCTOR_CACHE_DIR in the container's layer)"
    )
    assert "docker system prune" in problem.remedy


def test_nothing_to_copy_where_image_and_model_are_there():
    facts = facts_with({ROOT: 1})
    assert copy_needs(facts, "img:1", 5.0, ("/srv/m", None)) == []


def test_image_size_comes_from_the_nodes_that_have_it():
    have = {"disk": Section(0, f"docker-root\t{ROOT}\nimage-size\t{3 * GIB}\n")}
    lack = {"disk": Section(0, f"docker-root\t{ROOT}\nimage-size\t\n")}
    assert largest_image_gib([lack, have, OSError("unreachable")]) == 3.0
    assert largest_image_gib([lack]) is None


def test_a_need_on_a_file_system_with_room_is_no_problem():
    facts = facts_with({"/srv/m": 2.5})
    assert check_disk_space([Need("/srv/m", 2.0, "model")], facts) == []


# --- shared caches (vLLM#24601) -----------------------------------------------------------

NFS = Mount("nfs4", "fileserver:/export/cache", 500 * GIB, "/mnt/cache")
LOCAL_1, LOCAL_2 = (parse_findmnt_raw(recorded("findmnt-h200.txt", "-T /root/.cache")[0]),) * 2


def lab_places() -> dict[str, str]:
    return writable_places(container_plan({}, LAB_ARGS))


def test_local_caches_on_one_disk_name_per_node_pass():
    """Two nodes' /dev/vda are two disks: the same local source is no sharing."""
    places = {"node1": lab_places(), "node2": lab_places()}
    mounts = {n: {"/root/.cache/vllm": LOCAL_1} for n in places}
    assert check_shared_caches(places, mounts) == {}


def test_a_cache_on_nfs_is_named_with_a_local_remedy():
    plan = ContainerPlan(
        {"VLLM_CACHE_ROOT": "/cache/vllm"}, volumes_of(["-v", "/mnt/cache:/cache"])
    )
    places = {"spark1": writable_places(plan)}
    problems = check_shared_caches(places, {"spark1": {"/mnt/cache/vllm": NFS, "/mnt/cache": NFS}})
    found = [p.found for p in problems["spark1"]]
    assert found == [
        "VLLM_CACHE_ROOT=/cache/vllm is on nfs4 fileserver:/export/cache (mounted at /mnt/cache)",
        "volume /mnt/cache:/cache is on nfs4 fileserver:/export/cache (mounted at /mnt/cache)",
    ]
    assert "mkdir -p /var/cache/engine/vllm_cache_root" in problems["spark1"][0].remedy


def test_one_source_two_nodes_write_is_named_on_both():
    share = Mount("virtiofs", "hostcache", 100 * GIB, "/root/.cache")
    places = {"vm1": lab_places(), "vm2": lab_places()}
    problems = check_shared_caches(places, {n: {"/root/.cache/vllm": share} for n in places})
    assert (
        problems["vm1"][0].found
        == "VLLM_CACHE_ROOT=/root/.cache/vllm is on virtiofs hostcache, which vm2 also write(s)"
    )
    assert "vm1 also" in problems["vm2"][0].found


def test_a_read_only_volume_on_nfs_is_no_cache():
    plan = container_plan({}, ["-v", "/nfs/models:/models:ro"])
    assert writable_places(plan) == {}
