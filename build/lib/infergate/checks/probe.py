"""One SSH round trip per node: a shell script that prints every host fact in named sections.

Each command runs under `timeout`, so a wedged Docker CLI or a hung mount costs seconds, not
the run. The output is a series of sections whose header carries the name and exit status:

    @@@ meminfo 0
    MemTotal:       24570400 kB
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from infergate.checks.gpu import COMPUTE_APPS_FIELDS, QUERY_GPU_FIELDS
from infergate.checks.gpu_health import HEALTH_FIELDS
from infergate.checks.gpu_kernel import NVML_LIBRARY
from infergate.checks.kernel_log import KERNEL_LOG
from infergate.checks.tools import TOOLS_SECTION
from infergate.problems import Problem
from infergate.waiting import LOOK_AT, Deadline

# each section's own deadline, well within the whole probe's (docs/checks.md#host-probe)
SECTION_TIMEOUT_S = 8
SECTION_DEADLINE = Deadline(SECTION_TIMEOUT_S, "checks.probe.SECTION_TIMEOUT_S")
# the section's `timeout -k`: SIGKILL this long after its deadline
SECTION_KILL_AFTER_S = 2

# `path limit usage file_cache` of each memory cgroup level from this shell's up to the root,
# the usage read again while page cache is charged between reads (docs/checks.md#memory)
CGROUP_MEMORY = r"""
line=
while IFS= read -r l; do
  case $l in *:memory:*) line=$l ;; 0::*) [ -n "$line" ] || line=$l ;; esac
done </proc/self/cgroup
case "$line" in *:memory:*) base=/sys/fs/cgroup/memory ;; *) base=/sys/fs/cgroup ;; esac
path=${line#*:*:}
while :; do
  dir="$base$path" lim= cur=
  if [ -f "$dir/memory.max" ]; then
    read -r lim <"$dir/memory.max"; cur=memory.current
  elif [ -f "$dir/memory.limit_in_bytes" ]; then
    read -r lim <"$dir/memory.limit_in_bytes"; cur=memory.usage_in_bytes
  fi
  if [ -n "$lim" ]; then
    tries=0
    while :; do
      tries=$((tries + 1))
      read -r use <"$dir/$cur"
      t=0 o=0
      while read -r k v; do
        case $k in
          total_active_file|total_inactive_file) t=$((t + v)) ;;
          active_file|inactive_file) o=$((o + v)) ;;
        esac
      done <"$dir/memory.stat"
      [ "$t" != 0 ] || t=$o
      read -r again <"$dir/$cur"
      moved=$((again - use))
      [ "${moved#-}" -lt 67108864 ] || [ "$tries" -ge 3 ] && break
    done
    echo "$path $lim $use $t"
  fi
  [ "$path" = / ] && break
  path=${path%/*}; path=${path:-/}
done
"""

# Every RDMA port, its GIDs, error counters and PCIe link, each file read by the `read`
# builtin: a 255-entry GID table costs no forks (docs/checks.md#rdma)
RDMA_PORTS = r"""
RDMA_COUNTERS="symbol_error link_downed link_error_recovery port_rcv_errors
  local_link_integrity_errors excessive_buffer_overrun_errors"
for p in /sys/class/infiniband/*/ports/*; do
  [ -d "$p" ] || continue
  d=${p%/ports/*}; st= ph= ra= ll= nd= gu=
  { read -r st <"$p/state"; read -r ph <"$p/phys_state"; read -r ra <"$p/rate"
    read -r ll <"$p/link_layer"; read -r nd <"$p/gid_attrs/ndevs/0"; read -r gu <"$d/sys_image_guid"
  } 2>/dev/null
  [ -n "$nd" ] || for f in "$d"/device/net/*; do [ -e "$f" ] && nd="$nd${nd:+,}${f##*/}"; done
  pci=$(readlink -f "$d/device" 2>/dev/null)
  printf 'port\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
    "${d##*/}" "${p##*/}" "$st" "$ph" "$ra" "$ll" "$nd" "${pci##*/}" "$gu"
  c=; for n in $RDMA_COUNTERS; do
    v=; { read -r v <"$p/counters/$n"; } 2>/dev/null; [ -n "$v" ] && c="$c${c:+,}$n=$v"
  done
  printf 'counters\t%s\t%s\t%s\n' "${d##*/}" "${p##*/}" "$c"
  s= w= ms= mw=
  { read -r s <"$d/device/current_link_speed"; read -r w <"$d/device/current_link_width"
    read -r ms <"$d/device/max_link_speed"; read -r mw <"$d/device/max_link_width"
  } 2>/dev/null
  printf 'pcie\t%s\t%s\t%s\t%s\t%s\t%s\n' "${d##*/}" "${p##*/}" "$s" "$w" "$ms" "$mw"
  for g in "$p"/gids/*; do
    v= t= n=; { read -r v <"$g"; } 2>/dev/null
    case $v in ''|0000:0000:0000:0000:0000:0000:0000:0000) continue ;; esac
    i=${g##*/}
    { read -r t <"$p/gid_attrs/types/$i"; read -r n <"$p/gid_attrs/ndevs/$i"; } 2>/dev/null
    printf 'gid\t%s\t%s\t%s\t%s\t%s\t%s\n' "${d##*/}" "${p##*/}" "$i" "$v" "$t" "$n"
  done
done
true
"""

# whether the section before printed anything, for a command to read (probe_script)
LAST_PRINTED = "PROBE_LAST_PRINTED"

HOST_SECTIONS = (
    TOOLS_SECTION,
    ("hostname", "hostname"),
    ("uname", "uname -srm"),
    ("os-release", "cat /etc/os-release"),
    ("meminfo", "cat /proc/meminfo"),
    ("cgroup-memory", CGROUP_MEMORY),
    ("ip-addr", "ip -j addr show"),
    ("docker-version", "docker version --format '{{json .}}'"),
    ("swaps", "cat /proc/swaps"),  # zram shows here too, as /dev/zram0
    ("psi-memory", "cat /proc/pressure/memory"),  # no such file: a kernel without PSI
)


# exit 127 where there is no GPU; cheap enough to ask every node
GPU_SECTIONS = (
    ("nvidia-smi", "nvidia-smi"),
    (
        "gpu-query",
        f"nvidia-smi --query-gpu={','.join(QUERY_GPU_FIELDS)} --format=csv,noheader,nounits",
    ),
    (
        "gpu-apps",
        "nvidia-smi --query-compute-apps="
        f"{','.join(COMPUTE_APPS_FIELDS)} --format=csv,noheader,nounits",
    ),
    ("driver-version", "cat /proc/driver/nvidia/version"),
    ("cuda-compat", "ls -l /usr/local/cuda/compat"),
    ("ldconfig-cuda", "ldconfig -p | grep libcuda"),
    (
        "gpu-health",
        f"nvidia-smi --query-gpu={','.join(HEALTH_FIELDS)} --format=csv,noheader,nounits",
    ),
    ("nvml-library", NVML_LIBRARY),
)


def plan_sections(image_ref: str, model_path: str) -> tuple[tuple[str, str], ...]:
    """The host sections, and those that read what the plan names: image, model, ports."""
    image, model = shlex.quote(image_ref), shlex.quote(model_path)
    return (
        *HOST_SECTIONS,
        ("image-id", f"docker image inspect --format '{{{{.Id}}}}' {image}"),
        ("containers", "docker ps --no-trunc --format '{{json .}}'"),
        # `docker stats` samples for a second: only worth it when `containers` listed one,
        # and asking `docker ps` again would cost the node another CLI start
        (
            "container-memory",
            f"[ -z \"${LAST_PRINTED}\" ] || docker stats --no-stream --format '{{{{json .}}}}'",
        ),
        ("listening", "ss -Htlnp"),
        (
            "port-range",
            "cat /proc/sys/net/ipv4/ip_local_port_range /proc/sys/net/ipv4/ip_local_reserved_ports",
        ),
        # read, never changed; as the SSH user: without root both say so, and that is a finding
        ("iptables", "iptables -S"),
        ("nftables", "nft list ruleset"),
        *GPU_SECTIONS,
        ("rdma-devices", "ls -1 /sys/class/infiniband 2>/dev/null || true"),
        ("rdma-ports", RDMA_PORTS),
        ("kernel-log", KERNEL_LOG),
        ("perftest", "command -v ib_write_bw || true"),
        ("model-files", f"cd {model} && find . -type f -printf '%P\\t%s\\t%T@\\t%C@\\t%i\\n'"),
        ("model-index", f"cat {model}/model.safetensors.index.json"),
        ("model-config", f"cat {model}/config.json"),
    )


def probe_script(sections: tuple[tuple[str, str], ...], timeout_s: int = SECTION_TIMEOUT_S) -> str:
    """A POSIX sh script that runs each (name, command) and prints it as a section. A
    command finds in $LAST_PRINTED whether the section before it printed anything (1 or
    empty)."""
    lines = [
        f"section() {{ name=$1; shift; out=$({LAST_PRINTED}=$printed timeout -k "
        f'{SECTION_KILL_AFTER_S} {timeout_s} "$@" 2>&1); rc=$?; '
        'printf \'\\n@@@ %s %s\\n%s\\n\' "$name" "$rc" "$out"; printed=${out:+1}; }',
        "printed=",
    ]
    lines += [f"section {name} sh -c {shlex.quote(cmd)}" for name, cmd in sections]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Section:
    rc: int
    text: str


_HEADER = re.compile(r"^@@@ (\S+) (\d+)$", re.MULTILINE)


def parse_sections(output: str) -> dict[str, Section]:
    """Split probe output into its sections by their `@@@ name rc` headers; text before the
    first header (a login banner) is no section, and no header at all is no sections."""
    heads = list(_HEADER.finditer(output))
    sections = {}
    for head, after in zip(heads, [*heads[1:], None][: len(heads)], strict=True):
        end = after.start() if after else len(output)
        body = output[head.end() + 1 : end].rstrip("\n")
        sections[head.group(1)] = Section(rc=int(head.group(2)), text=body)
    return sections


def check_probe_printed(sections: dict[str, Section], rc: int, stderr: str) -> Problem | None:
    """A probe that printed no section at all: the script never ran its first command (no GNU
    `timeout` on the node, a shell start-up file that exits). Quotes its exit code and stderr;
    None when it printed sections, whatever they hold (each check judges its own)."""
    if sections:
        return None
    said = " ".join(stderr.split())[:300] or "nothing on stderr"
    found = f"the host probe printed no sections (exit {rc}): {said}"
    if rc == 127 and "timeout" in stderr:
        remedy = "install GNU coreutils on the node: every probe command runs under `timeout`"
    else:
        remedy = (
            "run `sh -c 'echo probe'` over ssh to the node: it must print exactly `probe`; "
            "a login banner or a shell start-up file (~/.bashrc, /etc/profile.d) that prints or "
            "exits breaks every remote command"
        )
    return Problem(found=found, planned="the probe's sections on stdout", remedy=remedy)


def running_when_ended(planned: tuple[tuple[str, str], ...], printed: dict[str, Section]) -> str:
    """What to look at on a node whose whole probe its deadline ended: the section it was in
    (a section is printed when its command is done, so the first planned one not printed),
    then the node's load."""
    running = next(((name, cmd) for name, cmd in planned if name not in printed), None)
    if running is None:
        return LOOK_AT
    name, command = running
    head = command.strip().splitlines()[0][:120]
    return (
        f"the section it was in, `{name}` (run `{head}` on the node under `time`), then {LOOK_AT}"
    )
