"""TCP across the fabric: temporary listeners, dialled by peers, and the ports a node holds.

The head's dist-init port is the path torch.distributed's TCPStore (vLLM `--master-port`,
SGLang `--dist-init-addr`) takes first; a firewall or a taken port there is a silent hang
later. The same listener samples the ports used after the rendezvous (checks/firewall.py).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from infergate.engines.ports import Bound
from infergate.plan.model import plan_key
from infergate.problems import Problem

DIST_INIT_KEY = plan_key("engine.dist_init_port")

MARKER = "infergate-listener"

# Binds every port it can and forks so SSH returns; the child accepts until each port had one
# dial per peer, or its deadline (docs/checks.md#tcp-listeners)
_LISTEN = """
import os, select, socket, sys, time
ports, ttl = [int(p) for p in sys.argv[1].split(",")], float(sys.argv[2])
expect, socks = int(sys.argv[3]), []
for port in ports:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port)); s.listen(64); socks.append(s)
    except OSError as e:
        print("error", port, e.errno, e.strerror); s.close()
if not socks:
    sys.exit(1)
pid = os.fork()
if pid:
    print("listening", pid, ",".join(str(s.getsockname()[1]) for s in socks)); sys.exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
end, dials = time.monotonic() + ttl, dict.fromkeys(socks, 0)
while time.monotonic() < end and min(dials.values()) < expect:
    for s in select.select(socks, [], [], 0.5)[0]:
        try:
            conn = s.accept()[0]
            dials[s] += 1
            conn.settimeout(2)
            conn.recv(1)
            conn.close()
        except OSError:
            pass
"""

# Dials every ADDRESS:PORT at once, one thread each: the whole costs one timeout, not one
# per target. One line per target: `10.0.0.1:29501 ok 0.4` or `... error TimeoutError ...`
_DIAL = """
import socket, sys, threading, time
said = {}
def dial(target):
    address, port = target.rsplit(":", 1)
    t = time.monotonic()
    try:
        socket.create_connection((address, int(port)), timeout=float(sys.argv[2])).close()
        said[target] = f"ok {round((time.monotonic() - t) * 1000, 1)}"
    except OSError as e:
        said[target] = f"error {type(e).__name__} {e}"
threads = [threading.Thread(target=dial, args=(t,)) for t in sys.argv[1].split(",")]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("\\n".join(f"{t} {s}" for t, s in said.items()))
"""


def listen_command(ports: list[int], ttl_s: float, dials: int) -> str:
    """Listen on PORTS until each had DIALS connections, or TTL_S."""
    joined = ",".join(map(str, ports))
    return f"python3 -c {shlex.quote(_LISTEN)} {joined} {ttl_s} {dials} {MARKER}"


def dial_command(targets: list[tuple[str, int]], timeout_s: float) -> str:
    joined = ",".join(f"{address}:{port}" for address, port in targets)
    return f"python3 -c {shlex.quote(_DIAL)} {joined} {timeout_s}"


def parse_dials(text: str) -> dict[tuple[str, int], str]:
    """The dialler's report per target: `ok 0.4` or `error TimeoutError timed out`."""
    results = {}
    for line in text.splitlines():
        target, _, said = line.partition(" ")
        address, _, port = target.rpartition(":")
        if port.isdigit():
            results[(address, int(port))] = said
    return results


def stop_listener_command(pid: int, marker: str = MARKER) -> str:
    """Kill a process the suite started on a node (a listener, a rail's receiver or
    ib_write_bw server) only if that pid is still ours: its argv holds MARKER (never a
    recycled pid)."""
    return f"grep -q {marker} /proc/{pid}/cmdline 2>/dev/null && kill {pid} || true"


@dataclass(frozen=True)
class Listener:
    """The listener's `pid` (None: it listens on no port), the `ports` it listens on, why it
    `refused` each other (`98 Address already in use`), and all else it `said` (a traceback)."""

    pid: int | None
    ports: tuple[int, ...]
    refused: dict[int, str]
    said: str = ""


def parse_listener(text: str) -> Listener:
    """Parse the listener's report: ``error 8000 98 Address already in use`` for each port it
    could not bind, then ``listening 4242 29501,33000`` when it binds any."""
    pid, ports, refused, other = None, tuple[int, ...](), {}, []
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["listening"] and len(words) == 3 and words[1].isdigit():
            pid, ports = int(words[1]), tuple(int(p) for p in words[2].split(","))
        elif words[:1] == ["error"] and len(words) > 2 and words[1].isdigit():
            refused[int(words[1])] = " ".join(words[2:])
        elif words:
            other.append(line.strip())
    return Listener(pid, ports, refused, " ".join(other))


def check_listener(listener: Listener, port: int) -> list[Problem]:
    if port in listener.ports:
        return []
    error = listener.refused.get(port) or listener.said or "(no answer)"
    return [
        Problem(
            found=f"cannot listen on TCP {port}: {error}",
            planned=f"TCP {port} free for the engine's dist-init rendezvous",
            remedy=f"`ss -ltnp 'sport = :{port}'` shows who holds it: stop that process, "
            f"or change {DIST_INIT_KEY} in the plan",
        )
    ]


def check_dial(text: str, address: str, port: int) -> list[Problem]:
    """Judge one target's report (``ok 0.4`` or ``error ConnectionRefusedError ...``)."""
    if text.startswith("ok"):
        return []
    return [
        Problem(
            found=f"TCP to {address}:{port} failed: {text.strip() or '(no answer)'}",
            planned=f"TCP {address}:{port} reachable over the fabric",
            remedy=f"check firewalls on both ends (`sudo iptables -S`, `sudo nft list ruleset`, "
            f"`ufw status`) and the route: `{shlex.join(['ip', 'route', 'get', address])}`",
        )
    ]


@dataclass(frozen=True)
class Listening:
    """A listening TCP socket; `process` is ss's `users:(("sshd",pid=7,fd=3))`, where ss may
    show it, else ""."""

    address: str
    port: int
    process: str


def parse_ss_listening(text: str) -> list[Listening]:
    """Parse `ss -Htlnp` (listening TCP sockets, no header).

    Sample line: ``LISTEN 0 128 0.0.0.0:22 0.0.0.0:* users:(("sshd",pid=812,fd=3))``
    """
    sockets = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] == "LISTEN":
            address, _, port = parts[3].rpartition(":")
            if port.isdigit():
                sockets.append(Listening(address, int(port), " ".join(parts[5:])))
    return sockets


def check_ports_free(listening: list[Listening], planned: Mapping[int, Bound]) -> list[Problem]:
    """The ports the engine will bind on this node (Engine.planned_ports) are free."""
    first = {s.port: s for s in reversed(listening)}  # one socket per port (IPv4 and IPv6 alike)
    return [
        Problem(
            found=f"TCP {s.port} ({planned[s.port].what}) already taken on {s.address}"
            + (f" by {s.process}" if s.process else ""),
            planned=f"TCP {s.port} free for the engine's {planned[s.port].what}",
            remedy=_free_port(s, _move(planned[s.port].key)),
        )
        for s in sorted(first.values(), key=lambda s: s.port)
        if s.port in planned
    ]


_USER = re.compile(r'\("([^"]+)",pid=(\d+)')


def _move(key: str) -> str:
    if key:
        return f", or move the port in the plan ({key})"
    return " (the engine binds it by default: it must be free)"


def _free_port(s: Listening, move: str) -> str:
    """Name the holder ss showed: a container's published port (docker-proxy) is freed by
    stopping the container, not the proxy; anything else by its pid."""
    holders = _USER.findall(s.process)
    if not holders:
        return f"`sudo ss -ltnp 'sport = :{s.port}'` names the process: stop it{move}"
    name, pid = holders[0]
    if name == "docker-proxy":
        return (
            f"a container publishes it: `docker ps --filter publish={s.port}`, then "
            f"`docker stop <that container>`{move}"
        )
    return (
        f"{name} (pid {pid}) holds it: see it with `ps -o pid,user,etime,args -p {pid}`, "
        f"stop it (`kill {pid}`){move}"
    )
