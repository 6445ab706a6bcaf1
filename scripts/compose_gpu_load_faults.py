"""Write the GPU load's fault forms, **composed** from the healthy recording of a lent H100
(selftest/data/h100-device/gpu-load/gpu-load-10s.txt, kernel-after.txt): the lent hosts allow
no change of clocks or power, so a slowdown cannot be recorded there. Each form changes only
the samples taken while the load ran (0 <= t_s <= seconds), as selftest/data/README.md says.

    python scripts/compose_gpu_load_faults.py
"""

import json
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "selftest" / "data" / "h100-device" / "gpu-load"
# the Xid 79 line of NVIDIA/NVSentinel issue 155 (selftest/data/gpu-public/), stamped after the load
XID = "[ 9999.123456] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\n"


def under_load(line, seconds, change):
    """LINE of the samples with CHANGE applied to its cells where it was taken under load."""
    cells = [c.strip() for c in line.split(",")]
    if not 0 <= float(cells[0]) <= seconds:
        return line
    return ", ".join(change(cells))


def cells_set(**at):
    """A change setting cells by LOAD_FIELDS' position (t_s first): sm=3, power=5, temp=7..."""
    where = {"sm": 3, "power": 5, "temp": 7, "util": 8, "reasons": 9}

    def change(cells):
        for name, value in at.items():
            cells[where[name]] = value(cells[where[name]]) if callable(value) else value
        return cells

    return change


FORMS = {
    # heat: HW thermal slowdown (0x40) beside the power cap, 91 C, SM at 1110 MHz
    "gpu-load-thermal.composed.txt": cells_set(reasons="0x0000000000000044", temp="91", sm="1110"),
    # an external power brake: HW power brake (0x80) and HW slowdown (0x8), SM 810 MHz, 290 W
    "gpu-load-brake.composed.txt": cells_set(
        reasons="0x0000000000000088", sm="810", power="290.00"
    ),
    # the load never reached this GPU: idle clocks, 0 %, the GPU-idle reason
    "gpu-load-idle.composed.txt": cells_set(
        reasons="0x0000000000000001", sm="345", power="80.00", util="0"
    ),
    # a slow GPU: every SM clock under load at 80 % of the recorded one
    "gpu-load-slow.composed.txt": cells_set(sm=lambda mhz: str(int(int(mhz) * 0.8))),
}


def main():
    recorded = (HERE / "gpu-load-10s.txt").read_text()
    head, _, samples = recorded.partition("@@@ gpu-samples ")
    seconds = json.loads(head.split("\n")[2])["seconds"]
    rc, _, lines = samples.partition("\n")
    for name, change in FORMS.items():
        changed = [under_load(x, seconds, change) if x else x for x in lines.split("\n")]
        (HERE / name).write_text(f"{head}@@@ gpu-samples {rc}\n" + "\n".join(changed))
    after = (HERE / "kernel-after.txt").read_text()
    (HERE / "kernel-after-xid.composed.txt").write_text(after + XID)


if __name__ == "__main__":
    main()
