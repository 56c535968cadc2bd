"""A pattern is a declaration and a run object (issue 43): ``Pattern`` and its fsmchat bases define
at most 25 functions, none of them run code; the run API is written once, on ``PatternRun``, and
each of its spellings on a pattern is a ``RunMethod`` that hands the call to a fresh run object;
a pattern compiles its graph, draws it and says its config with no run object at all."""
from __future__ import annotations

import inspect

import pytest

from fsmchat import Pattern, RoundRobinSwarm
from fsmchat.patterns import runner
from fsmchat.patterns.runner import PatternRun, RunMethod

# every function defined in the body of Pattern and of its fsmchat bases: methods, properties
# (one each), dunders, abstract hooks; the run API's spellings are RunMethod attributes, below
DECLARATION = {
    "__init_subclass__", "__init__", "_compile", "_context", "_calls_by_speaker", "_validate", "_check_run",
    "check", "new_context", "output_of", "calls_by_speaker", "fill_result", "graph", "_speaking_states",
    "context_policy", "set_interrupts", "_wait_point", "waits_for_people", "_check_context", "_check_checkpointed",
    "_repr_fields", "__repr__", "_repr_mimebundle_", "with_limits", "to_config",
}
RUN_API = {"run", "arun", "execute", "aexecute", "resume", "aresume", "stream", "astream", "run_batch",
           "arun_batch", "preflight", "check_task", "max_calls"}


def functions_of(cls: type) -> set[str]:
    """The functions defined in the bodies of ``cls`` and its fsmchat bases, by name."""
    found = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] != "fsmchat":
            continue
        for name, value in vars(klass).items():
            if isinstance(value, (classmethod, staticmethod)):
                value = value.__func__
            if inspect.isfunction(value) or isinstance(value, property):
                found.add(name)
    return found


def test_the_declaration_defines_at_most_25_functions_and_no_run_code():
    declared = functions_of(Pattern)
    assert declared == DECLARATION
    assert len(declared) <= 25
    assert not declared & RUN_API


def test_each_run_spelling_is_the_run_objects_method():
    spellings = {name for name, value in vars(Pattern).items() if isinstance(value, RunMethod)}
    assert spellings == RUN_API
    for name in RUN_API:
        assert getattr(RoundRobinSwarm, name) is getattr(PatternRun, name)  # help() shows the run object's
    swarm = RoundRobinSwarm(agents=[lambda turn: "ok"])
    bound = swarm.execute
    assert type(bound.__self__) is PatternRun and bound.__self__.pattern is swarm
    assert swarm.execute is not swarm.execute  # a fresh run object per call: runs share no state
    assert inspect.signature(swarm.run_batch).parameters["max_concurrency"].default == 16


def test_a_declaration_compiles_its_graph_with_no_run_object(monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("the declaration made a run object")

    monkeypatch.setattr(runner.PatternRun, "__init__", no_run)

    def poet(turn):
        return "A line."

    def critic(turn):
        return "Fine."

    swarm = RoundRobinSwarm(agents=[poet, critic], max_loops=2)
    assert list(swarm.graph.states) == ["seed", "poet", "critic", "stop"]
    assert [(t.source, t.dest) for t in swarm.graph.transitions] == [("seed", "poet"), ("poet", "critic"),
                                                                      ("critic", "poet"), ("critic", "stop")]
    assert [(s.name, n) for s, n in swarm.calls_by_speaker()] == [("poet", 2), ("critic", 2)]
    assert swarm.waits_for_people == []
    assert "4 states" in repr(swarm)
    with pytest.raises(AssertionError, match="made a run object"):
        swarm.run("Write a poem.")


def test_a_field_set_later_compiles_the_graph_again():
    def poet(turn):
        return "A line."

    swarm = RoundRobinSwarm(agents=[poet])
    first = swarm.graph
    assert swarm.graph is first  # compiled once
    swarm.max_loops = 3
    assert swarm.graph is not first and swarm.config.max_loops == 3
