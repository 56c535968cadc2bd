"""Shared printing for the flow examples (files starting with _ are not gallery entries)."""
import os


def task(default: str) -> str:
    return os.environ.get("FSMCHAT_TASK", default)


def report(flow, inp: str) -> None:
    result = flow.execute(inp)
    out = result.output
    for step in out["steps"]:
        print(f"[{step['name']}] ({step['status']}) {step['output']}")
    print(f"\n-- status: {out['status']}, stop: {result.stop_reason}, {result.calls} model calls "
          f"(worst case {flow.max_calls()}), {len(result.path)} states")
    if result.error is not None:
        raise result.error
