"""TCP across the fabric: a temporary listener on the head's dist-init port, dialled by peers.

This is the path torch.distributed's TCPStore (vLLM `--master-port`, SGLang
`--dist-init-addr`) takes first; a firewall or a taken port there is a silent hang later.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from infergate.inventory import plan_key
from infergate.problems import Problem

API_KEY, DIST_INIT_KEY = plan_key("engine.api_port"), plan_key("engine.dist_init_port")

MARKER = "infergate-listener"

# Binds, then forks: the parent reports and exits so SSH returns, the child accepts until
# its deadline. The marker in argv lets the clean-up kill only this process. Each accepted
# connection is closed after the dialler closed it: the side that closes first keeps it in
# TIME_WAIT, and that side should not be the head's dist-init port.
_LISTEN = """
import os, socket, sys, time
port, ttl = int(sys.argv[1]), float(sys.argv[2])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", port)); s.listen(64)
except OSError as e:
    print("error", e.errno, e.strerror); sys.exit(1)
pid = os.fork()
if pid:
    print("listening", pid); sys.exit(0)
os.setsid()
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
s.settimeout(0.5)
end = time.monotonic() + ttl
while time.monotonic() < end:
    try:
        conn = s.accept()[0]
        conn.settimeout(2)
        conn.recv(1)
        conn.close()
    except OSError:
        pass
"""

_DIAL = """
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("ok", round((time.monotonic() - t) * 1000, 1))
except OSError as e:
    print("error", type(e).__name__, e)
"""


def listen_command(port: int, ttl_s: float) -> str:
    return f"python3 -c {shlex.quote(_LISTEN)} {port} {ttl_s} {MARKER}"


def dial_command(address: str, port: int, timeout_s: float) -> str:
    return f"python3 -c {shlex.quote(_DIAL)} {address} {port} {timeout_s}"


def stop_listener_command(pid: int) -> str:
    """Kill the listener only if that pid is still ours (never a recycled pid)."""
    return f"grep -q {MARKER} /proc/{pid}/cmdline 2>/dev/null && kill {pid} || true"


@dataclass(frozen=True)
class Listener:
    pid: int | None
    error: str  # empty when listening


def parse_listener(text: str) -> Listener:
    """Parse the listener's report: ``listening 4242`` or ``error 98 Address already in use``."""
    words = text.split()
    if words[:1] == ["listening"] and len(words) > 1 and words[1].isdigit():
        return Listener(int(words[1]), "")
    return Listener(None, " ".join(words[1:]) if words[:1] == ["error"] else text.strip())


def check_listener(listener: Listener, port: int) -> list[Problem]:
    if listener.pid is not None:
        return []
    return [
        Problem(
            found=f"cannot listen on TCP {port}: {listener.error or '(no answer)'}",
            planned=f"TCP {port} free for the engine's dist-init rendezvous",
            remedy=f"`ss -ltnp 'sport = :{port}'` shows who holds it: stop that process, "
            f"or change {DIST_INIT_KEY} in the plan",
        )
    ]


def check_dial(text: str, address: str, port: int) -> list[Problem]:
    """Parse the dialler's report (``ok 0.4`` or ``error ConnectionRefusedError ...``) and judge."""
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
    address: str
    port: int
    process: str  # `users:(("sshd",pid=7,fd=3))` when ss may show it, else ""


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


def check_ports_free(listening: list[Listening], planned: dict[int, str]) -> list[Problem]:
    """The ports the engine will bind on this node are free (`planned`: port -> what for)."""
    first = {s.port: s for s in reversed(listening)}  # one socket per port (IPv4 and IPv6 alike)
    return [
        Problem(
            found=f"TCP {s.port} ({planned[s.port]}) already taken on {s.address}"
            + (f" by {s.process}" if s.process else ""),
            planned=f"TCP {s.port} free for the engine's {planned[s.port]}",
            remedy=_free_port(s),
        )
        for s in sorted(first.values(), key=lambda s: s.port)
        if s.port in planned
    ]


_USER = re.compile(r'\("([^"]+)",pid=(\d+)')
_MOVE = f"or move the port in the plan ({API_KEY} / {DIST_INIT_KEY})"


def _free_port(s: Listening) -> str:
    """Name the holder ss showed: a container's published port (docker-proxy) is freed by
    stopping the container, not the proxy; anything else by its pid."""
    holders = _USER.findall(s.process)
    if not holders:
        return f"`sudo ss -ltnp 'sport = :{s.port}'` names the process: stop it, {_MOVE}"
    name, pid = holders[0]
    if name == "docker-proxy":
        return (
            f"a container publishes it: `docker ps --filter publish={s.port}`, then "
            f"`docker stop <that container>`, {_MOVE}"
        )
    return (
        f"{name} (pid {pid}) holds it: see it with `ps -o pid,user,etime,args -p {pid}`, "
        f"stop it (`kill {pid}`), {_MOVE}"
    )
