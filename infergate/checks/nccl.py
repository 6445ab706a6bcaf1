"""The rendezvous smoke: a torch.distributed all-reduce (NCCL or Gloo) under a deadline, read
from its output: did every rank join, over which transport, at what bus bandwidth, and if
not, which failure signature names the variable to fix (the sanity script of
https://docs.vllm.ai/en/latest/usage/troubleshooting/; NVIDIA/dgx-spark-playbooks#102).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from infergate.engines.signatures import RENDEZVOUS, Signature, named, signatures_for
from infergate.plan.model import plan_key
from infergate.problems import Problem

# `timeout`'s exit status, also what gpu_probe.py records on its deadline
EXIT_TIMED_OUT = 124


@dataclass(frozen=True)
class AllReduce:
    """One all-reduce timed as nccl-tests reports it: busbw is algbw * 2(n-1)/n."""

    world: int
    nbytes: int
    time_ms: float
    algbw_gbps: float
    busbw_gbps: float


@dataclass(frozen=True)
class Failure:
    """The first line of a failure, and its signature's name (infergate.engines.signatures)."""

    kind: str
    line: str


@dataclass(frozen=True)
class DistRun:
    """What a torchrun log says: its transports ("NET/IB/GDRDMA"), all-reduce, failures, the
    `exit=N` the recorders append (None: not recorded), the ranks ok, the NCCL variables set
    by environment, "NET/IB : No device found", and the last lines, for the message."""

    transports: frozenset[str]
    allreduce: AllReduce | None
    failures: tuple[Failure, ...]
    exit_code: int | None
    ranks_ok: frozenset[int]
    nccl_env: dict[str, str]
    ib_no_device: bool
    tail: tuple[str, ...]


_VIA = re.compile(r"\svia (\S+)")
_ALLREDUCE = re.compile(
    r"world=(\d+) bytes=(\d+) time_ms=([\d.]+) algbw_GBps=([\d.]+) busbw_GBps=([\d.]+)"
)
_ENV = re.compile(r"NCCL INFO (\w+) set by environment to (\S+?)\.?$")
# a signature's key under it names a variable NCCL reports setting
_ENV_KEY = "engine.env."
FLOOR_KEY = plan_key("thresholds.nccl_busbw_min_gbytes_per_sec")
_JOINED = "every rank joins and the all-reduce completes, exit 0"


def _transport(via: str) -> str:
    """``NET/IB/0/GDRDMA`` -> ``NET/IB/GDRDMA``, ``NET/Socket/0`` -> ``NET/Socket``."""
    return "/".join(p for p in via.split("/") if not re.fullmatch(r"\d+(\(\d+\))?", p))


def parse_torchrun_log(text: str) -> DistRun:
    """Parse the output of `torchrun --nproc-per-node N worker.py` (all ranks, stdout and
    stderr together, NCCL_DEBUG=INFO where transports matter), as gpu_probe.py records it.

    Sample lines: ``vm:781:781 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via
    NET/Socket/0``; ``world=2 bytes=1073741824 time_ms=3.32 algbw_GBps=323.8
    busbw_GBps=323.8``; ``exit=1``
    """
    lines = text.splitlines()
    exits = re.findall(r"^exit=(\d+)\s*$", text, re.MULTILINE)
    return DistRun(
        transports=frozenset(_transport(m) for m in _VIA.findall(text)),
        allreduce=_allreduce(text),
        failures=failures_in(lines),
        exit_code=int(exits[-1]) if exits else None,
        ranks_ok=frozenset(int(r) for r in re.findall(r"rank(\d+) ok", text)),
        nccl_env={m[1]: m[2] for m in map(_ENV.search, lines) if m},
        ib_no_device="NET/IB : No device found" in text,
        tail=tuple(line for line in lines if line.strip())[-8:],
    )


def _allreduce(text: str) -> AllReduce | None:
    match = _ALLREDUCE.search(text)
    if match is None:
        return None
    world, nbytes, *rates = match.groups()
    return AllReduce(int(world), int(nbytes), *map(float, rates))


def failures_in(lines: list[str]) -> tuple[Failure, ...]:
    """The first line of each rendezvous failure signature in LINES, most specific first."""
    found: dict[str, Failure] = {}
    for line in lines:
        for signature in signatures_for(RENDEZVOUS):
            if signature.name not in found and signature.search(line):
                found[signature.name] = Failure(signature.name, line.strip())
    return tuple(found.values())


def check_rendezvous(run: DistRun, planned: str = _JOINED) -> list[Problem]:
    """Every rank joined and the collective completed (exit 0); if not, the failure signature
    found in the output says why and names the variable to fix."""
    if run.exit_code == 0 or (run.exit_code is None and (run.allreduce or run.ranks_ok)):
        return []
    causes = _causes(run.failures)
    if causes:
        return [_failure_problem(f, cause, run, planned) for f, cause in causes]
    timed_out = run.exit_code == EXIT_TIMED_OUT
    ended = "timed out" if timed_out else f"exit {run.exit_code}"
    cause = named("rank-missing" if timed_out else "nccl-error")
    return [Problem(f"{ended}: " + " | ".join(run.tail[-3:]), planned, cause.remedy)]


def _failure_problem(failure: Failure, cause: Signature, run: DistRun, planned: str) -> Problem:
    variable = next((k.removeprefix(_ENV_KEY) for k in cause.keys if k.startswith(_ENV_KEY)), "")
    value = run.nccl_env.get(variable)
    setting = f" with {variable}={value}" if value else ""
    return Problem(
        found=f"rendezvous failed{setting}: {cause.meaning}: {failure.line[:300]}",
        planned=planned,
        remedy=cause.remedy,
    )


def _causes(failures: tuple[Failure, ...]) -> list[tuple[Failure, Signature]]:
    """Each failure with its signature; the generic ones only where no specific one was seen."""
    found = [(f, named(f.kind)) for f in failures]
    return [c for c in found if not c[1].generic] or found


def remedy_for(lines: list[str]) -> str:
    """What to do about a rendezvous that failed with LINES: the most specific signature's
    remedy, or, with none, the one for a rank that never joined."""
    causes = _causes(failures_in(lines))
    return causes[0][1].remedy if causes else named("rank-missing").remedy


def transport_kind(transport: str) -> str:
    """``NET/IB/GDRDMA`` and ``NET/IBext_v8/GDRDMA`` -> ``NET/IB``; ``P2P/CUMEM`` -> ``P2P``."""
    parts = transport.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "NET/IB" if parts[1].startswith("IB") else f"NET/{parts[1]}"
    return parts[0]


def check_nccl_transport(run: DistRun, expected: str) -> list[Problem]:
    """NCCL carried the all-reduce over the planned transport: "NET/IB" where the plan says
    RDMA (NET/Socket then means RDMA was not used), "P2P" or "SHM" within one node."""
    kinds = {transport_kind(t) for t in run.transports}
    if expected in kinds and not (expected == "NET/IB" and "NET/Socket" in kinds):
        return []
    if not kinds:
        found = "no `via` lines in the NCCL log"
        remedy = "run the smoke with NCCL_DEBUG=INFO so NCCL names its transports"
    else:
        found = "NCCL used " + ", ".join(sorted(run.transports))
        found += " (NET/IB : No device found)" if run.ib_no_device else ""
        remedy = _TRANSPORT_REMEDY.get(expected, f"check why NCCL did not pick {expected}")
    return [Problem(found=found, planned=f"{expected} between the ranks", remedy=remedy)]


_TRANSPORT_REMEDY = {
    "NET/IB": "RDMA was not used: set NCCL_IB_HCA to the fabric HCAs (`ibdev2netdev`; on a "
    "DGX Spark list both twins of the port), unset NCCL_IB_DISABLE, give the container "
    "`--device /dev/infiniband` (or --privileged) and `--ulimit memlock=-1`, and check "
    "`ibv_devinfo` shows PORT_ACTIVE",
    "P2P": "GPU peer access was not used: unset NCCL_P2P_DISABLE and check "
    "`nvidia-smi topo -m` (NV# or PIX between the GPUs)",
}


def check_nccl_bandwidth(allreduce: AllReduce | None, floor_gbytes_per_sec: float) -> list[Problem]:
    """The all-reduce bus bandwidth reaches the planned floor (nccl-tests' busbw; a 200G
    RoCE port gives ~24 GB/s, https://github.com/NVIDIA/nccl-tests/issues/119; ~3 GB/s is the
    misconfigured signature, https://github.com/NVIDIA/dgx-spark-playbooks/issues/102)."""
    if allreduce is not None and allreduce.busbw_gbps >= floor_gbytes_per_sec:
        return []
    if allreduce is None:
        found = "no bandwidth line: the all-reduce did not complete"
    else:
        found = (
            f"all-reduce busbw {allreduce.busbw_gbps:g} GB/s "
            f"({allreduce.nbytes / 2**20:.0f} MiB in {allreduce.time_ms:g} ms, "
            f"{allreduce.world} ranks)"
        )
    return [
        Problem(
            found=found,
            planned=f"at least {floor_gbytes_per_sec:g} GB/s ({FLOOR_KEY})",
            remedy=BANDWIDTH_REMEDY,
        )
    ]


BANDWIDTH_REMEDY = (
    "check the transport first (NET/IB expected across nodes; NET/Socket means RDMA is off), "
    "then NCCL_IB_HCA lists every HCA of the port, equal MTU on both ends, and `ib_write_bw` "
    "per HCA pair"
)
