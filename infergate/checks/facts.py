"""What one probe run tells about a node, read section by section.

Each reader raises ProbeError when its section failed (a missing `ip` command, a
permission error), so one missing tool fails the checks that need it and no others.
"""

from __future__ import annotations

from dataclasses import dataclass

from infergate.checks.host import DockerEngine, parse_docker_version, parse_os_release
from infergate.checks.memory import MemoryFacts, memory_facts
from infergate.checks.network import Interface, parse_ip_addr_json
from infergate.checks.probe import Section

Sections = dict[str, Section]


class ProbeError(ValueError):
    """A section the checks need is missing or failed; names it and what it printed."""


@dataclass(frozen=True)
class Identity:
    hostname: str
    kernel: str
    os: str


def section_text(sections: Sections, name: str) -> str:
    section = sections.get(name)
    if section is None or section.rc != 0:
        said = section.text.strip() if section else "(section missing)"
        rc = section.rc if section else "?"
        raise ProbeError(f"`{name}` failed on the node (exit {rc}): {said[:300]}")
    return section.text


def identity_of(sections: Sections) -> Identity:
    os_fields = parse_os_release(section_text(sections, "os-release"))
    return Identity(
        hostname=section_text(sections, "hostname").strip(),
        kernel=section_text(sections, "uname").strip(),
        os=os_fields.get("PRETTY_NAME", os_fields.get("NAME", "unknown")),
    )


def memory_of(sections: Sections) -> MemoryFacts:
    try:
        return memory_facts(
            section_text(sections, "meminfo"), section_text(sections, "cgroup-memory")
        )
    except ValueError as e:
        raise ProbeError(str(e)) from None


def interfaces_of(sections: Sections) -> dict[str, Interface]:
    text = section_text(sections, "ip-addr")
    try:
        return parse_ip_addr_json(text)
    except (ValueError, KeyError, TypeError) as e:
        raise ProbeError(
            f"`ip -j addr show` printed something unexpected ({e}): {text[:200]}"
        ) from None


def docker_of(sections: Sections) -> DockerEngine:
    """The Docker engine as the CLI sees it; a failing section is a finding, not an error."""
    section = sections.get("docker-version", Section(127, "(section missing)"))
    return parse_docker_version(section.text)
