import os
import signal
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("FSMCHAT_MODEL", None)
# tests/ is on sys.path (pyproject's `pythonpath`), so every folder imports the shared helpers from tests/support
from support.pg import pg_cluster, pg_dsn  # noqa: E402,F401  (a throwaway PostgreSQL server for the store tests)
from support.stores import open_store  # noqa: E402,F401  (every store kind, for the store conformance tests)

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def environment_as_found():
    """Each test leaves the process environment as it found it: an in-process ``fsmchat.cli.main()``
    sets FSMCHAT_MODEL, FSMCHAT_TASK and FSMCHAT_API_BASE (for the run and its workers), and a later
    test's subprocess would inherit them (a task of 'hello' for an example, say)."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


# The fast offline core, `pytest -m core`: whole folders of scripted-model tests (nothing beyond
# 127.0.0.1, no database server, no browser). docs/testing.md lists the folders and what they hold.
CORE = ("engine", "graph", "patterns", "flow", "config", "errors")
# the slow files of those folders (killed subprocesses, property searches, cold imports, counted
# budgets at large T) run in the whole suite only
NOT_CORE = ("test_branch_runs.py", "test_perf_budget.py", "test_bounds.py", "test_deadlines.py", "test_flat_costs.py")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(TESTS).parts if item.path.is_relative_to(TESTS) else ()
        if len(parts) > 1 and parts[0] in CORE and parts[-1] not in NOT_CORE:
            item.add_marker(pytest.mark.core)
        # `make test` runs pytest-xdist with --dist loadgroup: a file's tests share one worker (and its
        # module fixtures), and so do all tests on a local Ray cluster (one cluster at a time on 2 cores)
        group = "ray" if "local_ray" in getattr(item, "fixturenames", ()) else str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _sigint_handler_restored():
    """A test that installs a Ctrl-C handler (a server run in-process, a CLI call) leaves Python's
    own behind it, so a later test's real SIGINT still raises KeyboardInterrupt."""
    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before:
        signal.signal(signal.SIGINT, before)
