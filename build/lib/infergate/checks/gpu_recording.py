"""A GPU host's recorded outputs (scripts/gpu_probe.py's files, e.g. selftest/data/h200-device/)
read back through every GPU parser and judge: the table a recording is checked with.

Takes file name -> text; reads nothing itself. A missing file is "not recorded", one a parser
refuses is "unreadable: why"; neither stops the other rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from infergate.checks.cuda import (
    check_compat_libs,
    format_cuda,
    parse_cuda_init,
    parse_cuda_version_json,
    parse_ls_compat,
    parse_proc_driver_version,
)
from infergate.checks.gpu import (
    GIB,
    MemorySource,
    check_foreign_gpu_users,
    check_page_cache,
    memory_source,
    parse_nvidia_smi_compute_apps,
    parse_nvidia_smi_query_gpu,
    parse_nvidia_smi_table,
    parse_torch_facts_json,
)
from infergate.checks.memory import parse_meminfo
from infergate.checks.nccl import check_rendezvous, parse_torchrun_log

Files = Mapping[str, str]
Row = tuple[str, str]
TORCHRUN_LOGS = (
    "allreduce-default.txt",
    "allreduce-socket.txt",
    "gloo-lo.txt",
    "nccl-default-info.txt",
    "nccl-wrong-ifname.txt",
    "gloo-wrong-ifname.txt",
)


def _host_facts(files: Files, name: str) -> str:
    """A `== name` block of gpu_facts.sh's host-facts.txt (the first recording's form)."""
    return files["host-facts.txt"].split(f"== {name}\n", 1)[1].split("\n== ", 1)[0]


def _smi_driver(files: Files) -> str:
    gpus = parse_nvidia_smi_query_gpu(files["query-gpu.csv"])
    return ", ".join(sorted({g.driver or "?" for g in gpus}))


def _driver(files: Files) -> str:
    smi = _smi_driver(files)
    proc = (
        files["proc-driver-version.txt"]
        if "proc-driver-version.txt" in files
        else _host_facts(files, "driver")
    )
    return f"{smi} (kernel module {parse_proc_driver_version(proc)})"


def _gpus(files: Files) -> str:
    gpus = parse_nvidia_smi_query_gpu(files["query-gpu.csv"])
    names = ", ".join(f"{g.index}: {g.name} {g.memory_total_mib} MiB" for g in gpus)
    return f"{len(gpus)} ({names}); free memory from {memory_source(gpus).value}"


def _image_cuda(files: Files) -> str:
    version = parse_cuda_version_json(files["cuda-version.json"])
    return "absent (no toolkit at /usr/local/cuda)" if version is None else format_cuda(version)


def _users(name: str) -> Callable[[Files], str]:
    def read(files: Files) -> str:
        apps = parse_nvidia_smi_compute_apps(files[name])
        gpus = parse_nvidia_smi_query_gpu(files.get("query-gpu.csv", ""))
        found = [p.found for p in check_foreign_gpu_users(apps, gpus=gpus)]
        holder = json.loads(files.get("summary.json", "{}")).get("holder", {}).get("pid")
        mine = " [the probe's own holder]" if holder in {a.pid for a in apps} else ""
        return "; ".join(found) + mine if found else "none"

    return read


def _cuinit(name: str) -> Callable[[Files], str]:
    def read(files: Files) -> str:
        init = parse_cuda_init(files[name])
        verdict = {True: "ok", False: "FAILS", None: "no verdict"}[init.ok]
        api = format_cuda(init.driver_api) if init.driver_api else "?"
        return f"{verdict}: {init.code} {init.name} (driver API {api})"

    return read


def _compat(files: Files) -> str:
    listing = files.get("compat-ls.txt") or _host_facts(files, "compat")
    compat = parse_ls_compat(listing)
    driver = _smi_driver(files)
    judged = check_compat_libs(driver, compat, on_path=True)
    verdict = "fails (803 expected)" if judged else "passes"
    return f"compat libcuda {compat} beside driver {driver}; on the loader path the judge {verdict}"


def _engine_free(files: Files) -> str:
    facts = parse_torch_facts_json(files["py-facts.json"])
    meminfo = files["meminfo.txt"] if "meminfo.txt" in files else _host_facts(files, "meminfo")
    available = parse_meminfo(meminfo)["MemAvailable"]
    free = facts.mem_get_info[0][0]
    hint = "page-cache hint" if check_page_cache(free, available) else "no page-cache hint"
    gpus = parse_nvidia_smi_query_gpu(files.get("query-gpu.csv", ""))
    if gpus and memory_source(gpus) is MemorySource.DEVICE:
        hint = "page-cache check does not apply (the GPU has its own memory)"
    return f"mem_get_info free {free / GIB:.1f} GiB, MemAvailable {available / GIB:.1f} GiB: {hint}"


def _torchrun(name: str) -> Callable[[Files], str]:
    def read(files: Files) -> str:
        run = parse_torchrun_log(files[name])
        busbw = f"busbw {run.allreduce.busbw_gbps:g} GB/s" if run.allreduce else "no busbw"
        problems = check_rendezvous(run)
        verdict = "rendezvous ok" if not problems else problems[0].found[:140]
        transports = ", ".join(sorted(run.transports)) or "no transport lines"
        return f"exit {run.exit_code}; {transports}; {busbw}; {verdict}"

    return read


_READERS: tuple[tuple[str, Callable[[Files], str]], ...] = (
    ("driver", _driver),
    ("driver CUDA", lambda f: parse_nvidia_smi_table(f["nvidia-smi.txt"]).cuda),
    ("image CUDA", _image_cuda),
    ("GPUs", _gpus),
    ("GPU users, idle", _users("compute-apps-empty.csv")),
    ("GPU users, holder", _users("compute-apps.csv")),
    ("cuInit default", _cuinit("cuinit-default.txt")),
    ("cuInit compat forced", _cuinit("cuinit-compat-forced.txt")),
    ("compat libs", _compat),
    ("engine free memory", _engine_free),
    *((name.removesuffix(".txt"), _torchrun(name)) for name in TORCHRUN_LOGS),
)


def summarize_recording(files: Files) -> list[Row]:
    """One (fact, value) row per reader, in a fixed order."""
    rows = []
    for label, reader in _READERS:
        try:
            value = reader(files)
        except KeyError as e:
            value = f"not recorded ({e.args[0]})"
        except (ValueError, TypeError, IndexError) as e:
            value = f"unreadable: {e}"
        rows.append((label, value))
    return rows
