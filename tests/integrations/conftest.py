"""The integration tests' shared fixture: a local Ray cluster for the module that asks for it."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """A local two-CPU Ray cluster for the whole module, shut down after its last test."""
    from fsmchat.patterns.distributed import shutdown, start_local_ray

    start_local_ray(num_cpus=2, log_to_driver=False)
    yield
    shutdown()
