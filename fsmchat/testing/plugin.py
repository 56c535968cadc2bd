"""pytest plugin (entry point ``pytest11``): fixtures ``scripted_model``, ``fsm_run``,
``cassette`` and the option ``--fsmchat-update-graphs``. Imports nothing heavy at load."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("fsmchat")
    group.addoption("--fsmchat-update-graphs", action="store_true", default=False,
                    help="rewrite graph snapshots checked by fsmchat.testing.assert_graph_matches")
    group.addoption("--fsmchat-record", action="store_true", default=False,
                    help="re-record fsmchat cassettes instead of replaying them")


def pytest_configure(config: Any) -> None:
    if config.getoption("--fsmchat-update-graphs", default=False):
        from .expect import UPDATE_GRAPHS

        UPDATE_GRAPHS["on"] = True


@pytest.fixture
def scripted_model() -> Any:
    """A factory: ``m = scripted_model({"alice": [Bid(0.9, "hi")]})``; each call a fresh model."""
    from .models import ScriptedModel

    made: list[Any] = []

    def make(scripts: Any = None, fn: Any = None) -> Any:
        m = ScriptedModel(scripts, fn=fn)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


@pytest.fixture
def fsm_run() -> Any:
    """``result = fsm_run(pattern_or_graph, task_or_context)``: runs it and asserts the trace is a
    path of its graph before returning the RunResult."""
    from ..engine import run as run_graph_sync
    from ..graph.state_graph import StateGraph
    from .expect import assert_trace_is_path

    def go(target: Any, arg: Any) -> Any:
        if isinstance(target, StateGraph):
            result = run_graph_sync(target, arg)
            graph = target
        else:
            result = target.execute(arg)
            graph = target.graph
        assert_trace_is_path(graph, result)
        return result

    return go


@pytest.fixture
def cassette(request: Any) -> Any:
    """``with cassette("name"):`` records to / replays from tests/cassettes/<module>/<name>.json."""
    from .replay import Cassette

    base = Path(str(request.fspath)).parent / "cassettes" / Path(str(request.fspath)).stem
    mode = "record" if request.config.getoption("--fsmchat-record", default=False) else "auto"

    def make(name: str, mode: str = mode) -> Cassette:
        return Cassette(base / f"{name}.json", mode)

    return make
