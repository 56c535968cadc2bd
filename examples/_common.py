"""Shared printing for the examples (files starting with _ are not gallery entries)."""
import os
from typing import Any


def task(default: str) -> str:
    """The example's task, or ``FSMCHAT_TASK`` (``fsmchat run ... --task``)."""
    return os.environ.get("FSMCHAT_TASK", default)


def intro(agent: Any, text: str) -> Any:
    """an introduction: the reply is thrown away (not posted) but stays in the agent's memory"""
    from fsmchat import Task

    return Task(agent=agent, name=f"{agent.name}_intro", post=False, action=text)


def count(name: str, value: Any, note: str = "") -> int:
    """``value`` as a round count: an int (not a bool), else a TypeError naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int{note}, got {value!r}")
    return value


def show(pattern: Any, default_task: str) -> None:
    """Run a conversation pattern; print its output, why it stopped, the calls and the path."""
    result = pattern.execute(task(default_task))
    if result.error is not None:
        raise result.error
    print(result.output)
    print(f"\n-- stopped: {result.stop_reason} after {len(result.transcript)} messages, "
          f"{result.calls} model calls; path: {' -> '.join(result.path)}")


def report(flow: Any, default_task: str) -> None:
    """Run a flow; print each step, its formatted output (when it has an ``output_type``), the
    status, the calls against the worst case."""
    result = flow.execute(task(default_task))
    out = result.output
    for step in out["steps"]:
        print(f"[{step['name']}] ({step['status']}) {step['output']}")
    if getattr(flow, "output_type", None) is not None:
        print(f"\n-- output ({flow.output_type}):\n{out['output']}")
    print(f"\n-- status: {out['status']}, stop: {result.stop_reason}, {result.calls} model calls "
          f"(worst case {flow.max_calls()}), {len(result.path)} states")
    if result.error is not None:
        raise result.error
