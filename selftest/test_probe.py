"""The host probe script itself, run for real under this machine's /bin/sh (dash)."""

import subprocess

from infergate.checks.probe import HOST_SECTIONS, parse_sections, probe_script


def test_probe_runs_under_posix_sh_and_yields_every_section():
    out = subprocess.run(
        ["/bin/sh", "-c", probe_script(HOST_SECTIONS)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    sections = parse_sections(out)
    assert list(sections) == [name for name, _ in HOST_SECTIONS]
    assert sections["meminfo"].rc == 0
    assert "MemAvailable:" in sections["meminfo"].text
    assert sections["cgroup-memory"].text.splitlines()[-1].startswith("/ ")


def test_probe_section_deadline_ends_a_hung_command():
    script = probe_script((("slow", "sleep 30"), ("after", "echo still here")), timeout_s=1)
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=10)
    sections = parse_sections(out.stdout)
    assert sections["slow"].rc == 124  # timeout's own exit status
    assert sections["after"].text == "still here"


def test_parse_sections_keeps_blank_lines_inside_a_section():
    sections = parse_sections("\n@@@ a 0\nx\n\ny\n\n@@@ b 3\nboom\n")
    assert sections["a"].text == "x\n\ny"
    assert (sections["b"].rc, sections["b"].text) == (3, "boom")
