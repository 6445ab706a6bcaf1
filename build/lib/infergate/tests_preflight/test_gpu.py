"""GPUs: the planned count on every node, one driver everywhere, nobody else on them, and
no forward-compatibility libraries forced over a newer driver."""

import pytest

from infergate.checks.cuda import (
    check_compat_libs,
    check_cuda_compatibility,
    image_libcuda,
    parse_cuda_version,
)
from infergate.checks.facts import (
    ProbeError,
    compat_libs_of,
    gpu_apps_of,
    gpus_of,
    memory_of,
    smi_table_of,
)
from infergate.checks.gpu import (
    MemorySource,
    check_driver_versions,
    check_foreign_gpu_users,
    check_gpu_count,
    check_page_cache,
    memory_source,
)
from infergate.checks.inimage import image_cuda_version
from infergate.checks.inimage_ran import cuda_init_of
from infergate.fixtures.facts import read_fact
from infergate.fixtures.report import fail_on, fail_on_cluster

pytestmark = pytest.mark.gpu


def test_gpus_present_as_planned(probes, node):
    """Every node shows the number of GPUs the plan gives it."""
    gpus = read_fact(node, probes.of(node), gpus_of)
    fail_on(node, check_gpu_count(gpus, node.gpus, node.key_of("gpus")))


@pytest.mark.xdist_group("cluster")
def test_driver_same_on_every_node(probes, answered):
    """An NVIDIA driver answers on every node, the same version everywhere."""
    drivers = {n.name: _driver(probes.every()[n.name]) for n in answered}
    fail_on_cluster(answered, check_driver_versions(drivers))


def _driver(outcome):
    try:
        gpus = gpus_of(outcome) if isinstance(outcome, dict) else []
    except ProbeError:
        gpus = []
    return gpus[0].driver if gpus else None


def test_no_foreign_gpu_users(probes, node, inventory):
    """No process holds GPU memory before launch unless the plan allows it
    (allow.gpu_processes), each named with pid, name and MiB."""
    sections = probes.of(node)
    apps = read_fact(node, sections, gpu_apps_of)
    gpus = read_fact(node, sections, gpus_of)
    fail_on(node, check_foreign_gpu_users(apps, inventory.allow.gpu_processes, gpus))


def test_compat_libs_not_over_newer_driver(probes, node):
    """CUDA forward-compatibility libraries are on the loader path only over an older driver
    (over a newer one every CUDA program fails with error 803)."""
    libs = read_fact(node, probes.of(node), compat_libs_of)
    fail_on(node, check_compat_libs(libs.host_driver, libs.compat_driver, libs.on_path))


@pytest.mark.image
@pytest.mark.xdist_group("cluster")
def test_image_cuda_initialises_on_driver(image_facts, probes, node):
    """The image's CUDA runs on the node's driver: judged from the versions, and proven by
    a CUDA init inside the image (errors 803/804, the NGC "compatibility mode is
    UNAVAILABLE" banner); forward compatibility is not documented for GB10."""
    driver_cuda, image_cuda, gpu, init, libs = _cuda_seen(image_facts, probes, node)
    fail_on(node, check_cuda_compatibility(driver_cuda, image_cuda, gpu, init, libs))


def _cuda_seen(image_facts, probes, node):
    """The driver's CUDA, the image's, the GPU, the CUDA init in the image, and the libcuda it
    loads: that lets a failure name its cause (compat libraries over the driver)."""
    table = read_fact(node, probes.of(node), smi_table_of)
    init = cuda_init_of(image_facts.preamble, image_facts.part("cuda-init"))
    cuda = image_facts.part("cuda")
    image_cuda = image_cuda_version(cuda)
    host = read_fact(node, probes.of(node), compat_libs_of).host_driver
    libs = image_libcuda(host, cuda.get("compat"), cuda.get("LD_LIBRARY_PATH"))
    gpu = table.gpus[0].name if table.gpus else "unknown GPU"
    return parse_cuda_version(table.cuda), image_cuda, gpu, init, libs


@pytest.mark.image
@pytest.mark.xdist_group("cluster")
def test_engine_free_memory_near_meminfo(image_facts, probes, node, inventory):
    """On unified memory (GB10) the engine admits on its own free figure, which counts page
    cache as used: it must not be far below MemAvailable (vllm #35313)."""
    gpus = read_fact(node, probes.of(node), gpus_of)
    if memory_source(gpus) is not MemorySource.MEMINFO:
        pytest.skip(
            "the GPUs report memory of their own: the page-cache gap is a unified-memory matter"
        )
    free = image_facts.part("cuda-init").get("mem_get_info") or [[0, 0]]
    available = read_fact(node, probes.of(node), memory_of).available
    gap = inventory.thresholds.page_cache_gap_gib
    fail_on(node, check_page_cache(int(free[0][0]), available, gap))
