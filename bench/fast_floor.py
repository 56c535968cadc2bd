"""The run machinery at the floor: fsmchat's fast path against a raw aiohttp loop, side by side.

Two workloads against a local OpenAI-compatible server (``tests/support/openai_server.py`` in a child
process: its CPU is not counted), each client in its own interpreter, the cases interleaved
within every repetition:

- **round-robin batch**: ``RoundRobinSwarm.run_batch`` of 50 chats (3 agents x 6 rounds = 18
  model calls a chat, 900 in all), ``max_concurrency=10``, ``Agent(model="openai/...",
  api_base=...)`` (the fast path), against the floor: the same request bodies (checked equal at a
  recording server before the measurement) posted with ``aiohttp`` and parsed with ``json``, 10
  chats at a time, nothing else. The figure is CPU per model call (``time.process_time``, every
  thread of the client's process) over the batch.
- **streamed tokens**: 20 streamed replies of 400 pieces each, one after the other: fsmchat's
  ``RoundRobinSwarm(...).stream(task, tokens=True)`` read to the end (every piece a
  ``TokenDelta``), both ways it is read (``for item in ...`` in a script, where the run goes on a
  loop the stream steps in the script's own thread, a fresh one per stream; ``async for item in ...``
  in async code, one loop for all), against the floor reading the
  same server-sent events with ``aiohttp`` and ``json`` and joining the pieces. The figure is CPU
  per streamed piece.

The floor does less than a client must: no timeout, no status check, no usage or cost, no
retries, no run record (events, messages, result); fsmchat does all of these. The ratio,
taken within the same repetition, is what to compare on a loaded machine.

    .venv/bin/python bench/fast_floor.py [--quick] [--write]
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, ROOT, cli_args, finish, machine_line, median, status  # noqa: E402
from compare import QUIET_ENV, server, serve_with  # noqa: E402

NAMES = ("Analyst", "Critic", "Writer")
SYSTEM = {name: f"You are {name}, one of a small team planning an event. Be brief." for name in NAMES}
TASK = "Task {i}: plan a picnic for twelve people."
REPLY = "Sandwiches and lemonade; I will bring a blanket."
CHATS, CONCURRENCY, ROUNDS = 50, 10, 6
STREAMS, PIECES = 20, 400
PIECE = "word "
LATENCY = 0.0  # the server answers at once: the clients' CPU, not their waiting, is measured
CASES = ("fsmchat fast path", "raw aiohttp")
WORKLOADS = ("rr", "stream", "astream")
GOAL = 1.3  # issue 40 item 7: <= 1.3x raw for both figures
INSTRUCTION = ("You are {name}, agent {i} of {n} in loop {loop} of {loops}. Previous speaker: {prev}. "
               "Next speaker: {next}. Other participants: {others}.\n\nReview the transcript above and build on the "
               "prior speaker's contribution. Add your own perspective concisely; if you are the opening speaker, "
               "address the original task directly.\n\nYour response:")


def answer(req: dict[str, Any]) -> Any:
    """Server side: a streamed reply of ``PIECES`` pieces to a streaming request, else ``REPLY``."""
    from support.openai_server import streamed, text

    return streamed([PIECE] * PIECES) if req.get("stream") else text(REPLY)


# ---- the clients ------------------------------------------------------------------------------
def agents(api_base: str, model: str, names: tuple[str, ...] = NAMES) -> list[Any]:
    from fsmchat import Agent

    return [Agent(name, system_prompt=SYSTEM[name], model="openai/" + model, api_base=api_base, api_key="sk-bench",
                  num_retries=0, timeout=60) for name in names]


def rr_fsmchat(api_base: str, model: str, tasks: list[str]) -> None:
    from fsmchat import RoundRobinSwarm

    results = RoundRobinSwarm(agents=agents(api_base, model), max_loops=ROUNDS).run_batch(
        tasks, max_concurrency=CONCURRENCY, progress=False)
    assert len(results) == len(tasks) and all(r == REPLY for r in results), str(results[0])[:300]  # the last reply


def rr_bodies(model: str, task: str) -> list[dict[str, Any]]:
    """The request bodies of one round-robin chat, as fsmchat sends them (checked in ``same_bodies``)."""
    n, out, history = len(NAMES), [], []
    for loop in range(1, ROUNDS + 1):
        for i, name in enumerate(NAMES):
            spoken = len(history)
            prev = history[-1][0] if history else "(none \u2014 you open the conversation)"
            msgs = [{"role": "system", "content": SYSTEM[name]}, {"role": "user", "content": task}]
            msgs += [{"role": "assistant", "content": text} if who == name else
                     {"role": "user", "content": f"{who}: {text}"} for who, text in history]
            msgs.append({"role": "user", "content": INSTRUCTION.format(
                name=name, i=i + 1, n=n, loop=loop, loops=ROUNDS, prev=prev,
                next=NAMES[(spoken + 1) % n] if spoken + 1 < n * ROUNDS else "(none \u2014 you close the conversation)",
                others=", ".join(x for x in NAMES if x != name))})
            out.append({"model": model, "messages": msgs})
            history.append((name, REPLY))
    return out


async def rr_raw(api_base: str, model: str, tasks: list[str]) -> None:
    import aiohttp

    url, headers = api_base + "/chat/completions", {"Content-Type": "application/json",
                                                    "Authorization": "Bearer sk-bench"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        async def chat(task: str) -> list[str]:
            said = []
            for body in rr_bodies(model, task):
                async with http.post(url, data=json.dumps(body), headers=headers) as resp:
                    data = json.loads(await resp.read())
                said.append(data["choices"][0]["message"]["content"])
            return said

        limit = asyncio.Semaphore(CONCURRENCY)

        async def bounded(task: str) -> list[str]:
            async with limit:
                return await chat(task)

        results = await asyncio.gather(*(bounded(t) for t in tasks))
    assert all(len(r) == ROUNDS * len(NAMES) and r[0] == REPLY for r in results)


def stream_fsmchat(api_base: str, model: str, count: int) -> int:
    """``for item in pattern.stream(...)``: a script's spelling (the run on a loop stepped in this thread)."""
    from fsmchat import RoundRobinSwarm
    from fsmchat.models import TokenDelta

    pattern = RoundRobinSwarm(agents=agents(api_base, model, NAMES[:1]), max_loops=1)
    pieces = 0
    for i in range(count):
        for item in pattern.stream(TASK.format(i=i), tokens=True):
            pieces += isinstance(item, TokenDelta)
    return pieces


async def astream_fsmchat(api_base: str, model: str, count: int) -> int:
    """``async for item in pattern.stream(...)``: async code's spelling (the run in the same loop)."""
    from fsmchat import RoundRobinSwarm
    from fsmchat.models import TokenDelta

    pattern = RoundRobinSwarm(agents=agents(api_base, model, NAMES[:1]), max_loops=1)
    pieces = 0
    for i in range(count):
        async for item in pattern.stream(TASK.format(i=i), tokens=True):
            pieces += isinstance(item, TokenDelta)
    return pieces


async def stream_raw(api_base: str, model: str, count: int) -> int:
    import aiohttp

    url, headers = api_base + "/chat/completions", {"Content-Type": "application/json",
                                                    "Authorization": "Bearer sk-bench"}
    pieces = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        for i in range(count):
            body = {**rr_bodies(model, TASK.format(i=i))[0], "stream": True}
            text = []
            async with http.post(url, data=json.dumps(body), headers=headers) as resp:
                async for line in resp.content:
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    delta = json.loads(data)["choices"][0]["delta"].get("content")
                    if delta:
                        text.append(delta)
                        pieces += 1
            assert "".join(text) == PIECE * PIECES
    return pieces


def client(case: str, workload: str, api_base: str, model: str) -> dict[str, Any]:
    """Child side: a warm-up (its own model name, so the server counts it apart), then the
    workload on this process's CPU clock."""
    tasks = [TASK.format(i=i) for i in range(CHATS)]

    def go(name: str, small: bool) -> int:
        if workload == "rr":
            todo = tasks[:2] if small else tasks
            if case == "fsmchat fast path":
                rr_fsmchat(api_base, name, todo)
            else:
                asyncio.run(rr_raw(api_base, name, todo))
            return 0
        count = 2 if small else STREAMS
        if case != "fsmchat fast path":
            return asyncio.run(stream_raw(api_base, name, count))
        return stream_fsmchat(api_base, name, count) if workload == "stream" else \
            asyncio.run(astream_fsmchat(api_base, name, count))

    go("warm-" + model, True)
    c0 = time.process_time()
    pieces = go(model, False)
    return {"cpu": time.process_time() - c0, "pieces": pieces}


def same_bodies() -> None:
    """One chat of each client to a recording server sends the same request bodies."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.openai_server import OpenAIServer, text

    seen: dict[str, list[str]] = {}
    for case in CASES:
        srv = OpenAIServer(lambda req: text(REPLY), max_requests=1000)
        srv.start()
        try:
            if case == "fsmchat fast path":
                rr_fsmchat(srv.api_base, "same", [TASK.format(i=0)])
            else:
                asyncio.run(rr_raw(srv.api_base, "same", [TASK.format(i=0)]))
            seen[case] = [json.dumps(r, sort_keys=True) for r in srv.requests]
        finally:
            srv.stop()
    fast, raw = (seen[c] for c in CASES)
    assert len(fast) == len(raw) == ROUNDS * len(NAMES), (len(fast), len(raw))
    for k, (a, b) in enumerate(zip(fast, raw)):
        assert a == b, f"request {k} differs:\nfsmchat {a[-600:]}\nraw     {b[-600:]}"


def measure(api_base: str, counts: Any, reps: int) -> dict[tuple[str, str], list[dict[str, float]]]:
    env = {**os.environ, **QUIET_ENV, "PYTHONPATH": str(ROOT)}
    out: dict[tuple[str, str], list[dict[str, float]]] = {(c, w): [] for c in CASES for w in WORKLOADS}
    for rep in range(reps):
        for workload in WORKLOADS:
            order = CASES if rep % 2 == 0 else CASES[::-1]
            for k, case in enumerate(order):
                model = f"bench-{rep}-{workload}-{k}"
                proc = subprocess.run([PY, __file__, "--client", case, "--workload", workload, "--api-base", api_base,
                                       "--model", model], capture_output=True, text=True, env=env, cwd=ROOT,
                                      timeout=900)
                if proc.returncode:
                    raise SystemExit(f"{case} {workload} failed:\n{proc.stderr[-4000:]}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                got["calls"] = counts().get(model, 0)
                out[(case, workload)].append(got)
                unit = got["calls"] if workload == "rr" else got["pieces"]
                print(f"rep {rep + 1} {workload} {case}: {got['calls']} calls, {got['pieces']} pieces, "
                      f"{got['cpu'] * 1e6 / max(unit, 1):.1f} us CPU each", flush=True)
    for (case, workload), runs in out.items():  # the same work for both clients, counted at the server
        want = CHATS * ROUNDS * len(NAMES) if workload == "rr" else STREAMS
        assert all(r["calls"] == want for r in runs), (case, workload, [r["calls"] for r in runs])
        if workload != "rr":
            assert all(r["pieces"] == STREAMS * PIECES for r in runs), (case, [r["pieces"] for r in runs])
    return out


def main() -> None:
    args = cli_args(__doc__, "2 repetitions instead of 5")
    same_bodies()
    reps = 2 if args.quick else 5
    with server(LATENCY, __file__) as srv:
        out = measure(srv.api_base, srv.counts, reps)
    rows, lines = [], []
    for workload, unit, what in (("rr", "calls", "CPU per model call, round-robin batch (50 chats x 18 calls, "
                                              "concurrency 10)"),
                                 ("stream", "pieces", f"CPU per streamed piece, `for item in stream(...)` ({STREAMS} "
                                                      f"replies x {PIECES} pieces)"),
                                 ("astream", "pieces", f"CPU per streamed piece, `async for item in stream(...)` "
                                                       f"({STREAMS} replies x {PIECES} pieces)")):
        per = {c: [r["cpu"] * 1e6 / r[unit] for r in out[(c, workload)]] for c in CASES}
        ratios = [f / r for f, r in zip(per[CASES[0]], per[CASES[1]])]
        ratio = median(ratios)
        rows.append({"workload": workload, "fsmchat_us": median(per[CASES[0]]), "raw_us": median(per[CASES[1]]),
                     "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios), "goal": GOAL})
        lines.append(f"| {what} | {median(per[CASES[0]]):.1f} µs | {median(per[CASES[1]]):.1f} µs | "
                     f"{ratio:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | <= {GOAL}x | {status(ratio <= GOAL)} |")
    table = ("| workload | fsmchat fast path | raw aiohttp | ratio, median (range) | goal | status |\n"
             "| --- | ---: | ---: | ---: | --- | --- |\n" + "\n".join(lines))
    print(table)
    finish("fast_floor", {"fast-floor": f"{machine_line(reps)}\n\n{table}\n"}, rows, args.write)


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve_with(answer)
    elif "--client" in sys.argv:
        a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
        print(json.dumps(client(a["--client"], a["--workload"], a["--api-base"], a["--model"])))
    else:
        main()
