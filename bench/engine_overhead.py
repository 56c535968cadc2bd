"""Engine overhead: per-turn cost of ``fsmchat.engine.run_graph`` against a plain asyncio floor.

Workload: a round robin of 3 instant async agents (each appends ``(name, text)`` to ``ctx.rows``
and bumps ``ctx.t``) for T turns: states A, B, C, final ``stop``; each goes to the next when
``more`` (``ctx.t < ctx.T``), else to ``stop`` ("turns"). The floor is a plain async loop doing
the same work: same actions, same guard, one trace tuple (with a timestamp) per step. Timing is
inside the coroutine (loop start-up excluded), one fresh context and ``asyncio.run`` per
repetition, graph built once, engine and floor interleaved; medians are reported.

    .venv/bin/python bench/engine_overhead.py [--quick] [--profile] [--write]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import datetime
import gc
import io
import os
import platform
import pstats
import re
import statistics
import sysconfig
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any, Awaitable, Callable

import transitions

from fsmchat.engine import run_graph
from fsmchat.graph import StateGraph

NAMES, TURNS = ("A", "B", "C"), (300, 1000, 3000)
DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


@dataclass(slots=True)
class Ctx:
    T: int
    t: int = 0
    rows: list[tuple[str, str]] = field(default_factory=list)


def make_agent(name: str) -> Callable[[Ctx], Awaitable[str]]:
    async def agent(ctx: Ctx) -> str:
        """an instant agent: posts one row"""
        text = f"{name} says {ctx.t}"
        ctx.rows.append((name, text))
        ctx.t += 1
        return text
    return agent


def more(ctx: Ctx) -> bool:
    return ctx.t < ctx.T


AGENTS = [make_agent(n) for n in NAMES]


def build_graph() -> StateGraph:
    g = StateGraph("round_robin")
    for name, agent in zip(NAMES, AGENTS):
        g.state(name, agent)
    g.final("stop")
    for i, name in enumerate(NAMES):
        g.edge(name, NAMES[(i + 1) % len(NAMES)], when=more, label="more")
        g.edge(name, "stop", label="turns")
    return g


async def engine(g: StateGraph, ctx: Ctx, prof: cProfile.Profile | None = None) -> float:
    t0 = perf_counter()
    if prof:
        prof.enable()
    res = await run_graph(g, ctx)
    if prof:
        prof.disable()
    dt = perf_counter() - t0
    assert res.stop_reason == "turns" and len(ctx.rows) == ctx.T, (res.stop_reason, res.error)
    return dt


async def floor(g: StateGraph, ctx: Ctx) -> float:
    t0 = perf_counter()
    trace: list[tuple[Any, ...]] = []
    n = i = 0
    while True:
        name, payload = NAMES[i], await AGENTS[i](ctx)
        if not more(ctx):
            trace.append((n, name, "turns", "stop", perf_counter() - t0, payload))
            break
        i = (i + 1) % len(NAMES)
        trace.append((n, name, "more", NAMES[i], perf_counter() - t0, payload))
        n += 1
    dt = perf_counter() - t0
    assert len(ctx.rows) == ctx.T == len(trace)
    return dt


RUNS: dict[str, Callable[[StateGraph, Ctx], Awaitable[float]]] = {"fsmchat": engine, "floor": floor}


def peak_kib(run: Callable[[StateGraph, Ctx], Awaitable[float]], g: StateGraph, T: int) -> float:
    async def measured() -> int:
        ctx = Ctx(T)
        tracemalloc.start()
        await run(g, ctx)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak
    gc.collect()
    return asyncio.run(measured()) / 1024


def table(g: StateGraph, reps: int) -> str:
    for run in RUNS.values():  # warm-up: compiles the graph, warms caches
        asyncio.run(run(g, Ctx(TURNS[0])))
    times: dict[tuple[str, int], list[float]] = {(k, T): [] for k in RUNS for T in TURNS}
    for _ in range(reps):
        for T in TURNS:
            for k, run in RUNS.items():
                gc.collect()
                times[k, T].append(asyncio.run(run(g, Ctx(T))) / T * 1e6)
    us = {key: statistics.median(v) for key, v in times.items()}
    mem = {k: peak_kib(run, g, TURNS[-1]) for k, run in RUNS.items()}
    lo, hi = TURNS[0], TURNS[-1]
    flat = {k: us[k, hi] / us[k, lo] for k in RUNS}
    lines = [f"Measured {datetime.date.today().isoformat()} on {os.cpu_count()} cores (`nproc` = "
             f"{len(os.sched_getaffinity(0))}), {platform.machine()}, Python {platform.python_version()}, "
             f"transitions {transitions.__version__}; median of {reps} repetitions, microseconds per turn.",
             "", "| T (turns) | fsmchat µs/turn | plain asyncio floor µs/turn | fsmchat / floor |",
             "|---:|---:|---:|---:|"]
    lines += [f"| {T} | {us['fsmchat', T]:.2f} | {us['floor', T]:.2f} | {us['fsmchat', T] / us['floor', T]:.1f}x |"
              for T in TURNS]
    lines += ["", f"- Flatness, per-turn at T={hi} / T={lo}: fsmchat {flat['fsmchat']:.2f}, floor "
              f"{flat['floor']:.2f} (1.00 = flat).",
              f"- Peak traced memory at T={hi} (tracemalloc, inside the run): fsmchat {mem['fsmchat']:.0f} KiB, "
              f"floor {mem['floor']:.0f} KiB ({mem['fsmchat'] / mem['floor']:.2f}x).",
              f"- Goal (<= 20 µs/turn at T={hi}, flat within 10%): "
              f"{'met' if us['fsmchat', hi] <= 20 and abs(flat['fsmchat'] - 1) <= 0.1 else 'NOT met'}."]
    return "\n".join(lines)


def profile(g: StateGraph, top: int = 8) -> str:
    gc.collect()
    prof = cProfile.Profile()
    asyncio.run(engine(g, Ctx(TURNS[-1]), prof))
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    for prefix in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"], str(DOC.parents[1])):
        text = text.replace(prefix + os.sep, "")
    head = text[:text.index("ncalls")].split("\n")[0].strip()  # "N function calls in S seconds"
    body = text[text.index("ncalls") - 3:].rstrip()
    return (f"cProfile of one engine run at T={TURNS[-1]} ({head}; the profiler inflates every "
            f"call, so read shares, not absolute times), top {top} by tottime:\n\n```\n{body}\n```")


def replace(doc: str, key: str, body: str) -> str:
    start, end = f"<!-- {key}:start -->", f"<!-- {key}:end -->"
    block = f"{start}\n{body}\n{end}"
    if start in doc and end in doc:
        return re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, doc, flags=re.S)
    return doc.rstrip() + "\n\n" + block + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 repetitions instead of 9")
    ap.add_argument("--profile", action="store_true", help="also print a cProfile of one engine run")
    ap.add_argument("--write", action="store_true", help="rewrite the marked sections of docs/benchmarks.md")
    args = ap.parse_args()
    g = build_graph()
    tbl = table(g, 3 if args.quick else 9)
    print(tbl)
    prof = profile(g) if args.profile or args.write else ""
    print(f"\n{prof}" if prof else "", end="\n" if prof else "")
    if args.write:
        doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
        DOC.write_text(replace(replace(doc, "engine_overhead", tbl), "engine_profile", prof))
        print(f"\nwrote {DOC}")


if __name__ == "__main__":
    main()
