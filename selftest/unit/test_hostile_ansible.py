"""Hostile and malformed Ansible inventories for `infergate plan from-ansible`: each case is
written into a fresh folder, then refused as one AnsibleError naming the file, the key and its
line, in bounded time and memory, never echoing the secret the case hides (or, for the odd
but valid ones, read into the nodes it lists). A subset runs the installed command for real."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from infergate.plan.ansible import AnsibleError, plan_from_ansible
from infergate.plan.ansible_inventory import MAX_GROUPS, MAX_HOSTS
from infergate.plan.loader import MAX_BYTES

SECRET = "s3cr3t-API-TOKEN-4f9a2c81"
NOT_NAME = "is not a valid node name"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 10)}]\n" for a, b in zip("abcdefg", "bcdefgh", strict=True)
)
CPU_S = 2.0
PEAK_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Fifo:
    """A named pipe: opening it to read waits for a writer forever."""


@dataclass(frozen=True)
class Link:
    target: str  # absolute, or relative to the link's folder


@dataclass(frozen=True)
class Folder:
    """An empty folder where a file is expected."""


Content = str | bytes | Fifo | Link | Folder


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, Content]  # under the case's folder: the inventory folder is inv/
    key: str = ""  # the key the refusal names; "" for the file as a whole
    says: str = ""  # in the message
    line: int | None = None
    file: str = "inv/hosts.ini"  # the file the refusal names
    inventory: str = "inv/hosts.ini"
    group: str | None = None
    nodes: tuple[str, ...] = ()  # a case that is read: its nodes' names
    node: dict[str, object] = field(default_factory=dict)  # and the first node's keys

    @property
    def refused(self) -> bool:
        return not self.nodes


def ini(text: str, **more: Content) -> dict[str, Content]:
    return {"inv/hosts.ini": text, **{k.replace("__", "/"): c for k, c in more.items()}}


def yml(text: str, **more: Content) -> dict[str, Content]:
    return {"inv/hosts.yml": text, **{k.replace("__", "/"): c for k, c in more.items()}}


def gv(text: Content, **more: Content) -> dict[str, Content]:
    """A one-host INI inventory whose group_vars/all.yml is TEXT."""
    return ini("[gpu]\nnode1\n", inv__group_vars__all_yml=text, **more)


def in_gv(name: str, text: Content, key: str, says: str, line: int | None) -> Case:
    return Case(name, gv(text), key, says, line, file=GV)


def in_yml(name: str, text: str, key: str, says: str, line: int | None) -> Case:
    return Case(name, yml(text), key, says, line, file=YML, inventory=YML)


def chain(levels: int) -> str:
    """Groups each the only child of the one before: g0 > g1 > ... with node1 at the bottom."""
    sections = [f"[g{i}:children]\ng{i + 1}\n" for i in range(levels)]
    return "".join(sections) + f"[g{levels}]\nnode1\n"


def diamonds(levels: int) -> str:
    """Two groups per level, each a child of both above: 2**levels ways down to node1."""
    sections = [
        f"[{g}{i}:children]\na{i + 1}\nb{i + 1}\n" for i in range(levels) for g in ("a", "b")
    ]
    return "".join(sections) + f"[a{levels}]\nnode1\n[b{levels}]\nnode1\n"


def deep_yaml(levels: int) -> str:
    """Groups nested LEVELS deep in YAML's flow style, node1 at the bottom."""
    body = "hosts: {node1: }"
    for i in reversed(range(levels)):
        body = f"children: {{g{i}: {{{body}}}}}"
    return f"all: {{{body}}}\n"


YML = "inv/hosts.yml"
GV = "inv/group_vars/all.yml"
HV = "inv/host_vars/node1.yml"
OUTSIDE = {"outside.yml": f"API_TOKEN: {SECRET}\n"}
CASES = [
    # INI: ranges, names, counts
    Case(
        "ini-range-huge",
        ini("[gpu]\nnode[0:99999999]\n"),
        "[gpu].node[0:99999999]",
        "is over 4096 hosts",
        2,
    ),
    Case(
        "ini-range-nested",
        ini("[gpu]\nn[0:99][0:99]\n"),
        "[gpu].n[0:99][0:99]",
        "is over 4096 hosts",
        2,
    ),
    Case(
        "ini-range-empty-times-huge",
        ini("[gpu]\nn[0:99999999][1:0]\n"),
        "[gpu].n[0:99999999][1:0]",
        "is over 4096 hosts",
        2,
    ),
    Case(
        "ini-range-5000-digits",
        ini(f"[gpu]\nn[0:{'9' * 5000}]\n"),
        f"[gpu].n[0:{'9' * 5000}]",
        "is over 4096 hosts",
        2,
    ),
    Case("ini-range-backwards", ini("[gpu]\nn[9:0]\n"), "gpu", "no hosts", None, group="gpu"),
    Case(
        "ini-range-of-long-names",
        ini("[gpu]\n" + "n" * 60 + "[00000:00009]\n"),
        "[gpu]." + "n" * 60 + "[00000:00009]",
        NOT_NAME,
        2,
    ),
    Case(
        "ini-hosts-over-cap",
        ini("[gpu]\n" + "".join(f"n{i}\n" for i in range(MAX_HOSTS + 1))),
        "[gpu].n4096",
        f"over {MAX_HOSTS} hosts",
        MAX_HOSTS + 2,
    ),
    Case(
        "ini-groups-over-cap",
        ini("".join(f"[g{i}]\nn1\n" for i in range(MAX_GROUPS + 1))),
        f"[g{MAX_GROUPS - 1}]",
        f"over {MAX_GROUPS} groups",
        2 * MAX_GROUPS - 1,
    ),
    Case("ini-group-traversal", ini("[../../x]\nnode1\n"), "[../../x]", NOT_NAME, 1),
    Case("ini-child-traversal", ini("[a:children]\n../..\n"), "[a:children]", NOT_NAME, 2),
    Case(
        "ini-host-traversal",
        ini("[gpu]\n../../etc/passwd ansible_host=10.0.0.1\n"),
        "[gpu].../../etc/passwd",
        NOT_NAME,
        2,
    ),
    Case("ini-host-slash", ini("[gpu]\nrack1/node1\n"), "[gpu].rack1/node1", NOT_NAME, 2),
    Case(
        "ini-host-300-chars", ini("[gpu]\n" + "n" * 300 + "\n"), "[gpu]." + "n" * 300, NOT_NAME, 2
    ),
    Case(
        "ini-group-300-chars",
        ini("[" + "g" * 300 + "]\nnode1\n"),
        "[" + "g" * 300 + "]",
        NOT_NAME,
        1,
    ),
    Case("ini-host-nul", ini("[gpu]\nnode\x001\n"), "[gpu].node\x001", "control character", 2),
    Case(
        "ini-host-escape",
        ini("[gpu]\nnode\x1b[31m1\n"),
        "[gpu].node\x1b[31m1",
        "control character",
        2,
    ),
    Case("ini-bad-utf8", {"inv/hosts.ini": b"[gpu]\nnode\xff1\n"}, "", "0xff is not UTF-8", 2),
    Case("ini-bom", {"inv/hosts.ini": b"\xef\xbb\xbf[gpu]\nnode1\n"}, "", "byte-order mark", 1),
    Case("ini-utf16", {"inv/hosts.ini": "[gpu]\nnode1\n".encode("utf-16")}, "", "is not UTF-8", 1),
    Case(
        "ini-user-nul",
        ini("[all:vars]\nansible_user=ro\x00ot\n[gpu]\nnode1\n"),
        "[all:vars].ansible_user",
        "control character",
        2,
    ),
    Case(
        "ini-port-superscript",
        ini("[gpu]\nnode1 ansible_port=²\n"),
        "[gpu].node1.ansible_port",
        "expected an integer",
        2,
    ),
    Case(
        "ini-port-5000-digits",
        ini(f"[gpu]\nnode1 ansible_port={'9' * 5000}\n"),
        "[gpu].node1.ansible_port",
        "expected an integer",
        2,
    ),
    Case(
        "ini-port-out-of-range",
        ini("[gpu:vars]\nansible_port=99999\n[gpu]\nnode1\n"),
        "[gpu:vars].ansible_port",
        "out of range",
        2,
    ),
    Case(
        "ini-user-option",
        ini("[gpu]\nnode1 ansible_user=-oProxyCommand=id\n"),
        "[gpu].node1.ansible_user",
        "is not a user name",
        2,
    ),
    Case(
        "ini-address-option",
        ini("[gpu]\nnode1 ansible_host=-oProxyCommand=id\n"),
        "[gpu].node1.ansible_host",
        "neither an IP address nor a DNS name",
        2,
    ),
    Case(
        "ini-key-quote",
        ini("[gpu]\nnode1 ansible_ssh_private_key_file='a\"b'\n"),
        "[gpu].node1.ansible_ssh_private_key_file",
        "cannot quote",
        2,
    ),
    Case(
        "ini-jump-option",
        ini("[gpu]\nnode1 ansible_ssh_common_args='-J -oProxyCommand=id'\n"),
        "[gpu].node1.ansible_ssh_common_args",
        "neither a node name nor",
        2,
    ),
    Case(
        "ini-secret-without-equals",
        ini(f"[all:vars]\nAPI_TOKEN {SECRET}\n[gpu]\nnode1\n"),
        "[all:vars]",
        "not key=value",
        2,
    ),
    Case("ini-secret-host-word", ini(f"[gpu]\nnode1 {SECRET}\n"), "[gpu]", "not all key=value", 2),
    Case(
        "ini-secret-open-quote",
        ini(f'[gpu]\nnode1 password="{SECRET}\n'),
        "[gpu]",
        "No closing quotation",
        2,
    ),
    Case("ini-secret-section", ini(f"[gpu:{SECRET}]\nnode1\n"), "", "only :vars and :children", 1),
    Case("ini-section-unclosed", ini("[gpu\nnode1\n"), "", "not an INI section", 1),
    Case(
        "ini-children-loop",
        ini("[a:children]\nb\n[b:children]\na\n[b]\nn1\n"),
        "a",
        "children of each other: a > b > a",
    ),
    Case(
        "ini-children-self", ini("[a:children]\na\n[a]\nn1\n"), "a", "children of each other: a > a"
    ),
    Case("ini-nesting-20", ini(chain(20)), "g16", "nested deeper than 16 levels"),
    Case("ini-unknown-group", ini("[gpu]\nnode1\n"), "nope", "no such group", group="nope"),
    Case(
        "ini-group-escape", ini("[gpu]\nnode1\n"), "'x\\x1b[2J'", "no such group", group="x\x1b[2J"
    ),
    Case("ini-no-hosts", ini("# nothing\n"), "all", "no hosts"),
    # odd but valid: read, in bounded time
    Case("ini-diamonds-15", ini(diamonds(15)), nodes=("node1",)),
    Case(
        "ini-duplicate-hosts",
        ini("[a]\nnode1 ansible_user=x\n[b]\nnode1\nnode1\n"),
        nodes=("node1",),
        node={"ssh": {"user": "x"}},
    ),
    Case(
        "ini-templated-host",
        ini('[gpu]\nnode1 ansible_host=\'{{ lookup("env", "X") }}\'\n'),
        nodes=("node1",),
        node={"address": "TODO"},
    ),
    Case(
        "ini-other-vars-files-ignored",
        ini(
            "[gpu]\nnode1\n",
            inv__group_vars__all__x_swp=b"\xff",
            inv__group_vars__all__vars_yml="ansible_user: ops\n",
        ),
        nodes=("node1",),
        node={"ssh": {"user": "ops"}},
    ),
    # group_vars and host_vars
    Case(
        "gv-symlink-out-with-secret",
        {**gv(Link("../../outside.yml")), **OUTSIDE},
        "",
        "leads out of the inventory's folder",
        file=GV,
    ),
    Case(
        "gv-folder-symlink-out",
        {**ini("[gpu]\nnode1\n", inv__group_vars=Link("..")), "all.yml": f"API_TOKEN: {SECRET}\n"},
        "",
        "leads out of the inventory's folder",
        file=GV,
    ),
    Case("gv-dev-zero", gv(Link("/dev/zero")), "", "leads out of the inventory's folder", file=GV),
    Case("gv-fifo", gv(Fifo()), "", "not a regular file", file=GV),
    Case(
        "gv-fifo-in-folder",
        ini("[gpu]\nnode1\n", inv__group_vars__gpu__vars_yml=Fifo()),
        "",
        "not a regular file",
        file="inv/group_vars/gpu/vars.yml",
    ),
    Case("gv-folder-as-file", gv(Folder()), "", "not a regular file", file=GV),
    Case("gv-symlink-loop", gv(Link("all.yml")), "", "cannot be read", file=GV),
    Case("gv-too-big", gv("# " + "x" * MAX_BYTES + "\n"), "", "larger than 1024 KiB", file=GV),
    in_gv("gv-alias-bomb", BOMB, "e", "over 100000 values", 5),
    in_gv(
        "gv-deep",
        "a: " + "[" * 30 + "]" * 30 + "\n",
        "a[0][0][0][0][0][0][0][0][0][0][0][0][0][0][0][0]",
        "nested deeper than 16 levels",
        1,
    ),
    in_gv("gv-bad-utf8", b"ansible_user: r\xe9\n", "", "0xe9 is not UTF-8", 1),
    in_gv(
        "gv-secret-not-a-mapping",
        f'"API_TOKEN={SECRET}"\n',
        "<root>",
        "expected a mapping, got a str",
        1,
    ),
    in_gv("gv-list", "- a\n- b\n", "<root>", "expected a mapping, got a list", 1),
    in_gv(
        "gv-date-user",
        "ansible_user: 2026-01-01\n",
        "ansible_user",
        "expected a string, got datetime.date",
        1,
    ),
    in_gv(
        "gv-bytes-port",
        "ansible_port: !!binary aGVsbG8=\n",
        "ansible_port",
        "expected an integer, got b'hello' (bytes)",
        1,
    ),
    in_gv("gv-list-host", "ansible_host: [a, b]\n", "ansible_host", "expected a string", 1),
    in_gv(
        "gv-mapping-key-file",
        "ansible_ssh_private_key_file: {a: 1}\n",
        "ansible_ssh_private_key_file",
        "expected a string",
        1,
    ),
    Case(
        "gv-bool-user", gv("ansible_user: yes\n"), "ansible_user", "expected a string", 1, file=GV
    ),
    in_gv("gv-bad-date", "ansible_user: 2026-02-30\n", "ansible_user", "cannot be read", 1),
    in_gv("gv-python-tag", "x: !!python/object/apply:os.system [id]\n", "", "not valid YAML", 1),
    in_gv("gv-merge-key", "base: &b {ansible_user: a}\n<<: *b\n", "<root>", "a merge key", 2),
    in_gv(
        "gv-duplicate-key", "ansible_user: a\nansible_user: b\n", "ansible_user", "duplicate key", 2
    ),
    in_gv(
        "gv-int-5000-digits",
        f"ansible_port: {'1' * 5000}\n",
        "ansible_port",
        "an integer of 5000 digits",
        1,
    ),
    in_gv("gv-nul", "ansible_user: a\x00b\n", "", "U+0000 cannot be in YAML", 1),
    Case(
        "hv-symlink-out-with-secret",
        {**ini("[gpu]\nnode1\n", inv__host_vars__node1_yml=Link("../../outside.yml")), **OUTSIDE},
        "",
        "leads out of the inventory's folder",
        file=HV,
    ),
    Case(
        "hv-port-text",
        ini("[gpu]\nnode1\n", inv__host_vars__node1_yml="ansible_port: x22\n"),
        "ansible_port",
        "expected an integer",
        1,
        file=HV,
    ),
    # YAML inventories
    in_yml(
        "yml-alias-bomb",
        f"all:\n  vars:\n    {BOMB.replace(chr(10), chr(10) + '    ')}hosts: {{node1: }}\n",
        "all.vars.e",
        "over 100000 values",
        7,
    ),
    in_yml(
        "yml-groups-nested-past-the-loader",
        deep_yaml(10),
        "all.children.g0.children.g1.children.g2.children.g3.children.g4.children.g5"
        ".children.g6.children.g7",
        "nested deeper than 16 levels",
        1,
    ),
    in_yml("yml-top-list", "- a\n- b\n", "", "not an Ansible inventory", 1),
    Case("yml-empty", yml(""), "", "not an Ansible inventory", file=YML, inventory=YML),
    in_yml("yml-bad-group-key", "all:\n  hostz: {}\n", "all", "not an Ansible group", 1),
    in_yml(
        "yml-hosts-list",
        "all:\n  hosts: [a, b]\n",
        "all.hosts",
        "expected a mapping, got a list",
        2,
    ),
    in_yml(
        "yml-host-vars-secret",
        f"all:\n  hosts:\n    node1: API_TOKEN={SECRET}\n",
        "all.hosts.node1",
        "expected a mapping, got a str",
        3,
    ),
    in_yml(
        "yml-range-huge",
        "all:\n  hosts:\n    node[0:99999999]:\n",
        "all.hosts.node[0:99999999]",
        "is over 4096 hosts",
        3,
    ),
    in_yml(
        "yml-group-traversal",
        "all:\n  children:\n    ../../x:\n      hosts: {n1: }\n",
        "all.children.../../x",
        NOT_NAME,
        3,
    ),
    in_yml("yml-host-traversal", "all:\n  hosts:\n    ../x: {}\n", "all.hosts.../x", NOT_NAME, 3),
    in_yml(
        "yml-children-loop",
        "a:\n  children:\n    b:\n      children:\n        a: {}\n",
        "a",
        "children of each other",
        None,
    ),
    Case(
        "yml-nul", yml("all:\n  hosts: {node\x001: }\n"), "", "U+0000", 2, file=YML, inventory=YML
    ),
    in_yml("yml-tab-indent", "all:\n\thosts: {}\n", "", "not valid YAML", 2),
    in_yml("yml-two-documents", "all: {}\n---\nall: {}\n", "", "not valid YAML", 2),
    in_yml("yml-complex-key", "? [a, b]\n: {}\n", "<root>", "a key that is not text", 1),
    in_yml(
        "yml-bad-date-port",
        "all:\n  hosts:\n    node1: {ansible_port: 2026-02-30}\n",
        "all.hosts.node1.ansible_port",
        "cannot be read",
        3,
    ),
    in_yml(
        "yml-date-user",
        "all:\n  hosts:\n    node1: {ansible_user: 2026-01-01}\n",
        "all.hosts.node1.ansible_user",
        "expected a string",
        3,
    ),
    Case(
        "yml-port-quoted",
        yml('all:\n  hosts:\n    node1: {ansible_port: "2222"}\n'),
        inventory=YML,
        nodes=("node1",),
        node={"ssh": {"port": 2222}},
    ),
    # the inventory itself
    Case("inventory-fifo", {"inv/hosts.ini": Fifo()}, "", "not a regular file"),
    Case("inventory-dev-zero", {"inv/hosts.ini": Link("/dev/zero")}, "", "not a regular file"),
    Case("inventory-folder", {"inv/hosts.ini": Folder()}, "", "not a regular file"),
    Case("inventory-missing", {"inv/other": ""}, "", "No such file or directory"),
    Case("inventory-too-big", ini("#" * (MAX_BYTES + 1)), "", "larger than 1024 KiB"),
]
CLI_CASES = (
    "ini-range-huge",
    "ini-port-superscript",
    "ini-bad-utf8",
    "gv-symlink-out-with-secret",
    "gv-dev-zero",
    "gv-fifo",
    "gv-alias-bomb",
    "gv-bytes-port",
    "yml-groups-nested-past-the-loader",
    "inventory-fifo",
)
BY_NAME = {case.name: case for case in CASES}


def written(case: Case, root: Path) -> Path:
    """CASE's files under ROOT; the path of its inventory."""
    for name, content in case.files.items():
        path = root / name.replace("_yml", ".yml").replace("_swp", ".swp")
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Fifo):
            os.mkfifo(path)
        elif isinstance(content, Link):
            path.symlink_to(content.target)
        elif isinstance(content, Folder):
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root / case.inventory


def test_the_corpus_holds_60_hostile_inventories() -> None:
    assert len([case for case in CASES if case.refused]) >= 60
    assert len(BY_NAME) == len(CASES)
    assert set(CLI_CASES) <= set(BY_NAME)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_hostile_inventory_is_refused_naming_file_and_key(case: Case, tmp_path: Path) -> None:
    inventory = written(case, tmp_path)
    tracemalloc.start()
    started = time.process_time()
    try:
        plan = plan_from_ansible(inventory, case.group).text
    except AnsibleError as e:
        refused: AnsibleError | None = e
    else:
        refused = None
    seconds = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < CPU_S
    assert peak < PEAK_BYTES
    if not case.refused:
        assert refused is None, refused
        nodes = yaml.safe_load(plan)["nodes"]
        assert tuple(n["name"] for n in nodes) == case.nodes
        assert {k: nodes[0][k] for k in case.node} == case.node
        return
    assert refused is not None, f"read: {plan}"
    said = refused.in_file(refused.file)
    assert SECRET not in said
    assert (refused.file, refused.path, refused.line) == (tmp_path / case.file, case.key, case.line)
    assert case.says in refused.message


def _limits() -> None:
    """The child's address space: 1 GiB, where the bombs of old took 2 GB; its CPU: 20 s."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (20, 20))


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_command_refuses_in_one_line(name: str, tmp_path: Path) -> None:
    """As an operator meets it: exit 4 (a usage error), one line, no traceback, no secret;
    read by infergate's file reader, which these cases are for."""
    case = BY_NAME[name]
    inventory = written(case, tmp_path)
    command = [sys.executable, "-m", "infergate.cli", "plan", "from-ansible", str(inventory)]
    command += ["--reader", "files"]
    # the hang bound is the timeout; CPU is capped in the child, so load cannot flake it
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, preexec_fn=_limits
    )
    assert (done.returncode, done.stdout) == (4, "")
    line = f", line {case.line}" if case.line else ""
    key = f"{case.key}: " if case.key else ""
    assert done.stderr.startswith(f"{tmp_path / case.file}{line}: {key}"), done.stderr
    assert case.says in done.stderr
    assert done.stderr.count("\n") == 1
    assert SECRET not in done.stderr
