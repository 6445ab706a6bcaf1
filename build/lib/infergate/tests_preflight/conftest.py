"""The preflight's in-image probes start with its first test, in the background, and the
host-level tests run while the engine imports (fixtures/inimage.py)."""

from __future__ import annotations

import pytest

from infergate.preflight.in_image import Probes


@pytest.fixture(scope="session", autouse=True)
def _in_image_started(in_image_early: Probes | None) -> Probes | None:
    return in_image_early
