"""litellm's per-call cost: CPU per model call through litellm, with litellm's
defaults ("before") and with fsmchat's lean settings ("after", what fsmchat runs), in one process.

- **per call**: ``llm.acomplete`` (a forced ``respond`` bid, what a GroupChat agent sends) with 100
  and 1,000 messages, through (a) a local OpenAI-compatible HTTP server (tests/support/openai_server.py in
  a child process, so its CPU is not counted: fsmchat -> litellm -> openai SDK -> httpx/aiohttp)
  and (b) one of fsmchat's own litellm custom providers (no network: litellm's request building,
  response wrapping, pricing and logging). CPU is ``process_time`` (every thread: litellm runs part
  of each call in a worker thread), min and median of the repeats; the Python calls per model call
  (every thread, counted, so they do not depend on the machine's load) are printed next to it.
- **fan-out**: one GroupChat bid round of N=8 litellm Agents against the HTTP server answering
  after 200 ms: wall time / 200 ms (goal <= 1.1x).
- **batch**: ``GroupChat.run_batch`` of many chats through the HTTP server (no delay): model calls
  per CPU-second (one core's worth).
- **profile** (``--profile``): cProfile's top functions by own time, before and after, at 100 and
  1,000 messages, through the HTTP server.

    .venv/bin/python bench/litellm_cost.py [--quick] [--write] [--profile]
"""
from __future__ import annotations

import asyncio
import contextlib
import cProfile
import io
import os
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, finish, machine_line, median, shorten, status, version  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's fsmchat, whichever is installed

LATENCY = 0.2  # the fan-out server's delay
FAN_N = 8
CALLS_PER_CHAT = 6  # the batch's chats: 3 agents x 2 bid rounds
SIZES = (100, 1000)
PROVIDER = "fsmchat-bench"  # one of fsmchat's own custom providers (registered like the offline model)


# ---- the server (a child process, so its CPU is not counted) ---------------------------------
def serve(delay: float) -> None:
    """Child side: an OpenAIServer answering a ``respond`` bid, keeping no request bodies (a bench
    sends thousands); prints its api_base, runs until stdin closes. The first bid round of a chat
    (system, task, instruction: 3 messages) bids 0.9 and a message when ``delay`` is 0 (the batch:
    one post, then a silent round); every other bid is silent."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support import openai_server
    from support.openai_server import OpenAIServer, respond

    class Forget(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            pass

    silent, speak = respond(0.0, ""), respond(0.9, "Sandwiches, and a blanket each.")

    def answer(req: dict[str, Any]) -> Any:
        if delay:
            return silent.after(delay)
        return speak if len(req.get("messages") or ()) <= 3 else silent

    openai_server._HTTPServer.request_queue_size = 1024  # a batch opens hundreds of connections at once
    srv = OpenAIServer(answer, max_requests=10 ** 9, max_lifetime=24 * 3600)
    srv.requests, srv.records = Forget(), Forget()
    srv.start()
    print(srv.api_base, flush=True)
    sys.stdin.read()
    srv.stop()


@contextlib.contextmanager
def server(delay: float = 0.0) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(delay)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()


# ---- what is measured ------------------------------------------------------------------------
def install_provider() -> None:
    """A minimal custom provider registered as fsmchat registers its own (offline, scripted): it
    answers a silent ``respond`` bid at once, so only litellm's own work is left to measure."""
    from fsmchat.speakers import llm

    lm = llm.get_litellm()

    class Bench(lm.CustomLLM):  # type: ignore[misc, name-defined]
        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            msg = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "respond", "arguments": '{"score": 0.0, "message": ""}'}}]}
            return lm.ModelResponse(choices=[{"message": msg, "finish_reason": "tool_calls"}],
                                    usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})

    llm.register_provider(PROVIDER, Bench())


@contextlib.contextmanager
def litellm_defaults() -> Iterator[None]:
    """fsmchat's lean settings undone for the block ("before"): litellm's base64 scan on (its
    default, 64), every response priced by litellm even from fsmchat's own providers, and fsmchat
    pricing each response again (``completion_cost``), as fsmchat once did."""
    from litellm.litellm_core_utils import logging_utils

    from fsmchat.speakers import llm, providers

    saved = (logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING, providers.priced_free, llm.response_cost)

    def price_again(response: Any) -> float | None:
        try:
            return float(llm.get_litellm().completion_cost(completion_response=response))
        except Exception:
            return None

    logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING = 64
    providers.priced_free, llm.response_cost = (lambda r: r), price_again
    try:
        yield
    finally:
        logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING, providers.priced_free, llm.response_cost = saved


def conversation(n: int) -> list[dict[str, Any]]:
    """A bid request with ``n`` conversation messages (as ``Turn.request_messages`` builds it)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are Alice, a terse planner."},
                                  {"role": "user", "content": "Plan a picnic for Saturday."}]
    for i in range(n - 1):
        msgs.append({"role": "assistant", "content": f"My point {i}: bring sandwiches and a blanket."} if i % 3 == 0
                    else {"role": "user", "content": f"Bob: message {i}, on where to meet and what to bring along."})
    msgs.append({"role": "user", "content": "You are Alice. Call respond(score, message)."})
    return msgs


def target(kind: str, api_base: str) -> tuple[str, dict[str, Any]]:
    if kind == "http":
        return "openai/test-model", {"api_base": api_base, "api_key": "sk-bench"}
    return f"{PROVIDER}/bench", {}


async def bids(model: str, kwargs: dict[str, Any], messages: list[dict[str, Any]], k: int) -> None:
    from fsmchat.speakers import llm
    from fsmchat.speakers.respond import RESPOND_TOOL, RESPOND_TOOL_CHOICE

    stats = llm.CallStats()
    for _ in range(k):
        await llm.acomplete(model, messages, agent="Alice", kwargs=kwargs, timeout=30, num_retries=0, stats=stats,
                            tools=[RESPOND_TOOL], tool_choice=RESPOND_TOOL_CHOICE)


def cpu_per_call(model: str, kwargs: dict[str, Any], n: int, k: int) -> float:
    """CPU ms per call (all threads) over ``k`` calls, after 3 warm-up calls, in a fresh loop."""
    messages = conversation(n)

    async def go() -> float:
        await bids(model, kwargs, messages, 3)
        await asyncio.sleep(0.01)  # litellm's logging tasks of the warm-up calls
        c0 = time.process_time()
        await bids(model, kwargs, messages, k)
        await asyncio.sleep(0.01)  # and their logging tasks
        return (time.process_time() - c0) / k * 1e3
    return asyncio.run(go())


class CallCounter:
    """Python function calls in every thread (litellm runs part of each call in a worker thread)."""

    def __init__(self) -> None:
        self.n, self.on = 0, False

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if self.on and event == "call":
            self.n += 1

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        self.n, self.on = 0, True
        sys.setprofile(self)
        try:
            yield
        finally:
            sys.setprofile(None)
            self.on = False


def calls_per_call(model: str, kwargs: dict[str, Any], n: int, k: int = 5) -> float:
    """Python function calls per model call (every thread), counted over ``k`` calls."""
    counter = CallCounter()
    messages = conversation(n)
    threading.setprofile(counter)  # threads started from here on (the loop's executor) count too

    async def go() -> float:
        await bids(model, kwargs, messages, 2)
        await asyncio.sleep(0.01)
        with counter.counting():
            await bids(model, kwargs, messages, k)
            await asyncio.sleep(0.01)  # litellm's success-logging tasks of these calls
        return counter.n / k
    try:
        return asyncio.run(go())
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]


def per_call_table(api_base: str, reps: int, k: int) -> tuple[list[str], dict[str, Any]]:
    cases = [(kind, n, mode) for kind in ("http", "custom") for n in SIZES for mode in ("before", "after")]
    cpu: dict[Any, list[float]] = {c: [] for c in cases}
    for kind in ("http", "custom"):  # warm-up: imports, clients, caches
        model, kw = target(kind, api_base)
        cpu_per_call(model, kw, 10, 5)
    for _ in range(reps):  # interleaved, so load changes hit every case alike
        for c in cases:
            kind, n, mode = c
            model, kw = target(kind, api_base)
            with (litellm_defaults() if mode == "before" else contextlib.nullcontext()):
                cpu[c].append(cpu_per_call(model, kw, n, k))
    counts: dict[Any, float] = {}
    for c in cases:
        kind, n, mode = c
        model, kw = target(kind, api_base)
        with (litellm_defaults() if mode == "before" else contextlib.nullcontext()):
            counts[c] = calls_per_call(model, kw, n)
    lines = ["| path | messages | litellm defaults: CPU ms/call min (median) | fsmchat lean: CPU ms/call min (median) "
             "| after / before | Python calls per call, before -> after | goal <= 1.5 ms |",
             "|---|---:|---:|---:|---:|---:|---|"]
    out: dict[str, Any] = {}
    for kind in ("http", "custom"):
        for n in SIZES:
            b, a = cpu[(kind, n, "before")], cpu[(kind, n, "after")]
            label = "local HTTP server (openai/ via api_base)" if kind == "http" else "fsmchat custom provider"
            lines.append(f"| {label} | {n:,} | {min(b):.2f} ({median(b):.2f}) | {min(a):.2f} ({median(a):.2f}) | "
                         f"{median(a) / median(b):.2f}x | {counts[(kind, n, 'before')]:,.0f} -> "
                         f"{counts[(kind, n, 'after')]:,.0f} | {status(median(a) <= 1.5)} |")
            out[f"{kind}/{n}"] = {"before": median(b), "after": median(a), "before_min": min(b), "after_min": min(a),
                                  "calls_before": counts[(kind, n, "before")], "calls_after": counts[(kind, n, "after")]}
    for kind in ("http", "custom"):
        lo, hi = out[f"{kind}/{SIZES[0]}"], out[f"{kind}/{SIZES[1]}"]
        grow = (hi["calls_after"] - lo["calls_after"]) / (SIZES[1] - SIZES[0])
        grow_b = (hi["calls_before"] - lo["calls_before"]) / (SIZES[1] - SIZES[0])
        out[f"{kind}/per_message"] = {"before": grow_b, "after": grow}
    return lines, out


# ---- fan-out and batch -------------------------------------------------------------------------
def fan_out(api_base: str, reps: int) -> dict[str, list[float]]:
    """Wall seconds of one GroupChat bid round of FAN_N litellm Agents (every bid silent: the run
    is seed, bid, select, stop), before and after, interleaved."""
    from fsmchat import Agent, GroupChat

    def chat() -> GroupChat:
        agents = [Agent(f"Agent{i + 1}", system_prompt=f"You are Agent{i + 1}.", model="openai/test-model",
                        api_base=api_base, api_key="sk-bench", tool_mode="native", num_retries=0, timeout=30)
                  for i in range(FAN_N)]
        return GroupChat(agents=agents, max_loops=3)

    def once() -> tuple[float, float]:
        c = chat()
        c.graph  # compile outside the timed span
        t0, c0 = time.perf_counter(), time.process_time()
        r = c.execute("Plan a picnic for Saturday.")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert r.error is None and r.path == ["seed", "bid", "select", "stop"], (r.path, r.error)
        return wall, cpu

    once()
    out: dict[str, list[float]] = {"before": [], "after": [], "before_cpu": [], "after_cpu": []}
    for _ in range(reps):
        for mode in ("before", "after"):
            with (litellm_defaults() if mode == "before" else contextlib.nullcontext()):
                wall, cpu = once()
            out[mode].append(wall)
            out[mode + "_cpu"].append(cpu)
    return out


def batch(api_base: str, chats: int) -> dict[str, float]:
    """``run_batch`` of ``chats`` GroupChats (3 agents, 2 bid rounds each: one post, then a lull;
    6 model calls) through the HTTP server: model calls per CPU-second, before and after."""
    from fsmchat import Agent, GroupChat

    def chat() -> GroupChat:
        agents = [Agent(name, system_prompt=f"You are {name}.", model="openai/test-model", api_base=api_base,
                        api_key="sk-bench", tool_mode="native", num_retries=0, timeout=60)
                  for name in ("Analyst", "Critic", "Writer")]
        return GroupChat(agents=agents, max_loops=4)

    out: dict[str, float] = {}
    probe = chat().execute("warm up")
    assert probe.error is None and probe.calls == CALLS_PER_CHAT, (probe.path, probe.calls, probe.error)
    chat().run_batch(["warm up"] * 4, max_concurrency=4, progress=False)
    for mode in ("before", "after"):
        c = chat()
        tasks = [f"Task {i}: plan a picnic." for i in range(chats)]
        with (litellm_defaults() if mode == "before" else contextlib.nullcontext()):
            t0, c0 = time.perf_counter(), time.process_time()
            results = c.run_batch(tasks, max_concurrency=100, progress=False)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert len(results) == chats and all(isinstance(r, str) and r for r in results)
        calls = CALLS_PER_CHAT * chats
        out[mode] = calls / cpu
        out[mode + "_calls"] = calls
        out[mode + "_wall"] = wall
        out[mode + "_cpu"] = cpu
    return out


# ---- profile -----------------------------------------------------------------------------------
def profile(api_base: str, n: int, mode: str, k: int = 40, top: int = 8) -> str:
    model, kw = target("http", api_base)
    messages = conversation(n)

    async def go() -> cProfile.Profile:
        await bids(model, kw, messages, 3)
        p = cProfile.Profile()
        p.enable()
        await bids(model, kw, messages, k)
        await asyncio.sleep(0.01)
        p.disable()
        return p
    with (litellm_defaults() if mode == "before" else contextlib.nullcontext()):
        p = asyncio.run(go())
    st = pstats.Stats(p)
    busy = {f: v for f, v in st.stats.items() if f[2] != "<method 'poll' of 'select.epoll' objects>"}  # type: ignore[attr-defined]
    total = sum(v[2] for v in busy.values())  # waiting on the socket is not work
    rows = sorted(busy.items(), key=lambda kv: -kv[1][2])[:top]
    lines = [f"HTTP, {n:,} messages, {'litellm defaults' if mode == 'before' else 'fsmchat lean'} "
             f"(event-loop thread, {st.total_calls / k:,.0f} calls per model call):"]  # type: ignore[attr-defined]
    for (file, line, fn), (cc, nc, tt, ct, _) in rows:
        where = shorten(f"{file}:{line}({fn})") if file != "~" else fn
        lines.append(f"    {tt / total * 100:5.1f}%  {nc / k:7.0f} calls  {where}")
    return "\n".join(lines)


PHASES = {  # (file, function) -> what that subtree of a litellm call does
    ("llm.py", "acomplete"): "fsmchat's acomplete (its own lines)",
    ("utils.py", "function_setup"): "function_setup: logging object, thought-signature removal",
    ("main.py", "completion"): "completion() in an executor thread: validation, params, provider dispatch",
    ("openai.py", "acompletion"): "openai provider: request transform, openai SDK, httpx, aiohttp, parsing",
    ("response_metadata.py", "update_response_metadata"): "update_response_metadata: pricing the response",
    ("litellm_logging.py", "async_success_handler"): "success logging: the standard logging payload",
    ("litellm_cost.py", "acompletion"): "the bench's provider",
}


def phases(api_base: str, kind: str, n: int, k: int = 5) -> str:
    """Python calls per model call by phase (inclusive, every thread), fsmchat lean."""
    import collections

    model, kw = target(kind, api_base)
    messages = conversation(n)
    counts: collections.Counter[str] = collections.Counter()
    local, on = threading.local(), [False]

    def prof(frame: Any, event: str, arg: Any) -> None:
        if not on[0]:
            return
        stack = local.__dict__.setdefault("stack", [])
        if event == "call":
            code = frame.f_code
            stack.append(PHASES.get((code.co_filename.rsplit("/", 1)[-1], code.co_name)))
            counts[next((p for p in reversed(stack) if p), "litellm's wrapper and acompletion glue, asyncio")] += 1
        elif event == "return" and stack:
            stack.pop()

    def hook(frame: Any, event: str, arg: Any) -> None:
        if threading.current_thread().name.startswith("asyncio_"):
            sys.setprofile(prof)
        else:
            sys.setprofile(None)

    async def go() -> None:
        await bids(model, kw, messages, 3)
        await asyncio.sleep(0.02)
        on[0] = True
        sys.setprofile(prof)
        await bids(model, kw, messages, k)
        await asyncio.sleep(0.02)
        sys.setprofile(None)
        on[0] = False
    threading.setprofile(hook)
    try:
        asyncio.run(go())
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    total = sum(counts.values())
    lines = [f"{'HTTP' if kind == 'http' else 'custom provider'}, {n:,} messages, fsmchat lean: "
             f"{total / k:,.0f} Python calls per model call, by phase:"]
    lines += [f"    {c / total * 100:5.1f}%  {c / k:7.0f} calls  {name}" for name, c in counts.most_common()]
    return "\n".join(lines)


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats, a smaller batch")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    ap.add_argument("--profile", action="store_true", help="print cProfile's top functions before and after")
    ap.add_argument("--serve", type=float, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        return serve(args.serve)
    os.environ.setdefault("FSMCHAT_CHECK_KEYS", "0")
    reps, k, chats = (3, 20, 100) if args.quick else (7, 40, 300)
    install_provider()
    with server() as api_base:
        lines, per_call = per_call_table(api_base, reps, k)
        b = batch(api_base, chats)
        profiles = ([phases(api_base, kind, n) for kind in ("http", "custom") for n in (3, SIZES[0])]
                    + [profile(api_base, n, mode) for n in SIZES for mode in ("before", "after")]) if args.profile else []
    with server(LATENCY) as slow_base:
        fan = fan_out(slow_base, reps)
    fb, fa = median(fan["before"]) / LATENCY, median(fan["after"]) / LATENCY
    lv = version("litellm")
    text = "\n".join([
        "`.venv/bin/python bench/litellm_cost.py [--quick] [--write] [--profile]`. One forced `respond` bid per "
        "call (`llm.acomplete`), through a local OpenAI-compatible server in a child process (its CPU is not "
        "counted) and through one of fsmchat's own litellm custom providers. \"litellm defaults\" undoes, for "
        "the same process, what fsmchat switches off (`fsmchat.speakers.llm.lean`): litellm's walk and copy of "
        "every request to shorten base64 images in its log payload (`MAX_BASE64_LENGTH_FOR_LOGGING=0` unless the "
        "user set it), fsmchat pricing every response a second time (it now reads the price litellm computed "
        "during the call, the one litellm's callbacks get), and litellm pricing fsmchat's own providers' "
        "responses (they now say they are free). What is left is litellm's own per-call work, which no "
        f"setting of litellm {lv} switches off: `completion()`'s request validation (run in an executor thread), "
        "the OpenAI transform, SDK and HTTP stack, pricing a model its cost map does not list, and the standard "
        "logging payload; the Python-call counts below (every thread, so they do not depend on the machine's "
        "load) and the phase breakdown under them show where. The fan-out and batch rows are wall-clock "
        "measurements on a shared 2-core machine.", "",
        machine_line(reps, f"litellm {lv}, openai {version('openai')}") +
        f" {k} calls per repeat; CPU is process_time (all threads).", "",
        *lines, "",
        f"- Python calls per model call grow by {per_call['http/per_message']['before']:.0f} -> "
        f"{per_call['http/per_message']['after']:.0f} per message over HTTP and "
        f"{per_call['custom/per_message']['before']:.0f} -> {per_call['custom/per_message']['after']:.0f} through the "
        "custom provider (from 100 to 1,000 messages).",
        f"- Fan-out, one GroupChat bid round of {FAN_N} litellm Agents, server answering after "
        f"{LATENCY * 1e3:.0f} ms: {median(fan['before']) * 1e3:.0f} ms ({fb:.2f}x) with litellm's defaults, "
        f"{median(fan['after']) * 1e3:.0f} ms ({fa:.2f}x) lean (goal <= 1.1x: {status(fa <= 1.1)}); CPU per round "
        f"{median(fan['before_cpu']) * 1e3:.0f} -> {median(fan['after_cpu']) * 1e3:.0f} ms.",
        f"- Batch: {chats} GroupChats (3 agents, {b['after_calls']:.0f} model calls) through the local server, "
        f"`run_batch(max_concurrency=100)`: {b['before']:.0f} -> **{b['after']:.0f} model calls per CPU-second** "
        f"(one core), wall {b['before_wall']:.1f} -> {b['after_wall']:.1f} s.",
    ])
    if profiles:
        text += "\n\n```\n" + "\n".join(profiles) + "\n```"
    cmd = ".venv/bin/python bench/litellm_cost.py --write"
    rows: list[dict[str, Any]] = []
    for kind in ("http", "custom"):
        for n in SIZES:
            r = per_call[f"{kind}/{n}"]
            rows.append({"target": "litellm per call", "measure": f"CPU ms per litellm call, "
                         f"{'local HTTP server' if kind == 'http' else 'custom provider'}, {n:,} messages",
                         "fsmchat": round(r["after"], 2), "floor": None, "langgraph": None,
                         "ratio": f"litellm defaults {r['before']:.2f} ms ({r['after'] / r['before']:.2f}x); "
                                  f"{r['calls_before']:,.0f} -> {r['calls_after']:,.0f} Python calls",
                         "goal": "<= 1.5 ms", "ok": r["after"] <= 1.5, "command": cmd})
    rows.append({"target": "Fan-out (litellm)", "measure": f"ms per bid round, N={FAN_N} litellm Agents over HTTP, "
                 f"{LATENCY * 1e3:.0f} ms server", "fsmchat": round(median(fan["after"]) * 1e3, 1),
                 "floor": round(LATENCY * 1e3, 1), "langgraph": None,
                 "ratio": f"{fa:.2f}x latency (litellm defaults {fb:.2f}x)", "goal": "<= 1.1x", "ok": fa <= 1.1,
                 "command": cmd})
    rows.append({"target": "Batch (litellm)", "measure": f"model calls per CPU-second, {chats} GroupChats through "
                 "litellm over HTTP", "fsmchat": round(b["after"]), "floor": None, "langgraph": None,
                 "ratio": f"calls/s per core (litellm defaults {b['before']:.0f})", "goal": "report", "ok": None,
                 "command": cmd})
    finish("litellm_cost", {"litellm-cost": "## litellm per-call cost\n\n" + text}, rows, args.write)


if __name__ == "__main__":
    main()
