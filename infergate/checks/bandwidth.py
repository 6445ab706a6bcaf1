"""What each rail carries, node to node: `ib_write_bw` per planned HCA pair where perftest is on
both nodes, else a bounded TCP stream over the fabric addresses. Only a measurement shows a
rail that links at full rate yet carries a fraction of it (docs/checks.md#rail-bandwidth).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from infergate.problems import Problem

# 80 % of NVIDIA's lower figure for two Sparks (docs/checks.md#rail-bandwidth)
IB_DEFAULT_MIN_GBPS = 74.1
# thousands of fabric round trips, far past TCP's slow start
SECONDS = 0.25
# perftest's `-D` takes whole seconds
IB_SECONDS = 1
# the receiver gives up this long after it started, should no sender come
RECEIVER_TTL_S = 20
MARKER = "infergate-bandwidth"

# Counted at the receiver: what crossed the link, not what sat in a send buffer
# (docs/checks.md#rail-bandwidth)
_RECEIVE = """
import os, socket, sys, time
addr, secs, ttl = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = socket.socket()
try:
    s.bind((addr, 0)); s.listen(1)
except OSError as e:
    print("error", e.errno, e.strerror); sys.exit(1)
pid = os.fork()
if pid:
    print("listening", pid, s.getsockname()[1]); sys.exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
s.settimeout(ttl)
try:
    conn = s.accept()[0]
    conn.settimeout(ttl)
    conn.recv(1 << 20)
    start, n = time.monotonic(), 0
    while time.monotonic() - start < secs:
        got = conn.recv(1 << 20)
        if not got:
            break
        n += len(got)
    conn.sendall(("received %d %.6f\\n" % (n, time.monotonic() - start)).encode())
    while conn.recv(1 << 20):
        pass
except OSError:
    pass
"""

# Closed with a reset once answered: what the kernel still holds to send would otherwise
# load the next step's streams (a shaped link's backlog drops their ACKs)
_SEND = """
import select, socket, struct, sys, time
addr, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    s = socket.create_connection((addr, port), timeout=3)
except OSError as e:
    print("error", type(e).__name__, e); sys.exit(0)
s.setblocking(False)
chunk, answer, end = bytes(1 << 20), b"", time.monotonic() + secs + 5
while time.monotonic() < end and not answer.endswith(b"\\n"):
    readable, writable, _ = select.select([s], [s], [], 0.5)
    try:
        if readable:
            got = s.recv(4096)
            if not got:
                break
            answer += got
        elif writable:
            s.send(chunk)
    except BlockingIOError:
        pass
    except OSError as e:
        print("error", type(e).__name__, e); sys.exit(0)
s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
s.close()
print(answer.decode().strip() or "error the receiver answered nothing in %.0f s" % (secs + 5))
"""


def receive_command(address: str, seconds: float = SECONDS, ttl_s: float = RECEIVER_TTL_S) -> str:
    return f"python3 -c {shlex.quote(_RECEIVE)} {address} {seconds} {ttl_s} {MARKER}"


def send_command(address: str, port: int, seconds: float = SECONDS) -> str:
    return f"python3 -c {shlex.quote(_SEND)} {address} {port} {seconds}"


@dataclass(frozen=True)
class Receiver:
    """A receiver listening on PORT as PID, or the `error` its bind gave ("" while listening)."""

    pid: int | None
    port: int | None
    error: str


def parse_receiver(output: str) -> Receiver:
    """`listening PID PORT`, or the bind's `error ERRNO TEXT`."""
    words = output.split()
    if len(words) == 3 and words[0] == "listening" and words[1].isdigit() and words[2].isdigit():
        return Receiver(int(words[1]), int(words[2]), "")
    return Receiver(None, None, " ".join(words)[:200] or "the receiver printed nothing")


@dataclass(frozen=True)
class Rail:
    """One measured path from a node (its HCA, or its fabric address) to a peer's; `gbps` is
    None where the tool gave no figure, and `said` is then what it said instead.

    Sample paths: ``10.252.0.11 -> 10.252.0.12 (TCP)``, ``rocep1s0f1 -> rocep1s0f1 (ib_write_bw)``
    """

    sender: str
    receiver: str
    path: str
    gbps: float | None
    said: str


def parse_tcp_answer(output: str) -> tuple[float | None, str]:
    """The sender's `received BYTES SECONDS` as Gb/s, or None and what it said instead."""
    words = output.split()
    if len(words) == 3 and words[0] == "received":
        seconds = float(words[2])
        return (int(words[1]) * 8 / seconds / 1e9 if seconds > 0 else 0.0), ""
    return None, " ".join(words)[:200] or "the sender printed nothing"


def ib_write_bw_server(device: str, port: int, seconds: int = IB_SECONDS) -> str:
    """The server side, as NVIDIA's playbook runs it; it ends with the client's run."""
    return shlex.join(
        ["ib_write_bw", "-d", device, "-p", str(port), "-D", str(seconds), "-F", "--report_gbits"]
    )


def ib_write_bw_detached(device: str, port: int, ttl_s: float = RECEIVER_TTL_S) -> str:
    """The server in the background, bounded by `timeout`, printing that timeout's pid (which
    passes a kill on to ib_write_bw)."""
    server = ib_write_bw_server(device, port)
    return f"nohup timeout {ttl_s:g} {server} >/dev/null 2>&1 </dev/null & echo $!"


def ib_write_bw_client(device: str, port: int, server: str, seconds: int = IB_SECONDS) -> str:
    return f"{ib_write_bw_server(device, port, seconds)} {shlex.quote(server)}"


_IB_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(\w+)/sec\]\s+BW average\[(\w+)/sec\]")


def parse_ib_write_bw(output: str) -> tuple[float | None, str]:
    """The BW average of `ib_write_bw --report_gbits` in Gb/s, from the line after its header:

    `` #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]``
    `` 65536      1056000          0.00               92.57              0.176573``
    """
    lines = output.splitlines()
    for i, line in enumerate(lines):
        header = _IB_HEADER.search(line)
        if not header:
            continue
        if header[2] != "Gb":
            return None, f"ib_write_bw reported {header[2]}/sec, not Gb/sec (--report_gbits)"
        fields = lines[i + 1].split() if i + 1 < len(lines) else []
        if len(fields) >= 4:
            return float(fields[3]), ""
    said = [line.strip() for line in lines if line.strip()]
    return None, (said[-1] if said else "ib_write_bw printed nothing")[:200]


# strerror(ENETUNREACH): said by the sender's own kernel, which has no route
UNREACHABLE = "Network is unreachable"


def check_rails(rails: list[Rail], min_gbps: float, key: str) -> dict[str, list[Problem]]:
    """The rails below MIN_GBPS, each cause once: the whole fabric, a node whose every stream
    one way failed, else a pair and its direction (docs/checks.md#rail-bandwidth)."""
    planned = f"at least {min_gbps:g} Gb/s per rail ({key})"
    failed = [r for r in rails if r.gbps is None or r.gbps < min_gbps]
    names = list(dict.fromkeys(n for r in rails for n in (r.sender, r.receiver)))
    if not failed:
        return {}
    if len(names) >= 3 and len(failed) == len(rails):
        return {names[0]: [_every_stream(failed, names, planned, key)]}
    problems: dict[str, list[Problem]] = {}
    explained: set[Rail] = set()
    for node, sends, receives in _nodes_to_blame(rails, set(failed), names):
        explained.update(sends, receives)
        problems.setdefault(node, []).append(_node(node, sends, receives, planned))
    for rail in failed:
        if rail in explained:
            continue
        if rail.gbps is None and UNREACHABLE in rail.said:
            problems.setdefault(rail.sender, []).append(_no_route(rail, planned))
        elif rail.gbps is None:
            problems.setdefault(rail.receiver, []).append(_no_stream(rail, planned))
        else:
            problems.setdefault(rail.sender, []).append(_slow(rail, rails, min_gbps, planned))
    return problems


def _nodes_to_blame(
    rails: list[Rail], failed: set[Rail], names: list[str]
) -> list[tuple[str, list[Rail], list[Rail]]]:
    """Each node whose every stream one way (two peers at least) failed, with those streams,
    most streams first: a stream one node explains counts for no other."""
    blamed: list[tuple[str, list[Rail], list[Rail]]] = []
    taken: set[Rail] = set()

    def all_failed(streams: list[Rail]) -> list[Rail]:
        streams = [r for r in streams if r not in taken]
        return streams if len(streams) >= 2 and failed.issuperset(streams) else []

    while True:
        found = []
        for node in names:
            if node not in (b[0] for b in blamed):
                sends = all_failed([r for r in rails if r.sender == node])
                receives = all_failed([r for r in rails if r.receiver == node])
                found += [(node, sends, receives)] if sends or receives else []
        if not found:
            return blamed
        best = max(found, key=lambda f: len(f[1]) + len(f[2]))  # the first of equals
        blamed.append(best)
        taken.update(best[1], best[2])


def _figure(rail: Rail, peer: str) -> str:
    return f"{peer} {rail.gbps:.2f} Gb/s" if rail.gbps is not None else f"{peer}: {rail.said}"


def _every_stream(failed: list[Rail], names: list[str], planned: str, key: str) -> Problem:
    figures = sorted(r.gbps for r in failed if r.gbps is not None)
    carried = f", carried {figures[0]:.2f} to {figures[-1]:.2f} Gb/s" if figures else ""
    unmeasured = len(failed) - len(figures)
    said = f", {unmeasured} with no figure ({failed[0].said})" if unmeasured else ""
    return Problem(
        found=f"every one of the {len(failed)} streams between the {len(names)} nodes fell "
        f"short{carried}{said}",
        planned=planned,
        remedy="what every node shares, not one node: the switch and its ports' speed, the "
        f"fabric's VLAN and MTU, a firewall rule on every node; or {key} above what this "
        "fabric carries",
    )


def _node(node: str, sends: list[Rail], receives: list[Rail], planned: str) -> Problem:
    ways = []
    if sends:
        ways.append(f"to every peer: {', '.join(_figure(r, r.receiver) for r in sends)}")
    if receives:
        ways.append(f"from every peer: {', '.join(_figure(r, r.sender) for r in receives)}")
    found = f"{node}'s streams fell short {' and '.join(ways)}"
    if sends and all(r.gbps is None and UNREACHABLE in r.said for r in sends):
        remedy = f"bring {node}'s fabric interface up with its address: `ip -br addr` on {node}"
    elif receives and not sends and all(r.gbps is None for r in receives):
        remedy = (
            f"let every peer reach {node}'s ephemeral ports over the fabric: `iptables -S` and "
            f"`nft list ruleset` on {node}; the ports-after-rendezvous test quotes the rule"
        )
    else:
        side = "link" if sends and receives else "egress" if sends else "ingress"
        remedy = (
            f"the cause is {node}'s {side}, not its peers': on {node}, `tc qdisc show` (a "
            "shaper on the fabric interface), `ethtool` (the speed it linked at), `ethtool -S` "
            f"(drops, pause frames) and the HCA's PCIe link; {CX7_SLOW}"
        )
    return Problem(found=found, planned=planned, remedy=remedy)


def _no_route(rail: Rail, planned: str) -> Problem:
    return Problem(
        found=f"no stream from {rail.sender} to {rail.receiver} over {rail.path}: {rail.said}",
        planned=planned,
        remedy=f"bring {rail.sender}'s fabric interface up with its address: `ip -br addr` and "
        f"`ip route get` of {rail.receiver}'s fabric address on {rail.sender}",
    )


def _no_stream(rail: Rail, planned: str) -> Problem:
    return Problem(
        found=f"no stream from {rail.sender} to {rail.receiver} over {rail.path}: {rail.said}",
        planned=planned,
        remedy=f"let {rail.sender} reach {rail.receiver}'s ephemeral ports over the fabric: "
        f"`iptables -S` and `nft list ruleset` on {rail.receiver} (a firewall that lets only "
        f"the dist-init port in), `ip route get` of {rail.receiver}'s fabric address on "
        f"{rail.sender}; the ports-after-rendezvous test quotes the rule it finds",
    )


# a link that trains at full rate yet carries a fraction of it after a bad init
CX7_SLOW = (
    "a ConnectX-7 that links at 200G yet carries ~13 Gb/s recovers only with a reboot "
    "(NVIDIA/dgx-spark-playbooks PR #108)"
)


def _slow(rail: Rail, rails: list[Rail], min_gbps: float, planned: str) -> Problem:
    """One direction of one pair: the reverse's figure, and whether both ends carried the
    floor with every other peer (then the path between the two is what is left)."""
    back = next((r for r in rails if (r.sender, r.receiver) == (rail.receiver, rail.sender)), None)
    reverse = f"; {back.sender} -> {back.receiver} {_carried(back)}" if back else ""
    others = [r for r in rails if {rail.sender, rail.receiver} & {r.sender, r.receiver}]
    others = [r for r in others if r is not rail and r is not back]
    alone = bool(others) and all(r.gbps is not None and r.gbps >= min_gbps for r in others)
    ends = f"{rail.sender} and {rail.receiver}"
    where = (
        f"only this pair, this way: both carry the floor with every other peer, so look "
        f"between them: a shaper for this peer alone (`tc filter show` on {rail.sender}'s "
        f"fabric interface), the switch ports and the cable between {ends}"
        if alone
        else f"on {ends}: `tc qdisc show` (a shaper left on the interface), `ethtool -S` for "
        f"drops and pause frames, and the PCIe link of the HCA; {CX7_SLOW}"
    )
    return Problem(
        found=f"{rail.sender} -> {rail.receiver} over {rail.path} {_carried(rail)}{reverse}",
        planned=planned,
        remedy=where,
    )


def _carried(rail: Rail) -> str:
    return f"carried {rail.gbps:.2f} Gb/s" if rail.gbps is not None else f"gave {rail.said}"
