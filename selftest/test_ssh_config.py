"""The ssh_config made from the inventory, read back by the real ssh client (`ssh -G`)."""

import subprocess
from pathlib import Path

import yaml

from fixtures.hosts import ssh_config
from infergate.inventory import parse_inventory

INVENTORIES = Path(__file__).resolve().parents[1] / "inventories"


def effective(config: Path, host: str) -> dict[str, str]:
    """What ssh itself would use for `host`: `ssh -G` prints its resolved options."""
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_lab_config_verifies_host_keys_with_the_lab_known_hosts(tmp_path):
    inv = parse_inventory(yaml.safe_load((INVENTORIES / "lab.yaml").read_text()))
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(inv, tmp_path))
    opts = effective(config, "node2")
    assert opts["hostname"] == "10.251.0.12"
    assert opts["user"] == "root"
    assert opts["stricthostkeychecking"] in ("true", "yes")
    assert opts["userknownhostsfile"] == "/var/lib/infergate-lab/ssh/known_hosts"
    assert opts["identityfile"] == "/var/lib/infergate-lab/ssh/id_ed25519"
    assert opts["batchmode"] == "yes"
    assert opts["connecttimeout"] == "3"
    assert opts["controlpath"].startswith(str(tmp_path))


def test_sparks_config_jumps_through_spark1(tmp_path):
    inv = parse_inventory(yaml.safe_load((INVENTORIES / "two-sparks-vllm.yaml").read_text()))
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config(inv, tmp_path))
    assert effective(config, "spark2")["proxyjump"] == "spark1"
    assert effective(config, "spark2")["user"] == "aurora"
    assert "proxyjump" not in effective(config, "spark1")
