"""The commands the suite runs on a node, and which of them the node lacks."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # facts reads the probe, which runs this module's section
    from infergate.checks import facts as read

# what the host probe and the checks run on a node (README, Running it against real nodes)
NEEDED = ("ip", "ss", "docker", "ping", "timeout", "findmnt", "sha256sum", "find")
TOOLS_SECTION = (
    "tools",
    f"for c in {' '.join(shlex.quote(t) for t in NEEDED)}; do "
    'command -v "$c" >/dev/null 2>&1 || echo "$c"; done; true',
)


def missing_tools(sections: read.Sections) -> tuple[str, ...]:
    """The needed commands the node lacks; none where the section is missing."""
    section = sections.get("tools")
    if section is None:
        return ()
    return tuple(line.strip() for line in section.text.splitlines() if line.strip() in NEEDED)
