"""Where every lab thing lives: names, addresses and paths, fixed so inventories can name them.

Pure: nothing here touches the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# With Docker, each node runs a dockerd and its containerd (about 100 MB and a share of the
# 2 cores at rest), which bounds a lab on one machine; with sshd alone (`up --sshd-only`, the
# host-level checks' lab) only the address plan does: node K is 10.251.0.(10+K) and
# 10.252.0.(10+K) in their /24s, so K ends at 244 (.254).
MAX_NODES = 16
MAX_SSHD_ONLY_NODES = 254 - 10
DEFAULT_NODES = 2
DEFAULT_NODE_MEM_GIB = 6.0

LAB_DIR = Path("/var/lib/infergate-lab")  # persistent: keys, data roots, state, inventory
RUN_DIR = Path("/run/infergate-lab")  # runtime: pid files, sockets, namespace handles
NS_DIR = RUN_DIR / "ns"  # a private bind mount, as `ip netns` does for /run/netns
NETNS_DIR = Path("/run/netns")
STATE_FILE = LAB_DIR / "state.json"
INVENTORY_FILE = LAB_DIR / "inventory.yaml"
SSH_DIR = LAB_DIR / "ssh"
CLIENT_KEY = SSH_DIR / "id_ed25519"
AUTHORIZED_KEYS = SSH_DIR / "authorized_keys"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
MODELS_MOUNTPOINT = Path("/srv/models")
SSHD_PRIVSEP_DIR = Path("/run/sshd")
BUSYBOX_BIN = Path("/bin/busybox")  # must be the static one: it runs alone in the lab image
# Made by every dockerd/containerd whatever its --exec-root; removed by `down` when empty and
# absent before the lab.
DOCKER_SHARED_RUN_DIRS = (Path("/run/docker"), Path("/run/containerd"))

MGMT_BRIDGE = "iglab-mgmt"
MGMT_HOST_ADDR = "10.251.0.1/24"
FABRIC_NETNS = "iglab-fabric"
FABRIC_BRIDGE = "fabbr"
FABRIC_IFACE = "fab0"
MGMT_IFACE = "mgmt0"
FABRIC_MTU = 1500
CGROUP_ROOT = "infergate-lab"  # under every cgroup hierarchy's root


@dataclass(frozen=True)
class NodeSpec:
    """One lab node's names, addresses and paths, all derived from its index (1..244)."""

    index: int

    @property
    def name(self) -> str:
        return f"node{self.index}"

    @property
    def netns(self) -> str:
        return f"iglab-{self.name}"

    @property
    def netns_path(self) -> Path:
        return NETNS_DIR / self.netns

    @property
    def mgmt_ip(self) -> str:
        return f"10.251.0.{10 + self.index}"

    @property
    def fabric_ip(self) -> str:
        return f"10.252.0.{10 + self.index}"

    @property
    def host_veth(self) -> str:
        return f"iglab-m{self.index}"

    @property
    def fabric_veth(self) -> str:
        return f"fab{self.index}"  # in the fabric namespace, enslaved to fabbr

    @property
    def mnt_ns(self) -> Path:
        return NS_DIR / f"{self.name}.mnt"

    @property
    def uts_ns(self) -> Path:
        return NS_DIR / f"{self.name}.uts"

    @property
    def ipc_ns(self) -> Path:
        return NS_DIR / f"{self.name}.ipc"

    @property
    def data_dir(self) -> Path:
        return LAB_DIR / "nodes" / self.name

    @property
    def run_dir(self) -> Path:
        return RUN_DIR / "nodes" / self.name

    @property
    def models_dir(self) -> Path:
        return self.data_dir / "models"

    @property
    def home_dir(self) -> Path:
        """Root's home inside the node."""
        return self.data_dir / "home-root"

    @property
    def host_key(self) -> Path:
        return self.data_dir / "ssh_host_ed25519_key"

    @property
    def sshd_config(self) -> Path:
        return self.data_dir / "sshd_config"

    @property
    def sshd_pidfile(self) -> Path:
        return self.run_dir / "sshd.pid"

    @property
    def docker_sock(self) -> Path:
        return self.run_dir / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.docker_sock}"

    @property
    def cgroup(self) -> str:
        """The node's cgroup path relative to a hierarchy root (dockerd's --cgroup-parent)."""
        return f"/{CGROUP_ROOT}/{self.name}"

    def log(self, service: str) -> Path:
        return self.data_dir / f"{service}.log"


# Kernel settings a large lab needs, under /proc/sys/net. The kernel keeps one IPv4
# neighbour (ARP) table for every network namespace together, and past gc_thresh3 entries
# (1024 by default) it drops new ones ("neighbor table overflow"): a lab of 64 nodes whose
# pings resolve every peer needs 64 x 63. And every frame between the lab's namespaces
# passes a CPU's backlog (netdev_max_backlog, 1000 frames by default): at 128 nodes the
# pings of a fan-out and the ARP requests the fabric bridge floods to every port overflowed
# it (the drops column of /proc/net/softnet_stat), losing pings.
SYSCTL_DIR = Path("/proc/sys/net")
DEFAULT_GC_THRESH2 = 512


def neighbour_entries(n: int) -> int:
    """ARP entries a lab of n nodes makes: each node's fabric peers, the host's entry for
    each node's mgmt0 and each node's for the host."""
    return n * (n - 1) + 2 * n


def kernel_room(n: int) -> dict[str, int]:
    """The least each setting must be for a lab of n nodes, by its path under SYSCTL_DIR;
    none while its ARP entries fit the kernel's default gc_thresh2: no garbage collection
    below all of its entries (gc_thresh1), room to spare above them for the host's own,
    and a backlog for a frame from every node to every peer."""
    entries = neighbour_entries(n)
    if entries <= DEFAULT_GC_THRESH2:
        return {}
    neigh = "ipv4/neigh/default/"
    return {
        f"{neigh}gc_thresh1": entries,
        f"{neigh}gc_thresh2": 2 * entries,
        f"{neigh}gc_thresh3": 4 * entries,
        "core/netdev_max_backlog": n * (n - 1),
    }


def max_nodes(docker: bool) -> int:
    return MAX_NODES if docker else MAX_SSHD_ONLY_NODES


def node_specs(n: int, docker: bool = True) -> list[NodeSpec]:
    """Nodes 1..n of a lab with Docker on every node, or with sshd alone (DOCKER false)."""
    if not 1 <= n <= max_nodes(docker):
        how = "with Docker" if docker else "with sshd only"
        raise ValueError(f"the lab has 1 to {max_nodes(docker)} nodes {how}, not {n}")
    return [NodeSpec(i) for i in range(1, n + 1)]


def spec_named(name: str) -> NodeSpec:
    """`node3` -> NodeSpec(3); a clear error for anything else."""
    digits = name.removeprefix("node")
    top = MAX_SSHD_ONLY_NODES
    if not (name.startswith("node") and digits.isdigit() and 1 <= int(digits) <= top):
        raise ValueError(f"no lab node is called {name!r} (node1..node{top})")
    return NodeSpec(int(digits))


# The engine's cache, outside the lab's state (which `down` deletes): image tarballs, models.
CACHE_DIR = Path("/var/cache/infergate")
MODELS_DIR = CACHE_DIR / "models"
SMOLLM2 = "SmolLM2-135M-Instruct"
TINY_MOE = "tiny-qwen3-moe"


def manifest_path(name: str) -> Path:
    """Where the expected sha256 of a cached model's files lies (the plan's model.manifest)."""
    return MODELS_DIR / f"{name}.checksums.json"
