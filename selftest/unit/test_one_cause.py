"""One cause, one failure: a plan whose two nodes refuse SSH (loopback addresses, port 9)
gives one red per node with its fix, skips everything that needs them naming that check,
errors nothing, and ends with the verdict (issue 27's measure: at most 2 failures, at most
60 lines before the verdict; before it, 19 failed and 36 errors in 470 lines)."""

from __future__ import annotations

import pytest
import yaml

from selftest.suite import LAB_PLAN, closed_plan, run_suite

ROOT = "test_host.py::test_ssh_reachable_facts_gathered"


def test_two_unreachable_nodes_are_two_failures_and_one_verdict(pytester: pytest.Pytester):
    key = pytester.path / "id_ed25519"  # read only past the refused connect: any file will do
    key.write_text("")
    key.chmod(0o600)
    plan = yaml.safe_load(LAB_PLAN.read_text())
    for node in plan["nodes"]:
        node["ssh"] = {**node.get("ssh", {}), "key": str(key)}
    run = run_suite(pytester, "-m", "preflight", inventory=closed_plan(pytester.path, plan))
    assert run.red() == {f"{ROOT}[node1]", f"{ROOT}[node2]"}, run.output
    assert [t for t, o in run.outcomes.items() if o.status == "error"] == []
    stopped = {t for t, o in run.outcomes.items() if "not checked:" in o.message}
    assert len(stopped) > 30, run.output
    for test in stopped:
        said = run.message(test)
        assert run.outcomes[test].status == "skipped", test
        assert "is unreachable over SSH (test_ssh_reachable_facts_gathered[node" in said, said
    before, _, verdict = run.output.partition("infergate: verdict")
    assert len(before.splitlines()) <= 60, before
    assert "NOT READY: 2 root cause(s), 0 other failure(s)" in verdict
    for number in (1, 2):
        assert f"node{number} (127.0.0.{number})\n  IG-SSH-UNREACHABLE unreachable" in verdict, (
            verdict
        )
        assert (
            f"fix: start sshd on the node (`systemctl start ssh` or `sshd`), or set "
            f"nodes[{number - 1}].ssh.port" in verdict
        )
    assert "infergate: per-node summary" in verdict
    # the lock's line, the failure and the verdict per node; the folded skips: 10, was 80
    assert run.output.count("is unreachable over SSH") <= 10, run.output
