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

_SEND = """
import select, socket, sys, time
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
    """Each rail below MIN_GBPS is a problem of its sending node; one that gave no figure, of
    its receiving node (a port there a peer cannot reach), unless the sender has no route
    (docs/checks.md#rail-bandwidth)."""
    problems: dict[str, list[Problem]] = {}
    for rail in rails:
        if rail.gbps is not None and rail.gbps >= min_gbps:
            continue
        if rail.gbps is None and UNREACHABLE in rail.said:
            problems.setdefault(rail.sender, []).append(_no_route(rail, min_gbps, key))
        elif rail.gbps is None:
            problems.setdefault(rail.receiver, []).append(_no_stream(rail, min_gbps, key))
        else:
            problems.setdefault(rail.sender, []).append(_slow(rail, min_gbps, key))
    return problems


def _no_route(rail: Rail, min_gbps: float, key: str) -> Problem:
    return Problem(
        found=f"no stream from {rail.sender} to {rail.receiver} over {rail.path}: {rail.said}",
        planned=f"at least {min_gbps:g} Gb/s per rail ({key})",
        remedy=f"bring {rail.sender}'s fabric interface up with its address: `ip -br addr` and "
        f"`ip route get` of {rail.receiver}'s fabric address on {rail.sender}",
    )


def _no_stream(rail: Rail, min_gbps: float, key: str) -> Problem:
    return Problem(
        found=f"no stream from {rail.sender} to {rail.receiver} over {rail.path}: {rail.said}",
        planned=f"at least {min_gbps:g} Gb/s per rail ({key})",
        remedy=f"let {rail.sender} reach {rail.receiver}'s ephemeral ports over the fabric: "
        f"`iptables -S` and `nft list ruleset` on {rail.receiver} (a firewall that lets only "
        f"the dist-init port in), `ip route get` of {rail.receiver}'s fabric address on "
        f"{rail.sender}; the ports-after-rendezvous test quotes the rule it finds",
    )


def _slow(rail: Rail, min_gbps: float, key: str) -> Problem:
    carried = f"carried {rail.gbps:.2f} Gb/s" if rail.gbps is not None else f"gave {rail.said}"
    return Problem(
        found=f"{rail.sender} -> {rail.receiver} over {rail.path} {carried}",
        planned=f"at least {min_gbps:g} Gb/s per rail ({key})",
        remedy=f"on {rail.sender} and {rail.receiver}: `tc qdisc show` (a shaper left on the "
        "interface), `ethtool -S` for drops and pause frames, and the PCIe link of the HCA; a "
        "ConnectX-7 that links at 200G yet carries ~13 Gb/s recovers only with a reboot "
        "(NVIDIA/dgx-spark-playbooks PR #108)",
    )
