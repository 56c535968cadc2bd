"""Fan-out (target 3): the wall time of one GroupChat turn when N = 8 agents bid and each
model answers after 100 ms. Every agent bids every turn, concurrently, so a turn's floor is one
model latency (100 ms) plus the work of N bids; the target is <= 1.1 x 100 ms.

Measured in the same run, interleaved, ``max_loops=11`` (10 bidding turns, every bid 0.9 with a
message, so the recency penalty hands the floor on and every turn posts):
- **floor**: ``floors.group_chat_floor``, a plain asyncio loop gathering the same 8 callables;
- **fsmchat, callable agents**: ``async def`` participants that sleep 0.1 s and return a ``Bid``;
- **fsmchat, litellm**: ``Agent``s on ``fsmchat.testing.ScriptedModel`` answering
  ``Delay(0.1, Bid(...))``, so every bid is a real ``litellm.acompletion`` through a custom
  provider (the forced ``respond`` tool call, parsing, usage); also at N = 2 and 4, to separate
  litellm's per-call CPU (it grows with N) from the latency (it does not).
A turn is (run wall time) / (turns posted); CPU is ``process_time`` over the same span.

    .venv/bin/python bench/fanout.py [--quick] [--write]
"""
from __future__ import annotations

import asyncio
import gc
from time import perf_counter, process_time
from typing import Any, Callable

from common import cli_args, finish, machine_line, median, status, version
from floors import group_chat_floor, sleeping_agent
from fsmchat import Bid, GroupChat

LATENCY, MAX_LOOPS, N = 0.1, 11, 8


def names(n: int) -> list[str]:
    return [f"Agent{i + 1}" for i in range(n)]


def run_floor(n: int) -> tuple[float, float, int]:
    agents = [sleeping_agent(a, LATENCY) for a in names(n)]

    async def go() -> tuple[float, float, int]:
        t0, c0 = perf_counter(), process_time()
        rows = await group_chat_floor("Discuss the plan.", agents, MAX_LOOPS)
        return perf_counter() - t0, process_time() - c0, len(rows) - 1
    gc.collect()
    return asyncio.run(go())


def run_chat(make: Callable[[], GroupChat]) -> tuple[float, float, int]:
    chat = make()
    chat.graph  # compile outside the timed span

    async def go() -> tuple[float, float, int]:
        t0, c0 = perf_counter(), process_time()
        res = await chat.aexecute("Discuss the plan.")
        assert res.error is None and res.stop_reason == "max_loops", (res.stop_reason, res.error)
        return perf_counter() - t0, process_time() - c0, len(res.transcript) - 1
    gc.collect()
    return asyncio.run(go())


def callable_chat(n: int) -> Callable[[], GroupChat]:
    return lambda: GroupChat(agents=[sleeping_agent(a, LATENCY) for a in names(n)], max_loops=MAX_LOOPS)


def litellm_chat(n: int) -> Callable[[], GroupChat]:
    def make() -> GroupChat:
        from fsmchat.testing import Delay, ScriptedModel

        # a fresh model per run: ScriptedModel keeps every request (and counts them per call)
        sm = ScriptedModel(fn=lambda req: Delay(LATENCY, Bid(0.9, f"{req.agent} speaks")), name="fanout")
        return GroupChat(agents=[sm.agent(a) for a in names(n)], max_loops=MAX_LOOPS)
    return make


def measure(reps: int) -> tuple[str, list[dict[str, Any]]]:
    cases: dict[str, Callable[[], tuple[float, float, int]]] = {
        "floor": lambda: run_floor(N),
        "callable": lambda: run_chat(callable_chat(N)),
        "litellm": lambda: run_chat(litellm_chat(N)),
        "litellm N=4": lambda: run_chat(litellm_chat(4)),
        "litellm N=2": lambda: run_chat(litellm_chat(2)),
    }
    for f in cases.values():  # warm-up (imports litellm, compiles graphs)
        f()
    wall: dict[str, list[float]] = {k: [] for k in cases}
    cpu: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(reps):
        for k, f in cases.items():
            dt, c, turns = f()
            assert turns == MAX_LOOPS - 1, (k, turns)
            wall[k].append(dt / turns * 1e3)
            cpu[k].append(c / turns * 1e3)
    ms = {k: median(v) for k, v in wall.items()}
    cms = {k: median(v) for k, v in cpu.items()}
    goal = 1.1 * LATENCY * 1e3
    # litellm's CPU per call: the slope of CPU per turn against N (least squares over N = 2, 4, 8);
    # the intercept is the per-turn work that does not grow with N
    pts = [(2, cms["litellm N=2"]), (4, cms["litellm N=4"]), (N, cms["litellm"])]
    mx, my = sum(x for x, _ in pts) / 3, sum(y for _, y in pts) / 3
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    intercept = my - slope * mx
    own_per_bid = (cms["callable"] - cms["floor"]) / N
    label = {"floor": f"floor: plain asyncio loop, N={N} callables", "callable": f"fsmchat GroupChat, N={N} callable agents",
             "litellm": f"fsmchat GroupChat, N={N} litellm Agents (ScriptedModel)",
             "litellm N=4": "fsmchat GroupChat, N=4 litellm Agents", "litellm N=2": "fsmchat GroupChat, N=2 litellm Agents"}
    lines = [machine_line(reps, f"litellm {version('litellm')}") +
             f" Model latency {LATENCY * 1e3:.0f} ms, {MAX_LOOPS - 1} turns per run.", "",
             "| case | ms per turn | / latency | CPU ms per turn | goal <= 110 ms |",
             "|---|---:|---:|---:|---|"]
    for k in cases:
        lines.append(f"| {label[k]} | {ms[k]:.1f} | {ms[k] / (LATENCY * 1e3):.3f}x | {cms[k]:.2f} | "
                     f"{status(ms[k] <= goal)} |")
    lines += ["",
              f"- fsmchat's own cost per turn (callable agents, N={N}) over the floor: "
              f"{ms['callable'] - ms['floor']:+.2f} ms wall, {cms['callable'] - cms['floor']:+.2f} ms CPU.",
              f"- litellm's CPU per call, the slope of CPU per turn over N = 2, 4, {N}: **{slope:.2f} ms** (intercept "
              f"{intercept:.1f} ms per turn), against fsmchat's own {own_per_bid * 1e3:.0f} µs per bid over the floor. "
              "All N bids of a turn run on the one event-loop thread, so a turn costs about latency + N x that CPU "
              "(here " + f"{LATENCY * 1e3:.0f} + {N} x {slope:.1f} = {LATENCY * 1e3 + N * slope:.0f} ms): the fan-out "
              "hides the latency, not litellm's CPU.",
              "- swarms' GroupChat could not be run offline here (it is not installed: it pulls its own "
              "dependency tree and reaches its models by name), so the comparison is with the floor: its "
              "page collects bids concurrently too, so it cannot beat one latency per turn."]
    rows = [{"target": "3. Fan-out", "measure": f"ms per GroupChat turn, N={N}, 100 ms model, {label[k].split(', ', 1)[1]}",
             "fsmchat": round(ms[k], 1), "floor": round(ms["floor"], 1), "langgraph": None,
             "ratio": f"{ms[k] / (LATENCY * 1e3):.2f}x latency" + (f"; litellm {slope:.1f} ms CPU per call"
                                                                     if k == "litellm" else ""),
             "goal": "<= 110 ms", "ok": ms[k] <= goal,
             "command": ".venv/bin/python bench/fanout.py --write"} for k in ("callable", "litellm")]
    return "\n".join(lines), rows


def main() -> None:
    args = cli_args(__doc__, "5 repetitions instead of 9")
    text, rows = measure(5 if args.quick else 9)
    finish("fanout", {"fanout": text}, rows, args.write)


if __name__ == "__main__":
    main()
