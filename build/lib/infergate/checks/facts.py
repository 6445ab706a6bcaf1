"""What one probe run tells about a node, read section by section.

Each reader raises ProbeError when its section failed (a missing `ip` command, a
permission error), so one missing tool fails the checks that need it and no others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from infergate.checks.containers import Container, parse_docker_ps_json, parse_docker_stats_json
from infergate.checks.cuda import (
    compat_on_loader_path,
    parse_ldconfig_libcuda,
    parse_ls_compat,
    parse_proc_driver_version,
)
from infergate.checks.firewall import Rules, firewall_rules
from infergate.checks.gpu import (
    Gpu,
    GpuProcess,
    SmiTable,
    parse_nvidia_smi_compute_apps,
    parse_nvidia_smi_query_gpu,
    parse_nvidia_smi_table,
)
from infergate.checks.gpu_health import GpuHealth, parse_nvidia_smi_health
from infergate.checks.gpu_kernel import parse_nvml_library
from infergate.checks.host import DockerEngine, parse_docker_version, parse_os_release
from infergate.checks.image import parse_image_id
from infergate.checks.kernel_log import KernelLog, parse_kernel_log
from infergate.checks.memory import MemoryFacts, memory_facts
from infergate.checks.model import FileStat, parse_find_files, parse_safetensors_index
from infergate.checks.network import Interface, parse_ip_addr_json
from infergate.checks.node_ports import PortRange, parse_port_range
from infergate.checks.ports import Listening, parse_ss_listening
from infergate.checks.pressure import MemoryPressure, parse_proc_swaps, parse_psi_memory
from infergate.checks.probe import SECTION_DEADLINE, Section
from infergate.checks.rdma_sysfs import RdmaPort, parse_rdma_sysfs
from infergate.checks.tools import missing_tools
from infergate.waiting import TIMEOUT_EXITS, ran_past

Sections = dict[str, Section]


class ProbeError(ValueError):
    """A section the checks need is missing or failed; names it and what it printed."""


@dataclass(frozen=True)
class Identity:
    hostname: str
    kernel: str
    os: str


def finished(sections: Sections, name: str, missing: Section) -> Section:
    """The section (MISSING if there is none); one that ran past its deadline is a ProbeError
    that says so, since what it printed is partial: a hung model mount is not "no such
    directory", nor a wedged Docker daemon "no such image"."""
    section = sections.get(name, missing)
    if section.rc in TIMEOUT_EXITS:
        look = f"what `{name}` runs, on the node under `time` (a wedged daemon or a hung mount)"
        raise ProbeError(ran_past(f"the probe's `{name}`", SECTION_DEADLINE, section.rc, look))
    return section


def section_text(sections: Sections, name: str) -> str:
    """A section's text; one that failed, is missing or ran past its deadline is a ProbeError."""
    section = finished(sections, name, Section(-1, "(section missing)"))
    if section.rc != 0:
        rc = section.rc if section.rc >= 0 else "?"
        raise ProbeError(f"`{name}` failed on the node (exit {rc}): {section.text.strip()[:300]}")
    return section.text


def identity_of(sections: Sections) -> Identity:
    os_fields = parse_os_release(section_text(sections, "os-release"))
    return Identity(
        hostname=section_text(sections, "hostname").strip(),
        kernel=section_text(sections, "uname").strip(),
        os=os_fields.get("PRETTY_NAME", os_fields.get("NAME", "unknown")),
    )


@dataclass(frozen=True)
class NodeTools:
    missing: tuple[str, ...]  # the commands the node lacks
    os_release: dict[str, str]  # which package manager installs them


def tools_of(sections: Sections) -> NodeTools:
    """The commands the node lacks, and its os-release."""
    return NodeTools(
        missing_tools(sections), parse_os_release(section_text(sections, "os-release"))
    )


def memory_of(sections: Sections) -> MemoryFacts:
    try:
        return memory_facts(
            section_text(sections, "meminfo"), section_text(sections, "cgroup-memory")
        )
    except ValueError as e:
        raise ProbeError(str(e)) from None


def interfaces_of(sections: Sections) -> dict[str, Interface]:
    text = section_text(sections, "ip-addr")
    try:
        return parse_ip_addr_json(text)
    except (ValueError, KeyError, TypeError) as e:
        raise ProbeError(
            f"`ip -j addr show` printed something unexpected ({e}): {text[:200]}"
        ) from None


def docker_of(sections: Sections) -> DockerEngine:
    """The Docker engine as the CLI sees it; a failing section is a finding, not an error,
    and one that ran past its deadline a daemon that hangs (not a missing CLI)."""
    section = sections.get("docker-version", Section(127, "(section missing)"))
    engine = parse_docker_version(section.text)
    if section.rc in TIMEOUT_EXITS:
        return replace(engine, server=None, hung=str(SECTION_DEADLINE))
    return engine


def image_id_of(sections: Sections) -> str | None:
    """The planned image's ID on the node, None when absent; a dead engine is an error."""
    section = finished(sections, "image-id", Section(127, "(section missing)"))
    if section.rc != 0 and "No such image" not in section.text:
        raise ProbeError(f"`docker image inspect` failed on the node: {section.text.strip()[:300]}")
    return parse_image_id(section.text, section.rc)


def containers_of(sections: Sections) -> tuple[list[Container], dict[str, int]]:
    """Running containers and the memory each holds (bytes)."""
    containers = parse_docker_ps_json(section_text(sections, "containers"))
    return containers, parse_docker_stats_json(section_text(sections, "container-memory"))


def listening_of(sections: Sections) -> list[Listening]:
    return parse_ss_listening(section_text(sections, "listening"))


def rdma_devices_of(sections: Sections) -> set[str]:
    return set(section_text(sections, "rdma-devices").split())


def rdma_ports_of(sections: Sections) -> list[RdmaPort]:
    """Every RDMA port with its state and GIDs; empty where the node has no RDMA."""
    text = section_text(sections, "rdma-ports")
    try:
        return parse_rdma_sysfs(text)
    except ValueError as e:  # an ipaddress or int error is a ValueError too
        raise ProbeError(f"the rdma-ports section does not parse: {e}") from None


def kernel_log_of(sections: Sections) -> KernelLog:
    """The kernel log's AER, mlx5, link and NVRM/Xid lines since boot, or why it could not be
    read."""
    return parse_kernel_log(section_text(sections, "kernel-log"))


def perftest_of(sections: Sections) -> bool:
    """Whether perftest's `ib_write_bw` is on the node's PATH."""
    return bool(section_text(sections, "perftest").strip())


@dataclass(frozen=True)
class ModelDir:
    """The model directory's files (None: no such directory), the shards its index names
    (None: no index, a single-file model), and what is wrong with its config.json."""

    files: dict[str, FileStat] | None
    shards: set[str] | None
    config_error: str | None


def model_of(sections: Sections) -> ModelDir:
    files_section = finished(sections, "model-files", Section(127, "(section missing)"))
    files = parse_find_files(files_section.text) if files_section.rc == 0 else None
    index = finished(sections, "model-index", Section(1, ""))
    config = finished(sections, "model-config", Section(1, "(section missing)"))
    try:
        shards = parse_safetensors_index(index.text) if index.rc == 0 else None
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        raise ProbeError(f"model.safetensors.index.json does not parse: {e}") from None
    return ModelDir(files, shards, _config_error(config))


def _config_error(config: Section) -> str | None:
    if config.rc != 0:
        return config.text.strip()[:200] or "cannot read config.json"
    try:
        doc = json.loads(config.text)
    except ValueError as e:
        return f"not JSON: {e}"
    return None if isinstance(doc, dict) else "not a JSON object"


def gpus_of(sections: Sections) -> list[Gpu]:
    """The node's GPUs from `nvidia-smi --query-gpu`; no nvidia-smi is a ProbeError."""
    return parse_nvidia_smi_query_gpu(section_text(sections, "gpu-query"))


def gpu_apps_of(sections: Sections) -> list[GpuProcess]:
    return parse_nvidia_smi_compute_apps(section_text(sections, "gpu-apps"))


def smi_table_of(sections: Sections) -> SmiTable:
    return parse_nvidia_smi_table(section_text(sections, "nvidia-smi"))


@dataclass(frozen=True)
class CompatLibs:
    """The libcuda version in /usr/local/cuda/compat, if any, and whether the loader resolves
    libcuda from there."""

    host_driver: str
    compat_driver: str | None
    on_path: bool


def compat_libs_of(sections: Sections) -> CompatLibs:
    compat = sections.get("cuda-compat", Section(2, ""))
    ldconfig = sections.get("ldconfig-cuda", Section(1, ""))
    return CompatLibs(
        host_driver=parse_proc_driver_version(section_text(sections, "driver-version")),
        compat_driver=parse_ls_compat(compat.text) if compat.rc == 0 else None,
        on_path=compat_on_loader_path(parse_ldconfig_libcuda(ldconfig.text)),
    )


def pressure_of(sections: Sections) -> MemoryPressure:
    """Swap areas and PSI `some avg10`; a kernel without PSI (no /proc/pressure) gives None."""
    psi = finished(sections, "psi-memory", Section(1, "(section missing)"))
    try:
        avg10 = parse_psi_memory(psi.text) if psi.rc == 0 else None
    except (ValueError, KeyError) as e:
        raise ProbeError(f"/proc/pressure/memory does not parse: {e}") from None
    return MemoryPressure(parse_proc_swaps(section_text(sections, "swaps")), avg10)


def gpu_health_of(sections: Sections) -> list[GpuHealth]:
    return parse_nvidia_smi_health(section_text(sections, "gpu-health"))


def nvml_versions_of(sections: Sections) -> tuple[str, str | None, str | None]:
    """nvidia-smi's own output, the loaded kernel module's version, the NVML library's."""
    smi = sections.get("nvidia-smi", Section(127, "")).text
    module = sections.get("driver-version", Section(1, ""))
    library = sections.get("nvml-library", Section(1, ""))
    try:
        loaded = parse_proc_driver_version(module.text) if module.rc == 0 else None
    except ValueError:
        loaded = None
    return smi, loaded, parse_nvml_library(library.text) if library.rc == 0 else None


def port_range_of(sections: Sections) -> PortRange:
    """The kernel's ephemeral port range and its reserved ports."""
    text = section_text(sections, "port-range")
    try:
        return parse_port_range(text)
    except ValueError as e:
        raise ProbeError(f"ip_local_port_range does not parse ({e}): {text[:200]}") from None


def firewall_of(sections: Sections) -> Rules:
    """What iptables and nft say about incoming traffic; a tool that cannot be read (absent,
    not root) is `unknown`, with why."""
    missing = Section(-1, "(section missing)")
    iptables, nft = (finished(sections, name, missing) for name in ("iptables", "nftables"))
    return firewall_rules((iptables.rc, iptables.text), (nft.rc, nft.text))
