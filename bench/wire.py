"""The fast path's CPU per model call, beside litellm's and raw aiohttp's, in one run.

One forced ``respond`` bid per call (what a GroupChat agent sends) with 100 and 1,000 messages,
to a local OpenAI-compatible server in a child process (tests/support/openai_server.py; its CPU is not
counted), three ways:

- **fast path**: ``llm.acomplete(..., transport="fast")``: fsmchat's whole call (retry loop,
  usage, cost) over aiohttp (fsmchat.speakers.wire);
- **litellm**: the same call with ``transport="litellm"`` (``litellm.acompletion``, fsmchat's lean
  settings);
- **raw aiohttp**: ``ClientSession.post`` of the same body and ``json.loads`` of the answer, nothing else.

CPU is ``time.process_time`` (every thread: litellm runs part of each call in a worker thread) over
``K`` calls after warm-up calls, in one event loop; the cases are interleaved (each repetition
measures every case at every size in turn) and the median of 5 repetitions is shown, with each
case's ratio to litellm's figure from the same run. ``import aiohttp``'s own cost, paid by the
first fast call of a process, is measured in a fresh interpreter.

    .venv/bin/python bench/wire.py [--quick] [--write]
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, ROOT, finish, machine_line, median, status, version  # noqa: E402
from litellm_cost import conversation, server  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's fsmchat, whichever is installed

SIZES = (100, 1000)
GOALS = {100: 1.5, 1000: 3.0}  # ms of CPU per fast-path call
CASES = ("fast path", "litellm", "raw aiohttp")
MODEL = "openai/test-model"


def import_cost_ms() -> float:
    """``import aiohttp`` in a fresh interpreter that has loaded asyncio, json and pydantic (ms, wall)."""
    code = ("import asyncio, json, pydantic, time; t = time.perf_counter(); import aiohttp; "
            "print((time.perf_counter() - t) * 1e3)")
    return median(float(subprocess.run([PY, "-c", code], capture_output=True, text=True, check=True).stdout)
                  for _ in range(3))


async def measure(api_base: str, reps: int, k: int) -> dict[str, dict[int, list[float]]]:
    import aiohttp

    from fsmchat.speakers import llm, wire
    from fsmchat.speakers.respond import RESPOND_TOOL, RESPOND_TOOL_CHOICE

    kwargs = {"api_base": api_base, "api_key": "sk-bench"}
    stats = llm.CallStats()
    raw_session = aiohttp.ClientSession()
    url = api_base + "/chat/completions"

    def through(transport: str, messages: list[dict[str, Any]]) -> Callable[[], Awaitable[Any]]:
        async def call() -> Any:
            return await llm.acomplete(MODEL, messages, agent="Alice", kwargs=kwargs, timeout=30, num_retries=0,
                                       stats=stats, transport=transport, tools=[RESPOND_TOOL],
                                       tool_choice=RESPOND_TOOL_CHOICE)
        return call

    def raw(messages: list[dict[str, Any]]) -> Callable[[], Awaitable[Any]]:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}

        async def call() -> Any:
            body = {"model": "test-model", "messages": messages, "tools": [RESPOND_TOOL],
                    "tool_choice": RESPOND_TOOL_CHOICE}
            async with raw_session.post(url, data=json.dumps(body), headers=headers) as resp:
                return json.loads(await resp.read())
        return call

    calls = {(case, n): (through("fast", conversation(n)) if case == "fast path" else
                         through("litellm", conversation(n)) if case == "litellm" else raw(conversation(n)))
             for case in CASES for n in SIZES}
    for call in calls.values():  # warm-up: imports, sessions, litellm's first-call work
        for _ in range(3):
            await call()
    await asyncio.sleep(0.05)
    out: dict[str, dict[int, list[float]]] = {case: {n: [] for n in SIZES} for case in CASES}
    for _ in range(reps):
        for n in SIZES:
            for case in CASES:
                call = calls[(case, n)]
                c0 = time.process_time()
                for _ in range(k):
                    await call()
                await asyncio.sleep(0.01)  # litellm's logging tasks of these calls
                out[case][n].append((time.process_time() - c0) / k * 1e3)
    await raw_session.close()
    await wire.aclose()
    return out


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls per repetition")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    args = ap.parse_args()
    os.environ.setdefault("FSMCHAT_CHECK_KEYS", "0")
    reps, k = 5, (10 if args.quick else 40)
    head = machine_line(reps, f"litellm {version('litellm')}, aiohttp {version('aiohttp')}")
    with server() as api_base:
        cpu = asyncio.run(measure(api_base, reps, k))
    imp = import_cost_ms()
    ms = {case: {n: median(cpu[case][n]) for n in SIZES} for case in CASES}
    lines = ["| client | CPU per call, 100 messages | vs litellm | CPU per call, 1,000 messages | vs litellm |",
             "|---|---:|---:|---:|---:|"]
    for case in CASES:
        cells = []
        for n in SIZES:
            cells += [f"{ms[case][n]:.2f} ms", f"{ms[case][n] / ms['litellm'][n]:.2f}x"]
        name = {"fast path": "fsmchat fast path (`transport=\"fast\"`)",
                "litellm": "fsmchat through litellm (`transport=\"litellm\"`)",
                "raw aiohttp": "raw `aiohttp` post + `json` (the floor)"}[case]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    goal_txt = "; ".join(f"{n:,} messages {ms['fast path'][n]:.2f} ms (goal <= {GOALS[n]} ms: "
                         f"{status(ms['fast path'][n] <= GOALS[n])})" for n in SIZES)
    text = "\n".join([
        "## The fast path: CPU per model call", "",
        "`.venv/bin/python bench/wire.py [--quick] [--write]`. One forced `respond` bid per call to a local "
        "OpenAI-compatible server in a child process (its CPU is not counted): fsmchat's whole call over the "
        "fast path (aiohttp, the body as given), the same call through litellm, and a bare aiohttp post of the "
        "same body. CPU is `process_time` (all threads), cases interleaved, in one event loop after warm-up "
        "calls; the ratios, taken within the run, are what to compare on a loaded machine.", "",
        head + f" {k} calls per case per repetition.", "",
        *lines, "",
        f"- Fast path: {goal_txt}; {ms['fast path'][100] / ms['raw aiohttp'][100]:.2f}x the raw floor at 100 "
        f"messages, {ms['fast path'][1000] / ms['raw aiohttp'][1000]:.2f}x at 1,000.",
        f"- `import aiohttp`, paid once by a process's first fast call (never by `import fsmchat`): {imp:.0f} ms.",
    ])
    cmd = ".venv/bin/python bench/wire.py --write"
    rows = [{"target": "Fast path per call", "measure": f"CPU ms per fast-path call, local HTTP server, {n:,} messages",
             "fsmchat": round(ms["fast path"][n], 2), "floor": round(ms["raw aiohttp"][n], 2), "langgraph": None,
             "ratio": f"litellm {ms['litellm'][n]:.2f} ms ({ms['fast path'][n] / ms['litellm'][n]:.2f}x)",
             "goal": f"<= {GOALS[n]} ms", "ok": ms["fast path"][n] <= GOALS[n], "command": cmd} for n in SIZES]
    finish("wire", {"wire": text}, rows, args.write)


if __name__ == "__main__":
    main()
