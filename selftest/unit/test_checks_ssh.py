"""Why ssh could not reach a node, judged from the real ssh client's stderr (recorded by
scripts/record_ssh_failures.py against a throwaway sshd; sources: selftest/data/README.md),
and once live through the suite's own Remote."""

import dataclasses
import re
import tempfile
from pathlib import Path

import pytest
import yaml

from infergate.plan.model import Node, Ssh, parse_inventory
from infergate.remote.ssh import NodeUnreachable, Remote
from infergate.remote.ssh_config import ssh_config
from infergate.remote.ssh_failure import check_ssh_failure
from selftest.sshd import keygen, needs_sshd, throwaway_sshd

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "selftest" / "data" / "controller"
LAB = parse_inventory(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))
# openssh-portable sshconnect.c: error("ssh: connect to host %s port %s: %s", host, strport,
# strerror(errno)); no recording: a dropped SYN or an ICMP unreachable needs a firewall rule
TIMED_OUT = "ssh: connect to host 10.251.0.12 port 22: Connection timed out\r\n"
NO_ROUTE = "ssh: connect to host 10.251.0.12 port 22: No route to host\r\n"


def recorded(case: str) -> str:
    return (DATA / f"ssh-{case}.txt").read_text()


def node(address: str = "127.0.0.1", port: int = 22, key: str | None = "/k/id") -> Node:
    ssh = Ssh(user="root", port=port, key=key, known_hosts="/k/known_hosts")
    return dataclasses.replace(LAB.nodes[0], address=address, ssh=ssh)


def test_changed_host_key_leads_with_the_change_and_the_exact_removal():
    text = recorded("host-key-changed")
    port = int(re.search(r"\[127\.0\.0\.1\]:(\d+)", text)[1])
    problem = check_ssh_failure(text, node(port=port))
    assert problem.found.startswith("the host key CHANGED since it was recorded (/tmp/")
    assert "man in the middle" in problem.found
    assert re.search(r"it now sends SHA256:\S+:", problem.found)
    assert problem.remedy.startswith("verify the new key out of band")
    # the same file and host pattern as ssh's own "remove with:" line
    ours = re.search(r"ssh-keygen -R '(\S+)' -f (\S+)`", problem.remedy)
    theirs = re.search(r'ssh-keygen -f "(\S+)" -R "(\S+)"', text)
    assert (ours[1], ours[2]) == (theirs[2], theirs[1])


def test_unknown_host_key_says_to_record_a_verified_one():
    text = recorded("host-key-unknown")
    port = int(re.search(r"\[127\.0\.0\.1\]:(\d+)", text)[1])
    problem = check_ssh_failure(text, node(port=port))
    assert problem.found == f"no host key for [127.0.0.1]:{port} in /k/known_hosts (strict " + (
        "checking is on)"
    )
    assert problem.remedy.startswith(f"`ssh-keyscan -p {port} 127.0.0.1`")


def test_refused_says_nothing_listens():
    problem = check_ssh_failure(recorded("connection-refused"), node(port=2222))
    assert problem.found.startswith("connection refused on 127.0.0.1:2222")
    assert problem.remedy.startswith("start sshd on the node")


def test_denied_key_names_the_key_to_authorize():
    problem = check_ssh_failure(recorded("permission-denied"), node())
    assert problem.found.startswith("root@127.0.0.1 refused the key: Permission denied (publickey")
    assert problem.remedy.startswith("authorize /k/id.pub for root on the node: `ssh-copy-id -i")
    no_key = check_ssh_failure(recorded("permission-denied"), node(key=None))
    assert no_key.remedy.startswith("set nodes[0].ssh.key to a private key")


def test_missing_key_file_is_named_though_ssh_only_says_denied():
    text = recorded("identity-missing")  # LogLevel ERROR hides ssh's "not accessible"
    assert "not accessible" not in text
    problem = check_ssh_failure(text, node(), key_readable=False)
    assert problem.found == "nodes[0].ssh.key /k/id cannot be read on this controller"


def test_unprotected_key_says_chmod_on_that_file():
    problem = check_ssh_failure(recorded("unprotected-key"), node())
    key = re.search(r"ssh ignores the private key (\S+) \(mode 0644\)", problem.found)[1]
    assert key.endswith("/open.key")
    assert problem.remedy == f"`chmod 600 {key}`"


def test_too_many_auth_failures_points_at_the_offered_keys():
    problem = check_ssh_failure(recorded("too-many-auth"), node(key=None))
    assert "Too many authentication failures" in problem.found
    assert "IdentitiesOnly" in problem.remedy


def test_unresolvable_name():
    problem = check_ssh_failure(recorded("unresolvable"), node(address="node1.invalid"))
    assert problem.found == (
        "the name node1.invalid does not resolve on this controller (Name or service not known)"
    )


@pytest.mark.parametrize(
    ("case", "found"),
    [
        ("banner-timeout", "opens but no SSH greeting follows"),
        ("closed-at-banner", "closed the connection before the key exchange"),
    ],
)
def test_port_open_but_no_sshd_conversation(case, found):
    assert found in check_ssh_failure(recorded(case), node()).found


def test_timeout_and_no_route_name_the_host_being_down():
    timed_out = check_ssh_failure(TIMED_OUT, node(address="10.251.0.12"))
    assert "the host is down or a firewall drops the packets" in timed_out.found
    assert "lets TCP 22 through" in timed_out.remedy
    no_route = check_ssh_failure(NO_ROUTE, node(address="10.251.0.12"))
    assert (
        no_route.found == "No route to host to 10.251.0.12: the host is down or not on that network"
    )


def test_unknown_text_quotes_ssh_and_asks_for_verbose():
    problem = check_ssh_failure("mux_client_request_session: read from master failed\r\n", node())
    assert problem.found == "ssh failed: mux_client_request_session: read from master failed"
    assert problem.remedy.startswith(
        "run `ssh -v -p 22 -i /k/id -o UserKnownHostsFile=/k/known_hosts root@127.0.0.1 true`"
    )


@needs_sshd
def test_remote_names_a_changed_host_key_live(tmp_path):
    """The suite's own Remote over testinfra, against a real sshd whose key is not the one
    recorded in known_hosts."""
    old = keygen(tmp_path / "old").with_suffix(".pub").read_text().split()[:2]
    with throwaway_sshd(tmp_path) as port:
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{port} {' '.join(old)}\n")
        message = _unreachable_message(tmp_path, port)
    assert message.startswith("node1 (127.0.0.1) is unreachable over SSH: the host key CHANGED")
    assert f"`ssh-keygen -R '[127.0.0.1]:{port}' -f {tmp_path / 'known_hosts'}`" in message


def _unreachable_message(tmp_path: Path, port: int) -> str:
    ssh = Ssh(
        user="root",
        port=port,
        key=str(tmp_path / "client"),
        known_hosts=str(tmp_path / "known_hosts"),
    )
    target = dataclasses.replace(LAB.nodes[0], address="127.0.0.1", ssh=ssh)
    plan = dataclasses.replace(LAB, nodes=(target,))
    with tempfile.TemporaryDirectory(prefix="ig-") as masters:  # a socket path is < 108 bytes
        (tmp_path / "ssh_config").write_text(ssh_config(plan, Path(masters), persist_s=1))
        remote = Remote(target, tmp_path / "ssh_config", 10, connect_timeout_s=5)
        with pytest.raises(NodeUnreachable) as failed:
            remote.run("true")
    return str(failed.value)
