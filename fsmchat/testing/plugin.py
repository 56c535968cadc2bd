"""pytest plugin (entry point ``pytest11``): fixtures ``scripted_model``, ``fsm_run``,
``cassette`` and the option ``--fsmchat-update-graphs``. Imports nothing heavy at load."""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from ..graph.state_graph import StateGraph
    from ..models import RunResult
    from .models import Request, ScriptedModel
    from .replay import Cassette


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fsmchat")
    group.addoption("--fsmchat-update-graphs", action="store_true", default=False,
                    help="rewrite graph snapshots checked by fsmchat.testing.assert_graph_matches")
    group.addoption("--fsmchat-record", action="store_true", default=False,
                    help="re-record fsmchat cassettes instead of replaying them")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--fsmchat-update-graphs", default=False):
        from .expect import UPDATE_GRAPHS

        UPDATE_GRAPHS["on"] = True


@pytest.fixture
def scripted_model() -> Iterator[Callable[..., ScriptedModel]]:
    """A factory: ``m = scripted_model({"alice": [Bid(0.9, "hi")]})``; each call a fresh model."""
    from .models import ScriptedModel

    made: list[ScriptedModel] = []

    def make(scripts: dict[str, Sequence[object]] | None = None,
             fn: Callable[[Request], object] | None = None) -> ScriptedModel:
        m = ScriptedModel(scripts, fn=fn)
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


class _Pattern(Protocol):
    @property
    def graph(self) -> StateGraph: ...

    def execute(self, task: str) -> RunResult: ...


@pytest.fixture
def fsm_run() -> Callable[[StateGraph | _Pattern, object], RunResult]:
    """``result = fsm_run(pattern_or_graph, task_or_context)``: runs it and asserts the trace is a
    path of its graph before returning the RunResult."""
    from ..engine import run as run_graph_sync
    from ..graph.state_graph import StateGraph
    from .expect import assert_trace_is_path

    def go(target: StateGraph | _Pattern, arg: object) -> RunResult:
        if isinstance(target, StateGraph):
            result = run_graph_sync(target, arg)
            graph = target
        else:
            if not isinstance(arg, str):
                raise TypeError(f"fsm_run: a pattern runs a task (a str), got {type(arg).__name__}")
            result = target.execute(arg)
            graph = target.graph
        assert_trace_is_path(graph, result)
        return result

    return go


@pytest.fixture
def cassette(request: pytest.FixtureRequest) -> Callable[..., Cassette]:
    """``with cassette("name"):`` records to / replays from tests/cassettes/<module>/<name>.json."""
    from .replay import Cassette

    base = request.path.parent / "cassettes" / request.path.stem
    mode = "record" if request.config.getoption("--fsmchat-record", default=False) else "auto"

    def make(name: str, mode: str = mode) -> Cassette:
        return Cassette(base / f"{name}.json", mode)

    return make
