"""`python -m infergate_lab up|down|status|fault|engine ...`: the lab from a shell."""

from __future__ import annotations

import argparse
import os
import sys
import time

from infergate_lab import engine
from infergate_lab import layout as L
from infergate_lab.engine_isa import measured_line
from infergate_lab.faults import KINDS
from infergate_lab.lab import Lab, mode_words
from infergate_lab.shell import LabError
from infergate_lab.status import table


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m infergate_lab", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="make the lab, or bring it to N nodes (idempotent)")
    nodes_help = f"1..{L.MAX_NODES}; 1..{L.MAX_SSHD_ONLY_NODES} with --sshd-only"
    up.add_argument("-n", "--nodes", type=int, default=L.DEFAULT_NODES, help=nodes_help)
    up.add_argument(
        "--sshd-only",
        action="store_true",
        help="no dockerd on the nodes (stopped where it ran): enough for the host-level "
        "checks; `up` without it brings Docker back",
    )
    up.add_argument("--node-mem-gib", type=float, default=L.DEFAULT_NODE_MEM_GIB)
    sub.add_parser("down", help="remove everything the lab made")
    sub.add_parser("status", help="per node health; exit 1 unless all healthy")
    eng = sub.add_parser("engine", help="the engine image and the models on every node")
    eng.add_argument(
        "--kind",
        choices=("vllm", "sglang"),
        default="vllm",
        dest="engine_kind",
        help="sglang: the SGLang CPU image only (the vllm kind makes the models)",
    )
    eng.add_argument("--nodes", help="comma-separated node names (default: every lab node)")
    eng.add_argument("--no-models", action="store_true", help="the image only")
    eng.add_argument("--smoke", action="store_true", help="then serve SmolLM2 on the first")
    fault = sub.add_parser("fault", help="inject a fault, or clear them all")
    kinds = fault.add_subparsers(dest="kind", required=True)
    kinds.add_parser("clear", help="undo every injected fault")
    for kind in KINDS.values():
        k = kinds.add_parser(kind.name, help=kind.help)
        k.add_argument("node", help="node1..node16")
        for arg in kind.args:
            k.add_argument(arg.lower(), metavar=arg)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command != "status" and os.geteuid() != 0:
        print("lab: making and changing the lab needs root", file=sys.stderr)
        return 1
    lab = Lab(say=print)
    started = time.monotonic()
    try:
        if args.command == "up":
            lab.up(args.nodes, args.node_mem_gib, docker=not args.sshd_only)
        elif args.command == "down":
            lab.down()
        elif args.command == "status":
            return _status(lab)
        elif args.command == "engine":
            nodes = args.nodes.split(",") if args.nodes else None
            if args.engine_kind == "sglang":
                return engine.main_sglang(lab, nodes)
            return engine.main(lab, nodes, not args.no_models, args.smoke)
        elif args.kind == "clear":
            cleared = lab.clear_faults()
            print(f"cleared {len(cleared)} fault(s)")
        else:
            values = [getattr(args, a.lower()) for a in KINDS[args.kind].args]
            lab.apply_fault(args.kind, args.node, *values)
            print(f"{args.node}: {args.kind} {' '.join(values)}".rstrip())
    except LabError as e:
        print(f"lab: {e}", file=sys.stderr)
        return 1
    if args.command in ("up", "down"):
        print(f"took {time.monotonic() - started:.1f} s")
    return 0


def _status(lab: Lab) -> int:
    statuses = lab.status()
    if not statuses:
        print("no lab on this machine")
        return 1
    print(f"mode: {mode_words(lab.runs_docker() is not False)}")
    print(table(statuses))
    print(measured_line())
    return 0 if all(s.healthy for s in statuses) else 1


if __name__ == "__main__":
    sys.exit(main())
