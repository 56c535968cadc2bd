"""fsmchat's own share of a model-backed GroupChat turn on the fast path: the figure, then where it goes.

**The figure** (no profiler): the batch of ``bench/compare.py`` (GroupChats of N=3 and N=8 agents,
5 turns, 20 at once, every agent bidding every turn, against a local OpenAI-compatible server in a
child process answering after 50 ms) run by two clients, each in its own interpreter: fsmchat's
fast path (``GroupChat.run_batch`` of ``Agent(model="openai/...", api_base=...)``) and the raw
aiohttp floor (the same requests posted with ``aiohttp`` and read with ``json``, the winner chosen
in a few lines). A client runs one warm-up batch, a full collection (``gc.collect()``), then
``BATCHES`` measured batches, timed by its process's CPU clock (``time.process_time``); the
collector's own CPU time is timed too (``gc.callbacks``), as part of that total. The two clients
alternate in order within each repetition, and the server counts every client's requests (asserted
equal). fsmchat's own share is ``1 - floor CPU per call / fsmchat CPU per call`` of the same
repetition; the median over repetitions is shown. Before the timing, one chat of each client is
sent to a recording server and their request bodies are asserted equal (same JSON, same length).

**Where it goes** (cProfile, an upper bound): the fast-path batch run under ``cProfile`` after a
warm-up batch; every function's own time (``tottime``) is put in the group of the file it is
defined in: ``fsmchat/``, ``aiohttp``/``yarl``/``multidict``, ``json``, ``asyncio`` (with
``selectors``/``socket``/``ssl``), pydantic, other. A builtin's time (``len``, ``dict.get``, a
socket's ``send``, a collection the allocation triggered) goes to the group of its callers, in
proportion to what each caller spent in it. cProfile inflates Python-heavy code more than C, so
fsmchat's profiled share is larger than the measured one; it says which functions the CPU is in.

    .venv/bin/python bench/own_share.py [--quick] [--write]
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import pstats
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402
from common import PY, ROOT, finish, machine_line, median, status  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's fsmchat
GOAL = 0.05
FAST, RAW = "fsmchat fast path", "raw aiohttp"
BATCHES = 3  # measured batches per client process (after its warm-up batch)
GROUPS = (("fsmchat", ("/fsmchat/",)), ("aiohttp", ("/aiohttp/", "/yarl/", "/multidict/", "/aiohappyeyeballs/",
                                                    "/frozenlist/", "/propcache/")),
          ("json", ("/json/",)), ("asyncio", ("/asyncio/", "selectors.py", "socket.py", "ssl.py")),
          ("pydantic", ("/pydantic/", "/pydantic_core/")))


# ---- a client (its own interpreter) --------------------------------------------------------------
class CollectorClock:
    """The CPU time the garbage collector takes, and its collections by generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.cpu, self.started = 0.0, 0.0
        self.collections = [0, 0, 0]

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.started = time.process_time()
        else:
            self.cpu += time.process_time() - self.started
            self.collections[info["generation"]] += 1


def batch_of(case: str, api_base: str, n: int, tasks: list[str]) -> Callable[[str], Any]:
    if case == FAST:
        return lambda model: compare.run_fsmchat(api_base, model, n, tasks, "auto")
    return lambda model: asyncio.run(compare.run_raw(api_base, model, n, tasks))


def client(case: str, api_base: str, model: str, n: int, batches: int) -> dict[str, Any]:
    """One warm-up batch, a full collection, then ``batches`` batches timed (CPU, and the collector's part)."""
    go = batch_of(case, api_base, n, [compare.TASK.format(i=i) for i in range(compare.CHATS)])
    if batches == 0:  # the request check: one chat, nothing timed
        batch_of(case, api_base, n, [compare.TASK.format(i="check")])(model)
        return {}
    go("warm-" + model)
    gc.collect()
    clock = CollectorClock()
    gc.callbacks.append(clock)
    c0 = time.process_time()
    for _ in range(batches):
        go(model)
    cpu = time.process_time() - c0
    gc.callbacks.remove(clock)
    return {"cpu": cpu, "gc": clock.cpu, "collections": clock.collections, "tracked": len(gc.get_objects()),
            "litellm": "litellm" in sys.modules}


def run_client(case: str, api_base: str, model: str, n: int, batches: int) -> dict[str, Any]:
    env = {**os.environ, **compare.QUIET_ENV, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([PY, __file__, "--client", case, "--api-base", api_base, "--model", model, "--n", str(n),
                           "--batches", str(batches)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    if proc.returncode:
        raise SystemExit(f"{case} N={n} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


# ---- the same requests ---------------------------------------------------------------------------
def same_requests() -> str:
    """One chat of each client (N=3 and N=8) to a recording server: their request bodies must be the
    same JSON, of the same length (fsmchat's model name and the floor's aside); returns what was checked."""
    sys.path.insert(0, str(ROOT / "tests"))
    from openai_server import OpenAIServer, respond

    checked = []
    with OpenAIServer(default=respond(0.9, compare.REPLY), max_requests=10_000) as srv:
        for n in compare.SIZES:
            for case in (FAST, RAW):
                run_client(case, srv.api_base, f"same-{n}-{case.split()[0]}", n, 0)
            bodies: dict[str, list[tuple[str, int]]] = {FAST: [], RAW: []}
            for rec in srv.records:
                model = str(rec.body.get("model", ""))
                if model.startswith(f"same-{n}-"):
                    case = FAST if model.endswith("fsmchat") else RAW
                    text = json.dumps({**rec.body, "model": "m"}, sort_keys=True)
                    bodies[case].append((text, int(rec.headers.get("content-length", 0)) - len(model)))
            fast, raw = sorted(bodies[FAST]), sorted(bodies[RAW])
            assert len(fast) == len(raw) == compare.TURNS * n, (n, len(fast), len(raw))
            assert [b for b, _ in fast] == [b for b, _ in raw], f"N={n}: the clients' request bodies differ"
            assert [size for _, size in fast] == [size for _, size in raw], f"N={n}: the bodies' lengths differ"
            checked.append(f"N={n}: {len(fast)} requests")
    return "; ".join(checked)


# ---- the figure ----------------------------------------------------------------------------------
def measure(api_base: str, reps: int, batches: int, counts: Callable[[], dict[str, int]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, int], list[dict[str, Any]]] = {(c, n): [] for c in (FAST, RAW) for n in compare.SIZES}
    for rep in range(reps):
        for n in compare.SIZES:
            order = (FAST, RAW) if rep % 2 == 0 else (RAW, FAST)
            for case in order:
                model = f"share-{rep}-{n}-{case.split()[0]}"
                got = run_client(case, api_base, model, n, batches)
                got["calls"] = counts().get(model, 0)
                print(f"rep {rep + 1} N={n} {case}: {got['calls']} calls, {got['cpu'] / got['calls'] * 1e6:.0f} µs "
                      f"CPU per call ({got['gc'] / got['calls'] * 1e6:.0f} µs collector, full collections "
                      f"{got['collections'][2]})", flush=True)
                out[(case, n)].append(got)
    for (case, n), runs in out.items():  # the same model calls for both clients, counted at the server
        expected = batches * compare.CHATS * compare.TURNS * n
        assert all(r["calls"] == expected for r in runs), (case, n, [r["calls"] for r in runs], expected)
    return out


# ---- where it goes -------------------------------------------------------------------------------
def group_of(filename: str) -> str:
    for name, needles in GROUPS:
        if any(n in filename for n in needles):
            return name
    return "other"


def shares(stats: pstats.Stats) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """Own time per group (builtins charged to their callers' groups) and fsmchat's top functions."""
    groups: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, func), (_cc, _nc, tt, _ct, callers) in raw.items():
        if filename == "~":  # a builtin: charged to its callers' groups, as they spent in it
            total = sum(c[2] for c in callers.values()) or 1.0
            for (cfile, cline, cfunc), c in callers.items():
                groups[group_of(cfile)] += tt * c[2] / total
                if group_of(cfile) == "fsmchat":
                    own[f"{Path(cfile).name}:{cline} {cfunc}"] += tt * c[2] / total
            continue
        groups[group_of(filename)] += tt
        if group_of(filename) == "fsmchat":
            own[f"{Path(filename).name}:{line} {func}"] += tt
    return dict(groups), sorted(((t, f) for f, t in own.items()), reverse=True)


def profile(api_base: str, n: int) -> pstats.Stats:
    tasks = [compare.TASK.format(i=i) for i in range(compare.CHATS)]
    compare.run_fsmchat(api_base, "warm-share", n, tasks, "auto")
    gc.collect()
    prof = cProfile.Profile(time.process_time)  # CPU time: the waits for the server are not counted
    prof.enable()
    compare.run_fsmchat(api_base, f"share-{n}", n, tasks, "auto")
    prof.disable()
    return pstats.Stats(prof)


def where_it_goes(api_base: str) -> list[str]:
    cols = ("fsmchat", "aiohttp", "json", "asyncio", "pydantic", "other")
    lines = ["| N | " + " | ".join(cols) + " |", "|---:|" + "---:|" * len(cols)]
    tops = []
    for n in compare.SIZES:
        groups, top = shares(profile(api_base, n))
        total = sum(groups.values())
        lines.append(f"| {n} | " + " | ".join(f"{groups.get(c, 0.0) / total:.1%}" for c in cols) + " |")
        tops.append(f"- N={n}, fsmchat's top functions (own time, share of the profiled batch): " +
                    "; ".join(f"`{f}` {t / total:.1%}" for t, f in top[:8]) + ".")
    return [*lines, "", *tops]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 repetitions of 1 measured batch")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--api-base", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--batches", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.update(compare.QUIET_ENV)
    if args.client:
        print(json.dumps(client(args.client, args.api_base, args.model, args.n, args.batches)))
        return
    reps, batches = (2, 1) if args.quick else (5, BATCHES)
    checked = same_requests()
    head = machine_line(reps, f"{compare.CHATS} chats at once, {compare.TURNS} turns, "
                              f"{compare.LATENCY * 1e3:.0f} ms server, {batches} measured batch(es) per client")
    with compare.server(compare.LATENCY) as srv:
        runs = measure(srv.api_base, reps, batches, srv.counts)
        load_after = os.getloadavg()[0]
        profiled = where_it_goes(srv.api_base)
    lines = ["| N | model calls per client | fsmchat CPU per call | floor CPU per call | fsmchat beyond the floor | "
             "fsmchat's own share | of which the collector | goal <= 5 % |", "|---:|" + "---:|" * 6 + "---|"]
    rows = []
    for n in compare.SIZES:
        fast, raw = runs[(FAST, n)], runs[(RAW, n)]
        per = {c: [r["cpu"] / r["calls"] for r in runs[(c, n)]] for c in (FAST, RAW)}
        own = median(1 - f_raw / f_fast for f_fast, f_raw in zip(per[FAST], per[RAW]))
        collector = median((f["gc"] - r["gc"]) / f["cpu"] for f, r in zip(fast, raw))
        beyond = median(f - r for f, r in zip(per[FAST], per[RAW]))
        lines.append(f"| {n} | {fast[0]['calls']:,} | {median(per[FAST]) * 1e6:.0f} µs | {median(per[RAW]) * 1e6:.0f} µs"
                     f" | {beyond * 1e6:.0f} µs | {own:.1%} | {collector:.1%} | {status(own <= GOAL)} |")
        rows.append({"target": "fsmchat-own CPU share", "measure": f"1 - floor CPU / fsmchat CPU per model call, "
                     f"fast-path GroupChat batches, N={n} (no profiler, same run)", "fsmchat": f"{own:.1%}",
                     "floor": f"{median(per[RAW]) * 1e6:.0f} µs/call", "langgraph": None,
                     "ratio": f"fsmchat {median(per[FAST]) * 1e6:.0f} µs/call, {beyond * 1e6:.0f} µs beyond the floor",
                     "goal": "<= 5 %", "ok": own <= GOAL, "command": ".venv/bin/python bench/own_share.py --write"})
    gcs = "; ".join(f"N={n}: fsmchat {median(r['gc'] / r['calls'] for r in runs[(FAST, n)]) * 1e6:.0f} µs per call "
                    f"({median(r['collections'][2] for r in runs[(FAST, n)]):.0f} full collections, "
                    f"{median(r['tracked'] for r in runs[(FAST, n)]):,.0f} objects tracked), floor "
                    f"{median(r['gc'] / r['calls'] for r in runs[(RAW, n)]) * 1e6:.0f} µs "
                    f"({median(r['tracked'] for r in runs[(RAW, n)]):,.0f} tracked)" for n in compare.SIZES)
    text = "\n".join([
        "## fsmchat's own share of a model-backed turn (fast path)", "",
        "`.venv/bin/python bench/own_share.py [--write]`. fsmchat's fast path and the raw aiohttp floor run the "
        f"batch of `bench/compare.py` ({compare.CHATS} GroupChats at once, {compare.TURNS} turns, every agent "
        f"bidding every turn) against the same local server ({compare.LATENCY * 1e3:.0f} ms per request, a child "
        f"process), each client in its own interpreter: a warm-up batch, a full collection, then {batches} measured "
        "batch(es) on the process's CPU clock. The two alternate in order in each repetition; the server's request "
        "counts are asserted equal, and one chat of each to a recording server first sends the same request bodies "
        f"(same JSON, same length: {checked}). fsmchat's own share is `1 - floor CPU per call / fsmchat CPU per "
        "call` of the same repetition (median shown); \"of which the collector\" is the garbage collector's extra "
        "CPU in fsmchat's process over the floor's, as a share of fsmchat's.", "",
        "The floor does less than a client must: it sends no timeout, reads no status code, usage or cost, retries "
        "nothing and keeps no run record (no events, no checkpoint, no transcript beyond the chat's own); fsmchat "
        "does all of these, and its process holds litellm's import (its cost map and error mapping).", "",
        f"{head} Load average {load_after:.2f} after the timed runs.", "",
        *lines, "",
        f"The collector: {gcs}.", "",
        "### Where it goes (cProfile, an upper bound)", "",
        "The fast-path batch profiled (cProfile on the process's CPU clock) after a warm-up batch and a full "
        "collection; each function's own time is counted to the package its file belongs to, a builtin's to its "
        "callers' packages (a collection goes to the function whose allocation started it).", "",
        *profiled,
    ])
    finish("own_share", {"own_share": text}, rows, args.write)


if __name__ == "__main__":
    main()
