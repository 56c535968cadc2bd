"""Expectations of a run: its path through the graph, its stop, its calls, its trace, and graph snapshots."""
from __future__ import annotations

import difflib
import fnmatch
import os
from pathlib import Path
from collections.abc import Iterable
from typing import Callable, Sequence

from ..graph.state_graph import StateGraph, branch_graph
from ..models import RunResult, TraceEvent, split_branch
from .models import ScriptedModel


# ---- assertions ----
def _path_of(run: object) -> list[str]:
    path = getattr(run, "path", run)  # a run's result (or any object with a path), or a path
    if not isinstance(path, Iterable):
        raise TypeError(f"expected a run's result or a path, got {type(run).__name__}")
    return [str(s) for s in path]


def assert_trace_is_path(graph: StateGraph, run: RunResult) -> None:
    """Every step of the run's trace follows a declared transition of ``graph`` (flattened).

    The steps of each branch run (``fork|n.state``) follow a transition of that branch's graph. A
    fork entered again (a ``parallel`` in a loop) reuses its branch ids: each visit's branch run
    starts at the branch's initial state after the previous one reached its final state.

    Args:
        graph: The graph the run ran (``pattern.graph``).
        run: The run's result.

    Raises:
        AssertionError: A step that is not a transition of the graph, saying which.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_trace_is_path
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> swarm = RoundRobinSwarm(agents=[writer], max_loops=2)
        >>> assert_trace_is_path(swarm.graph, swarm.execute("Announce the launch."))
    """
    trace = run.trace
    assert trace, "the run has an empty trace"
    runs: dict[str, list[TraceEvent]] = {}
    for ev in trace:
        runs.setdefault(split_branch(ev.state)[0], []).append(ev)
    assert "" in runs, "the trace has no step of the top-level run"
    for branch, events in runs.items():
        flat = graph.flatten() if not branch else branch_graph(graph, branch)
        where = f"{graph.name!r}" + (f" branch {branch!r}" if branch else "")
        prefix = branch + "." if branch else ""
        edges = {(prefix + t.source, prefix + t.dest, t.label) for t in flat.transitions}
        assert events[0].state == prefix + flat.initial, (
            f"{where}: trace starts at {events[0].state!r}, the graph's initial state is {prefix + flat.initial!r}")
        for prev, ev in zip(events, events[1:]):
            if branch and prev.dest is None and ev.state == prefix + flat.initial:
                continue  # the fork's next visit: a new run of this branch
            assert prev.dest == ev.state, f"{where}: trace jumps: step {prev.step} went to {prev.dest!r} but " \
                                          f"step {ev.step} is in {ev.state!r}"
        for ev in events:
            assert ev.state[len(prefix):] in flat.states, f"trace visits {ev.state!r}, which is not a state of {where}"
            if ev.dest is not None:
                assert (ev.state, ev.dest, ev.trigger) in edges, (
                    f"step {ev.step}: {ev.state!r} -[{ev.trigger}]-> {ev.dest!r} is not a transition of {where}")
    assert [e.state for e in runs[""]] == list(run.path), "trace states differ from run.path"


def _match(pattern: Sequence[str], path: Sequence[str]) -> bool:
    """Glob match per state; ``"*"`` alone matches any run of states (also none), ``"x+"``
    one or more of x."""
    if not pattern:
        return not path
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        return any(_match(rest, path[i:]) for i in range(len(path) + 1))
    if head.endswith("+") and len(head) > 1:
        i = 0
        while i < len(path) and fnmatch.fnmatchcase(path[i], head[:-1]):
            i += 1
            if _match(rest, path[i:]):
                return True
        return False
    return bool(path) and fnmatch.fnmatchcase(path[0], head) and _match(rest, path[1:])


def assert_path(run: object, expected: Sequence[str]) -> None:
    """The run's path equals ``expected``; entries may be globs, ``"*"`` or ``"state+"``.

    ``"*"`` alone matches any run of states (also none), ``"state+"`` one or more of that state.

    Args:
        run: The run's result (or a path).
        expected: The states, in order.

    Raises:
        AssertionError: The paths differ; both are shown side by side.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_path
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result = RoundRobinSwarm(agents=[writer], max_loops=3).execute("Announce the launch.")
        >>> assert_path(result, ["seed", "writer+", "stop"])
        >>> assert_path(result, ["seed", "stop"])
        Traceback (most recent call last):
        ...
        AssertionError: path mismatch
        expected: ['seed', 'stop']
        actual:   ['seed', 'writer', 'writer', 'writer', 'stop']
        ...
    """
    actual = _path_of(run)
    if not _match(list(expected), actual):
        diff = "\n".join(difflib.unified_diff(list(expected), actual, "expected", "actual", lineterm=""))
        raise AssertionError(f"path mismatch\nexpected: {list(expected)}\nactual:   {actual}\n{diff}")


def assert_stop(run: RunResult, reason: str) -> None:
    """The run stopped for ``reason`` (its error shown when it did not).

    Args:
        run: The run's result.
        reason: The expected stop reason (``"max_loops"``, ``"lull"``, ``"rounds"``...).

    Raises:
        AssertionError: Another stop reason.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_stop
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result = RoundRobinSwarm(agents=[writer]).execute("Announce the launch.")
        >>> assert_stop(result, "max_loops")
        >>> assert_stop(result, "lull")
        Traceback (most recent call last):
        ...
        AssertionError: stop reason 'max_loops', expected 'lull'...
    """
    assert run.stop_reason == reason, f"stop reason {run.stop_reason!r}, expected {reason!r}" + (
        f" (error: {run.error!r})" if run.error else "")


def assert_calls(model: ScriptedModel, n: int, agent: str | None = None) -> None:
    """The scripted model got ``n`` requests (from ``agent``, or from every agent when None).

    Args:
        model: The scripted model.
        n: The expected number of requests, retries included.
        agent: Count only this agent's.

    Raises:
        AssertionError: Another count.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel, assert_calls
        >>> model = ScriptedModel({"critic": ["Looks good.", "Ship it."]})
        >>> _ = RoundRobinSwarm(agents=[model.agent("critic")], max_loops=2).run("Review the draft.")
        >>> assert_calls(model, 2, "critic")
        >>> assert_calls(model, 1)
        Traceback (most recent call last):
        ...
        AssertionError: all agents made 2 model call(s), expected 1...
    """
    got = model.calls(agent)
    who = f"agent {agent!r}" if agent else "all agents"
    assert got == n, f"{who} made {got} model call(s), expected {n}"




# ---- matchers for trace and id comparisons ----
class _Matcher:
    def __init__(self, name: str, test: Callable[[object], bool]):
        self.name, self.test = name, test

    def __eq__(self, other: object) -> bool:
        return self.test(other)

    def __ne__(self, other: object) -> bool:
        return not self.test(other)

    def __repr__(self) -> str:
        return self.name

    __hash__ = None  # type: ignore[assignment]  # unhashable, as == here is a match, not equality


ANY = _Matcher("ANY", lambda x: True)
ANY_TIME = _Matcher("ANY_TIME", lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and x >= 0)
ANY_ID = _Matcher("ANY_ID", lambda x: isinstance(x, str) and bool(x) and " " not in x)


def assert_trace(run: RunResult, expected: Sequence[dict[str, object]]) -> None:
    """Compare ``run.trace`` (as dicts) with ``expected``, step by step.

    Use ``ANY``, ``ANY_TIME``, ``ANY_ID`` (from ``fsmchat.testing``) for volatile fields, and leave
    out keys you do not care about.

    Args:
        run: The run's result.
        expected: One dict per trace event (``step``, ``state``, ``trigger``, ``dest``, ``t``,
            ``payload``), each with the keys to compare.

    Raises:
        AssertionError: The traces differ (or differ in length).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ANY_TIME, assert_trace
        >>> def writer(turn):
        ...     return "Draft: we launch in May."
        >>> result = RoundRobinSwarm(agents=[writer]).execute("Announce the launch.")
        >>> assert_trace(result, [{"state": "seed", "dest": "writer"},
        ...                       {"state": "writer", "trigger": "max_loops", "payload": "writer", "t": ANY_TIME},
        ...                       {"state": "stop", "dest": None}])
    """
    actual = [e.to_dict() for e in run.trace]
    trimmed = [{k: a[k] for k in e} for a, e in zip(actual, expected)]
    if len(actual) != len(expected) or trimmed != list(expected):
        raise AssertionError(f"trace mismatch\nexpected: {list(expected)}\nactual:   {actual}")


# ---- graph snapshots ----
UPDATE_GRAPHS = {"on": False}  # set by pytest --fsmchat-update-graphs (fsmchat.testing.plugin)


def update_graphs_enabled() -> bool:
    return UPDATE_GRAPHS["on"] or os.environ.get("FSMCHAT_UPDATE_GRAPHS", "") not in ("", "0")


def assert_graph_matches(graph: object, path: str | os.PathLike[str]) -> None:
    """The graph's DOT equals the snapshot at ``path``; a missing snapshot is created.

    Rewrite the snapshots with ``pytest --fsmchat-update-graphs`` or ``FSMCHAT_UPDATE_GRAPHS=1``
    when a change is intended.

    Args:
        graph: A ``StateGraph`` or a pattern (its ``graph``).
        path: The snapshot file (``.dot``).

    Raises:
        AssertionError: The graph no longer matches; the diff is shown.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import assert_graph_matches
        >>> def writer(turn):
        ...     return "Draft."
        >>> def editor(turn):
        ...     return "Approved."
        >>> assert_graph_matches(RoundRobinSwarm(agents=[writer, editor]), "graphs/review.dot")  # written
        >>> assert_graph_matches(RoundRobinSwarm(agents=[writer, editor]), "graphs/review.dot")  # compared
        >>> assert_graph_matches(RoundRobinSwarm(agents=[writer]), "graphs/review.dot")
        Traceback (most recent call last):
        ...
        AssertionError: graph 'round_robin' no longer matches graphs/review.dot; if the change is intended, rerun with --fsmchat-update-graphs
        ...
    """
    g = graph if isinstance(graph, StateGraph) else getattr(graph, "graph")  # a pattern's (AttributeError if none)
    if not isinstance(g, StateGraph):
        raise TypeError(f"assert_graph_matches: expected a StateGraph or a pattern, got {type(graph).__name__}")
    p = Path(path)
    dot = g.to_dot()
    if update_graphs_enabled() or not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(dot)
        return
    old = p.read_text()
    if old != dot:
        diff = "\n".join(difflib.unified_diff(old.splitlines(), dot.splitlines(), str(p), "current graph",
                                              lineterm=""))
        raise AssertionError(f"graph {g.name!r} no longer matches {p}; if the change is intended, rerun with "
                             f"--fsmchat-update-graphs\n{diff}")


