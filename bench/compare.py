"""What users run, against the other libraries: batches of model-backed GroupChats, in one run.

Batches of bid-based GroupChats (N=3 and N=8 agents, 5 turns, every agent bidding every turn
through a forced ``respond`` tool call, so 5 x N model calls per chat) against a local
OpenAI-compatible server with a fixed latency, in a child process (its CPU is not counted). Five
clients run the same batch: the same system prompts and task, the same number of concurrent
chats, the same number of model calls per chat (counted at the server and asserted equal):

- **fsmchat fast path**: ``GroupChat.run_batch`` of ``Agent(model="openai/...", api_base=...)``
  (straight over aiohttp);
- **fsmchat litellm**: the same with ``Agent(transport="litellm")``;
- **swarms**: swarms' ``GroupChat`` (the same bid-based chat) of swarms ``Agent``s pointed at the
  server through litellm's ``api_base`` (``llm_base_url``), one chat per thread;
- **LangGraph**: a ``StateGraph`` with the same turn structure (a ``bid`` node asking every agent at
  once through ``langchain-openai``'s ``ChatOpenAI(base_url=...)`` with the ``respond`` tool bound,
  then a ``post`` node choosing the winner, looping for 5 turns), ``ainvoke`` per chat;
- **raw aiohttp**: the same requests (fsmchat's bid bodies) posted with ``aiohttp`` and parsed with
  ``json``, the winner chosen in a few lines: nothing else (the floor).

Each (client, N, repetition) runs in its own interpreter: swarms and LangGraph from their own venv
(``make bench-compare`` builds it from ``bench/requirements-compare.txt``; they are no dependency
of fsmchat), fsmchat and the floor from the project's venv. A child runs one warm-up chat, then
the batch, and reports the CPU time of its whole process (``time.process_time``: every thread)
over the batch; the cases are interleaved within each repetition and the median of the
repetitions is shown. The figure is model calls per CPU-second (per core), with every case's
ratio to the floor from the same run. Telemetry is off in every library (and there is no network).

    .venv/bin/python bench/compare.py [--quick] [--write] [--venv PATH]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import PY, ROOT, finish, machine_line, median, status, venv_versions  # noqa: E402

NAMES = ("Analyst", "Critic", "Writer", "Planner", "Skeptic", "Editor", "Scout", "Judge")
SYSTEM = {name: f"You are {name}, one of a small team planning an event. Be brief." for name in NAMES}
TASK = "Task {i}: plan a picnic for twelve people."
TURNS = 5  # bid rounds per chat: every one posts (max_loops = TURNS + 1, the task included)
SIZES = (3, 8)
CHATS = 20  # chats per batch, all running at once
LATENCY = 0.05  # the server's delay per request (s)
CASES = ("fsmchat fast path", "fsmchat litellm", "swarms", "LangGraph", "raw aiohttp")
THIRD_PARTY = ("swarms", "LangGraph")  # run from the comparison venv
REPLY = "Sandwiches and lemonade; I will bring a blanket."
QUIET_ENV = {  # every library's telemetry and tracing off, litellm's cost map local
    "SWARMS_TELEMETRY_ON": "false", "SWARMS_VERBOSE_GLOBAL": "False", "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING": "false", "LANGSMITH_OTEL_ENABLED": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "ANONYMIZED_TELEMETRY": "False",
    "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "FSMCHAT_CHECK_KEYS": "0", "OPENAI_API_KEY": "sk-bench",
    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
}
RESPOND_TOOL: dict[str, Any] = {  # the bid tool every client offers (fsmchat's and swarms' schema, in fsmchat's key order)
    "type": "function",
    "function": {
        "name": "respond",
        "description": "Decide whether to reply in the groupchat. Set score 0..1 for how much you want to speak. "
                       "If you don't want to speak, set message to empty string.",
        "parameters": {"type": "object", "properties": {
            "score": {"type": "number", "minimum": 0, "maximum": 1,
                      "description": "How much you want to respond (0 = silent, 1 = strongly want to)."},
            "message": {"type": "string", "description": "Your reply to the group, or empty string if you don't "
                                                         "want to speak."}},
            "required": ["score", "message"]}}}
RESPOND_CHOICE = {"type": "function", "function": {"name": "respond"}}


# ---- the server (a child process: its CPU is not counted) --------------------------------------
def serve(latency: float) -> None:
    """Child side: answers every bid with ``respond(0.9, REPLY)`` after ``latency`` seconds (any
    other request with ``REPLY`` as text)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.openai_server import respond, text

    bid, other = respond(0.9, REPLY).after(latency), text(REPLY).after(latency)
    serve_with(lambda req: bid if req.get("tools") else other)


def serve_with(answer: Callable[[dict[str, Any]], Any]) -> None:
    """Child side: ``tests/support/openai_server.py`` answering every request with ``answer(body)`` (a
    ``Reply``), counting requests by the body's ``model`` (each measured batch has its own); a line
    on stdin prints the counts as JSON, end of stdin stops it. Nothing is recorded."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support import openai_server
    from support.openai_server import OpenAIServer

    class Forget(list):  # type: ignore[type-arg]
        def append(self, item: Any) -> None:
            pass

    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def counted(req: dict[str, Any]) -> Any:
        with lock:
            counts[str(req.get("model"))] += 1
        return answer(req)

    openai_server._HTTPServer.request_queue_size = 1024  # a batch opens hundreds of connections at once
    srv = OpenAIServer(counted, max_requests=10 ** 9, max_lifetime=24 * 3600)
    srv.requests, srv.records = Forget(), Forget()
    srv.start()
    print(srv.api_base, flush=True)
    for _ in sys.stdin:
        with lock:
            print(json.dumps(dict(counts)), flush=True)
    srv.stop()


class Server:
    def __init__(self, proc: subprocess.Popen[str], api_base: str):
        self.proc, self.api_base = proc, api_base

    def counts(self) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("counts\n")
        self.proc.stdin.flush()
        return dict(json.loads(self.proc.stdout.readline()))


@contextlib.contextmanager
def server(latency: float, script: str = __file__) -> Iterator[Server]:
    """The server child: ``script --serve latency`` (a script whose ``--serve`` calls ``serve_with``)."""
    proc = subprocess.Popen([PY, script, "--serve", str(latency)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        yield Server(proc, proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()


# ---- the clients (each in its own interpreter) -------------------------------------------------
def bid_instruction(name: str, others: list[str], sender: str, text: str) -> str:
    """The bid instruction fsmchat's GroupChat sends (the floor and LangGraph send the same)."""
    return (f"You are {name} in a group chat with {', '.join(others) or 'no one else'}. "
            f"The latest message is from {sender}:\n\n{text}\n\n"
            "Decide whether to speak next. Call the respond tool exactly once: score (0..1) is how much "
            "you want the floor, message is your reply to the group, or an empty string to stay silent.")


def bid_messages(name: str, names: list[str], transcript: list[tuple[str, str]]) -> list[dict[str, str]]:
    """System prompt, the conversation as ``name`` sees it (its own rows as the assistant, the task
    plainly, the others' as ``"Name: text"``), then the instruction: fsmchat's bid request."""
    msgs = [{"role": "system", "content": SYSTEM[name]}, {"role": "user", "content": transcript[0][1]}]
    for role, content in transcript[1:]:
        msgs.append({"role": "assistant", "content": content} if role == name else
                    {"role": "user", "content": f"{role}: {content}"})
    sender, last = transcript[-1]
    msgs.append({"role": "user", "content": bid_instruction(name, [n for n in names if n != name], sender, last)})
    return msgs


def choose(names: list[str], bids: list[tuple[float, str]], recent: str | None) -> int | None:
    """GroupChat's rule: the best recency-adjusted bid strictly above 0.5, ties to the earlier agent."""
    best_i, best = None, 0.5
    for i, (score, message) in enumerate(bids):
        adjusted = score - 0.3 if names[i] == recent else score
        if message and adjusted > best:
            best_i, best = i, adjusted
    return best_i


def run_fsmchat(api_base: str, model: str, n: int, tasks: list[str], transport: str) -> list[Any]:
    from fsmchat import Agent, GroupChat

    agents = [Agent(name, system_prompt=SYSTEM[name], model="openai/" + model, api_base=api_base, api_key="sk-bench",
                    tool_mode="native", num_retries=0, timeout=60, transport=transport) for name in NAMES[:n]]
    results = GroupChat(agents=agents, max_loops=TURNS + 1).run_batch(tasks, max_concurrency=CHATS, progress=False)
    assert all(isinstance(r, str) and r.count(REPLY) == TURNS for r in results), results[:1]
    return list(results)


async def run_raw(api_base: str, model: str, n: int, tasks: list[str]) -> list[Any]:
    import aiohttp

    names = list(NAMES[:n])
    url, headers = api_base + "/chat/completions", {"Content-Type": "application/json",
                                                    "Authorization": "Bearer sk-bench"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def ask(messages: list[dict[str, str]]) -> tuple[float, str]:
            body = {"model": model, "messages": messages, "tools": [RESPOND_TOOL], "tool_choice": RESPOND_CHOICE}
            async with session.post(url, data=json.dumps(body), headers=headers) as resp:
                answer = json.loads(await resp.read())
            args = json.loads(answer["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
            return float(args["score"]), str(args["message"]).strip()

        async def chat(task: str) -> list[tuple[str, str]]:
            transcript, recent = [("User", task)], None
            for _ in range(TURNS):
                bids = await asyncio.gather(*(ask(bid_messages(name, names, transcript)) for name in names))
                i = choose(names, list(bids), recent)
                if i is None:
                    break
                transcript.append((names[i], bids[i][1]))
                recent = names[i]
            return transcript

        limit = asyncio.Semaphore(CHATS)

        async def bounded(task: str) -> list[tuple[str, str]]:
            async with limit:
                return await chat(task)

        results = list(await asyncio.gather(*(bounded(t) for t in tasks)))
        assert all(len(r) == TURNS + 1 for r in results), results[:1]
        return results


def run_langgraph(api_base: str, model: str, n: int, tasks: list[str]) -> list[Any]:
    from typing import TypedDict

    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph

    names = list(NAMES[:n])
    llms = {name: ChatOpenAI(model=model, base_url=api_base, api_key="sk-bench", max_retries=0, timeout=60)  # type: ignore[arg-type]
            .bind_tools([RESPOND_TOOL], tool_choice="respond") for name in names}

    class Chat(TypedDict):
        transcript: list[tuple[str, str]]
        recent: str | None
        bids: list[tuple[float, str]]
        winner: int | None

    def as_messages(name: str, transcript: list[tuple[str, str]]) -> list[Any]:
        kinds = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}
        return [kinds[m["role"]](content=m["content"]) for m in bid_messages(name, names, transcript)]

    async def bid(state: Chat) -> dict[str, Any]:
        async def one(name: str) -> tuple[float, str]:
            reply = await llms[name].ainvoke(as_messages(name, state["transcript"]))
            args = reply.tool_calls[0]["args"]
            return float(args["score"]), str(args["message"]).strip()
        bids = list(await asyncio.gather(*(one(name) for name in names)))
        return {"bids": bids, "winner": choose(names, bids, state["recent"])}

    def post(state: Chat) -> dict[str, Any]:
        i = state["winner"]
        assert i is not None
        return {"transcript": [*state["transcript"], (names[i], state["bids"][i][1])], "recent": names[i]}

    g = StateGraph(Chat)
    g.add_node("bid", bid)
    g.add_node("post", post)
    g.add_edge(START, "bid")
    g.add_conditional_edges("bid", lambda s: "post" if s["winner"] is not None else END, ["post", END])
    g.add_conditional_edges("post", lambda s: "bid" if len(s["transcript"]) <= TURNS else END, ["bid", END])
    app = g.compile()

    async def batch() -> list[Any]:
        limit = asyncio.Semaphore(CHATS)

        async def one(task: str) -> Any:
            async with limit:
                out = await app.ainvoke({"transcript": [("User", task)], "recent": None, "bids": [], "winner": None})
                return out["transcript"]

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    results = asyncio.run(batch())
    assert all(len(r) == TURNS + 1 for r in results), results[:1]
    return results


def swarms_chats(api_base: str, model: str, n: int, count: int) -> list[Any]:
    """``count`` swarms GroupChats, each with its own agents (a swarms chat and its agents hold the
    conversation, so one chat object cannot run two tasks at once)."""
    from swarms import Agent
    from swarms.structs.groupchat import GroupChat

    def agent(name: str) -> Any:
        return Agent(agent_name=name, system_prompt=SYSTEM[name], model_name="openai/" + model, llm_base_url=api_base,
                     llm_api_key="sk-bench", max_loops=1, print_on=False, verbose=False, retry_attempts=0)

    return [GroupChat(agents=[agent(name) for name in NAMES[:n]], max_loops=TURNS + 1) for _ in range(count)]


def run_swarms(chats: list[Any], tasks: list[str]) -> list[Any]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=CHATS) as pool:
        results = list(pool.map(lambda ct: ct[0].run(ct[1]), zip(chats, tasks)))
    assert all(str(r).count(REPLY) == TURNS for r in results), results[:1]
    return results


def client(case: str, api_base: str, model: str, n: int) -> dict[str, Any]:
    """Child side: one warm-up chat (its own model name, so the server counts it apart), then the
    batch, timed by this process's CPU clock."""
    warm, tasks = [TASK.format(i="warm-up")], [TASK.format(i=i) for i in range(CHATS)]
    swarm_batch: list[Any] = []
    if case == "swarms":  # the chats (and their agents) are built before the clock starts
        run_swarms(swarms_chats(api_base, "warm-" + model, n, 1), warm)
        swarm_batch = swarms_chats(api_base, model, n, CHATS)

    def go(model_name: str, todo: list[str]) -> list[Any]:
        if case == "fsmchat fast path":
            return run_fsmchat(api_base, model_name, n, todo, "auto")
        if case == "fsmchat litellm":
            return run_fsmchat(api_base, model_name, n, todo, "litellm")
        if case == "raw aiohttp":
            return asyncio.run(run_raw(api_base, model_name, n, todo))
        if case == "LangGraph":
            return run_langgraph(api_base, model_name, n, todo)
        return run_swarms(swarm_batch, todo)

    if case != "swarms":
        go("warm-" + model, warm)
    c0, t0 = time.process_time(), time.perf_counter()
    results = go(model, tasks)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert len(results) == CHATS
    return {"cpu": cpu, "wall": wall}


# ---- the parent: interleaved repetitions, counts checked at the server -------------------------
def interpreter(case: str, venv: Path) -> str:
    return str(venv / "bin" / "python") if case in THIRD_PARTY else PY


def measure(srv: Server, venv: Path, reps: int) -> dict[tuple[str, int], list[dict[str, float]]]:
    env = {**os.environ, **QUIET_ENV, "PYTHONPATH": str(ROOT), "WORKSPACE_DIR": str(ROOT / "out" / "swarms")}
    out: dict[tuple[str, int], list[dict[str, float]]] = {(c, n): [] for c in CASES for n in SIZES}
    for rep in range(reps):
        for n in SIZES:
            for k, case in enumerate(CASES):
                model = f"bench-{rep}-{n}-{k}"
                proc = subprocess.run([interpreter(case, venv), __file__, "--client", case, "--api-base", srv.api_base,
                                       "--model", model, "--n", str(n)], capture_output=True, text=True, env=env,
                                      cwd=ROOT, timeout=900)
                if proc.returncode:
                    raise SystemExit(f"{case} N={n} failed:\n{proc.stderr[-4000:]}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                got["calls"] = srv.counts().get(model, 0)
                print(f"rep {rep + 1} N={n} {case}: {got['calls']} calls, {got['cpu']:.2f} s CPU, "
                      f"{got['wall']:.2f} s wall", flush=True)
                out[(case, n)].append(got)
    expected = {n: CHATS * TURNS * n for n in SIZES}
    for (case, n), runs in out.items():  # the same model calls for every client, counted at the server
        assert all(r["calls"] == expected[n] for r in runs), (case, n, [r["calls"] for r in runs], expected[n])
    return out


def versions(venv: Path) -> str:
    third = venv_versions(venv, ('swarms', 'langgraph', 'langchain-openai', 'litellm'))
    from common import version
    return f"fsmchat's venv: litellm {version('litellm')}, aiohttp {version('aiohttp')}; comparison venv: {third}"


def floor_share(fast: float, floor: float) -> float:
    """The share of a fast-path call's CPU that the floor spends too (rates are calls per CPU-second)."""
    return (1 / floor) / (1 / fast)


def main() -> None:
    global CHATS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 repetitions of 10 chats")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    ap.add_argument("--venv", default=os.environ.get("COMPARE_VENV", str(ROOT / ".venv-compare")),
                    help="the venv with swarms, langgraph and langchain-openai (make bench-compare)")
    ap.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--api-base", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve is not None:
        return serve(args.serve)
    if args.quick:
        CHATS = 10
    if args.client:
        os.environ.update(QUIET_ENV)
        print(json.dumps(client(args.client, args.api_base, args.model, args.n)))
        return
    venv = Path(args.venv)
    if not (venv / "bin" / "python").exists():
        raise SystemExit(f"no comparison venv at {venv}: run `make bench-compare` (or pass --venv)")
    reps = 2 if args.quick else 5
    head = machine_line(reps, versions(venv))
    with server(LATENCY) as srv:
        runs = measure(srv, venv, reps)
    rate = {key: median(r["calls"] / r["cpu"] for r in rs) for key, rs in runs.items()}
    wall = {key: median(r["wall"] for r in rs) for key, rs in runs.items()}
    lines = ["| client | N | model calls per chat | calls per CPU-second | vs raw floor | fsmchat fast path vs it | "
             "batch wall |", "|---|---:|---:|---:|---:|---:|---:|"]
    for n in SIZES:
        for case in CASES:
            r = rate[(case, n)]
            lines.append(f"| {case} | {n} | {TURNS * n} | {r:,.0f} | {r / rate[('raw aiohttp', n)]:.2f}x | "
                         f"{rate[('fsmchat fast path', n)] / r:.2f}x | {wall[(case, n)]:.2f} s |")
    others = THIRD_PARTY  # the other libraries (fsmchat's own litellm path is a row of its own)
    verdicts, rows = [], []
    cmd = "make bench-compare  # or: .venv/bin/python bench/compare.py --write --venv PATH"
    for n in SIZES:
        fast, floor = rate[("fsmchat fast path", n)], rate[("raw aiohttp", n)]
        best = max(others, key=lambda c: rate[(c, n)])
        vs_best, vs_floor = fast / rate[(best, n)], fast / floor
        verdicts.append(f"- N={n}: the fast path is {vs_best:.1f}x the best other library ({best}; goal >= 5x: "
                        f"{status(vs_best >= 5)}) and {vs_floor:.0%} of the raw floor (goal >= 70 %: "
                        f"{status(vs_floor >= 0.7)}); {fast / rate[('fsmchat litellm', n)]:.1f}x fsmchat's own "
                        f"litellm path. fsmchat's CPU beyond the floor: {(1 / fast - 1 / floor) * 1e6:.0f} µs per "
                        f"model call, {1 - floor_share(fast, floor):.0%} of a fast-path turn (client and engine together, which "
                        "the floor goal bounds; the engine and pattern share is `bench/own_share.py`'s).")
        rows.append({"target": "What users run (model-backed)", "measure": f"model calls per CPU-second, batches of "
                     f"{CHATS} GroupChats, N={n}, {TURNS} turns, local server ({LATENCY * 1e3:.0f} ms)",
                     "fsmchat": round(fast), "floor": round(floor), "langgraph": round(rate[("LangGraph", n)]),
                     "ratio": f"{vs_best:.1f}x {best}; swarms {rate[('swarms', n)]:.0f}; "
                              f"litellm path {rate[('fsmchat litellm', n)]:.0f}; {vs_floor:.0%} of the floor",
                     "goal": ">= 5x the best other library, >= 70 % of the raw floor",
                     "ok": vs_best >= 5 and vs_floor >= 0.7, "command": cmd})
    text = "\n".join([
        "## What users run: model-backed GroupChats against swarms, LangGraph and the raw floor", "",
        "`make bench-compare` (builds the comparison venv from `bench/requirements-compare.txt`, then runs "
        "`bench/compare.py --write`). Batches of GroupChats (every agent bids every turn through a forced "
        f"`respond` call, {TURNS} turns, so {TURNS} x N model calls per chat; {CHATS} chats at once) against a local "
        f"OpenAI-compatible server answering after {LATENCY * 1e3:.0f} ms, in a child process. Each client runs in "
        "its own interpreter; CPU is that process's `process_time` (all threads) over the batch, after one warm-up "
        "chat. The server counts every client's calls; the counts are asserted equal. swarms' chats and agents are "
        "built before its clock starts (a swarms chat holds its conversation, so a batch needs one per task); "
        "fsmchat's and LangGraph's are built inside theirs.", "",
        head, "",
        *lines, "",
        *verdicts,
    ])
    finish("compare", {"compare": text}, rows, args.write)


if __name__ == "__main__":
    main()
