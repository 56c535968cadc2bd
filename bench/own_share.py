"""fsmchat's own share of a model-backed GroupChat turn on the fast path: the figures, then where it goes.

fsmchat's own work is the engine's and the pattern's; the model call (fsmchat's fast-path client in
``speakers/wire.py`` and ``llm.py``: the request body, HTTP, parsing, usage, cost, retries) is the
model's, as litellm's call was, and its cost over a raw aiohttp client has its own goal (>= 70 % of
the raw floor, ``bench/compare.py``). Two figures, no profiler:

**Engine + pattern share** (``engine_client``): one interpreter per size and repetition runs the
batch of ``bench/compare.py`` (GroupChats of N=3 and N=8 agents, 5 turns, 20 at once, every agent
bidding every turn, against a local OpenAI-compatible server in a child process answering after
50 ms) once with recording fast-path agents, then the same tasks with ``Replayed`` bidders that
return, at once, the bids the agents returned (the run's path, stop reason, transcript, events and
step records asserted equal). Then the model-backed batch and ``REPLAYS`` replayed batches,
``BATCHES`` times in alternating order, each on the process's CPU clock: the share is the replayed
batch's CPU over the model-backed batch's. The agents' prompt building (``Agent.prompt``), which
the replay leaves out, is timed beside it on the same turns.

**Client + engine over the raw floor**: the same batch run by two clients, each in its own
interpreter: fsmchat's fast path (``GroupChat.run_batch`` of ``Agent(model="openai/...",
api_base=...)``) and the raw aiohttp floor (the same requests posted with ``aiohttp`` and read with
``json``, the winner chosen in a few lines). A client runs one warm-up batch, a full collection
(``gc.collect()``), then ``BATCHES`` measured batches, timed by its process's CPU clock
(``time.process_time``); the collector's own CPU time is timed too (``gc.callbacks``), as part of
that total. The clients (and the replay's interpreter) run one after the other, each repetition
starting with the next one, and the server counts every client's requests (asserted equal). The
figure is ``1 - floor CPU per call / fsmchat CPU per call`` of the same repetition (the median and
the range over repetitions are shown), and the same from each client's least CPU per call. Before
the timing, one chat of each client is sent to a recording server and their request bodies are
asserted equal (same JSON, same length). With ``--against REF`` fsmchat at a git ref runs beside
this tree's, in the same repetitions.

**Where it goes** (cProfile, an upper bound): the fast-path batch run under ``cProfile`` after a
warm-up batch (and the floor's, for its count of Python calls); every function's own time
(``tottime``) is put in the group of the file it is defined in: fsmchat's engine and pattern
(``fsmchat/`` outside ``speakers/``), fsmchat's agent and model client (``fsmchat/speakers/``),
``aiohttp``/``yarl``/``multidict``, ``json``, ``asyncio`` (with ``selectors``/``socket``/``ssl``),
pydantic, other. A builtin's time (``len``, ``dict.get``, a socket's ``send``, a collection the
allocation triggered) goes to the group of its callers, in proportion to what each caller spent in
it. cProfile inflates Python-heavy code more than C, so fsmchat's profiled shares are larger than
the measured ones; they say which functions the CPU is in.

    .venv/bin/python bench/own_share.py [--quick] [--write] [--against REF]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from common import PY, ROOT, finish, machine_line, median, status, trees_against  # noqa: E402

sys.path.insert(0, os.environ.get("FSMCHAT_TREE", str(ROOT)))  # this checkout's fsmchat (or --against's)
GOAL = 0.05
FAST, RAW = "fsmchat fast path", "raw aiohttp"
ENGINE = "fsmchat fast path, and its bids replayed"  # engine_client
BATCHES = 3  # measured batches per client process (after its warm-up batch)
REPLAYS = 5  # replayed batches per model-backed batch (an instant batch is short: several steady its timing)
ENGINE_GROUP, CLIENT_GROUP = "engine and pattern", "agent and model client"
GROUPS = ((CLIENT_GROUP, ("/fsmchat/speakers/",)), (ENGINE_GROUP, ("/fsmchat/",)),  # speakers/ first: a subfolder
          ("aiohttp", ("/aiohttp/", "/yarl/", "/multidict/", "/aiohappyeyeballs/", "/frozenlist/", "/propcache/")),
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


def start_client(case: str, api_base: str, model: str, n: int, batches: int, tree: str) -> subprocess.Popen[str]:
    """A client's interpreter, importing fsmchat from ``tree``."""
    env = {**os.environ, **compare.QUIET_ENV, "PYTHONPATH": tree, "FSMCHAT_TREE": tree}
    return subprocess.Popen([PY, __file__, "--client", case, "--api-base", api_base, "--model", model, "--n", str(n),
                             "--batches", str(batches)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)


def result_of(proc: subprocess.Popen[str], what: str) -> dict[str, Any]:
    out, err = proc.communicate(timeout=900)
    if proc.returncode:
        raise SystemExit(f"{what} failed:\n{err[-4000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_client(case: str, api_base: str, model: str, n: int, batches: int) -> dict[str, Any]:
    return result_of(start_client(case, api_base, model, n, batches, str(ROOT)), f"{case} N={n}")


# ---- the engine and pattern work: the same batch with the bids replayed --------------------------
class Replayed:
    """A participant that bids, at once and with no model call, what the model-backed agent of its
    name bid at the same point of the same chat (``script``: (agent, task, transcript length) -> its
    ``BidOutcome``). It is fsmchat's ``Speaker`` protocol (a name, ``reply``, ``bid``), nothing more."""

    def __init__(self, name: str, script: dict[tuple[str, str, int], Any]):
        self.name, self.script = name, script

    async def reply(self, turn: Any) -> str:
        raise AssertionError(f"{self.name}: a GroupChat bidder is never asked for a reply")

    async def bid(self, turn: Any) -> Any:
        return self.script[(self.name, turn.transcript[0].content, len(turn.transcript))]


def recording_agents(api_base: str, model: str, n: int, script: dict[tuple[str, str, int], Any]) -> list[Any]:
    """``compare.run_fsmchat``'s agents, each writing every bid it returns into ``script``."""
    from fsmchat import Agent

    class Recording(Agent):
        async def bid(self, turn: Any) -> Any:
            out = await super().bid(turn)
            script[(self.name, turn.transcript[0].content, len(turn.transcript))] = out
            return out

    return [Recording(name=name, system_prompt=compare.SYSTEM[name], model="openai/" + model, api_base=api_base,
                      api_key="sk-bench", tool_mode="native", num_retries=0, timeout=60) for name in compare.NAMES[:n]]


def executed(agents: list[Any], tasks: list[str]) -> list[Any]:
    """Every task's ``RunResult``, ``CHATS`` at once (``run_batch``'s concurrency), for the path check."""
    from fsmchat import GroupChat

    chat = GroupChat(agents=agents, max_loops=compare.TURNS + 1)

    async def batch() -> list[Any]:
        gate = asyncio.Semaphore(compare.CHATS)

        async def one(task: str) -> Any:
            async with gate:
                return await chat.aexecute(task)

        return list(await asyncio.gather(*(one(t) for t in tasks)))

    return asyncio.run(batch())


def run_path(result: Any) -> tuple[Any, ...]:
    """What must be the same in a model-backed run and its replay: the path, the stop reason, the
    transcript (every message's role, text and metadata), the events and every step's record."""
    return (result.path, result.stop_reason, [(m.role, m.content, m.metadata) for m in result.transcript],
            result.events, [(e.state, e.trigger, e.dest, e.payload) for e in result.trace], result.error)


def replay_batch(n: int, tasks: list[str], script: dict[tuple[str, str, int], Any]) -> list[Any]:
    """``compare.run_fsmchat``'s batch with replayed bidders: the same ``run_batch``, the same check."""
    from fsmchat import GroupChat

    bidders = [Replayed(name, script) for name in compare.NAMES[:n]]
    results = GroupChat(agents=bidders, max_loops=compare.TURNS + 1).run_batch(tasks, max_concurrency=compare.CHATS,
                                                                              progress=False)
    assert all(isinstance(r, str) and r.count(compare.REPLY) == compare.TURNS for r in results), results[:1]
    return list(results)


def bid_turns(agents: list[Any], recorded: list[Any]) -> list[tuple[Any, Any]]:
    """(agent, the ``Turn`` GroupChat gave it) for every bid of the recorded batch, rebuilt from the transcripts;
    each agent's prompt for it is checked against the floor's request messages (``compare.bid_messages``)."""
    from fsmchat import Turn
    from fsmchat.patterns.group_chat import bid_instruction

    names = [a.name for a in agents]
    out = []
    for result in recorded:
        for k in range(compare.TURNS):
            rows = result.transcript[:k + 1]
            last = rows[-1]
            for a in agents:
                turn = Turn(a.name, rows, bid_instruction(a.name, [x for x in names if x != a.name], last.role,
                                                          last.content), "bid")
                assert a.prompt(turn) == compare.bid_messages(a.name, names, [(m.role, m.content) for m in rows])
                out.append((a, turn))
    return out


def engine_client(api_base: str, model: str, n: int, batches: int) -> dict[str, Any]:
    """The model-backed batch and its replay in one interpreter, interleaved, after a recording batch.

    One batch of recording agents (``executed``) writes every bid; the same tasks are run with
    ``Replayed`` bidders and every run's path, stop reason, transcript, events and step records are
    asserted equal. Then, after a warm-up of each and a full collection, ``batches`` times: the
    model-backed batch (``compare.run_fsmchat``, as the fast-path client runs it) and ``REPLAYS``
    replayed batches, in alternating order, each on the process's CPU clock; their outputs are
    asserted equal. Last, each agent's prompt for every bid of a batch (``Agent.prompt``), ``REPLAYS``
    times: the agent's own work the replay leaves out."""
    tasks = [compare.TASK.format(i=i) for i in range(compare.CHATS)]
    script: dict[tuple[str, str, int], Any] = {}
    agents = recording_agents(api_base, "record-" + model, n, script)
    recorded = executed(agents, tasks)
    assert len(script) == compare.CHATS * compare.TURNS * n, len(script)
    replayed = executed([Replayed(name, script) for name in compare.NAMES[:n]], tasks)
    for a, b in zip(recorded, replayed):
        assert run_path(a) == run_path(b), (run_path(a), run_path(b))
    assert recorded[0].stop_reason == "max_loops" and len(recorded[0].transcript) == compare.TURNS + 1
    turns = bid_turns(agents, recorded)

    def model_backed() -> list[Any]:
        return compare.run_fsmchat(api_base, model, n, tasks, "auto")

    def replays() -> list[Any]:
        return [replay_batch(n, tasks, script) for _ in range(REPLAYS)][-1]

    def prompts() -> None:
        for _ in range(REPLAYS):
            for a, turn in turns:
                a.prompt(turn)

    compare.run_fsmchat(api_base, "warm-" + model, n, tasks, "auto")
    replays()
    prompts()
    gc.collect()
    clock = CollectorClock()
    gc.callbacks.append(clock)
    cpu, collector = {"model": 0.0, "replay": 0.0}, {"model": 0.0, "replay": 0.0}
    outputs: dict[str, list[Any]] = {}
    for b in range(batches):
        for which in (("model", "replay") if b % 2 == 0 else ("replay", "model")):
            c0, g0 = time.process_time(), clock.cpu
            outputs[which] = model_backed() if which == "model" else replays()
            cpu[which] += time.process_time() - c0
            collector[which] += clock.cpu - g0
        assert outputs["model"] == outputs["replay"], "the replayed batch's outputs differ from the model-backed one's"
    c0 = time.process_time()
    prompts()
    prompt_cpu = time.process_time() - c0
    gc.callbacks.remove(clock)
    return {"cpu": cpu["model"], "replay": cpu["replay"] / REPLAYS, "gc": collector["model"],
            "replay_gc": collector["replay"] / REPLAYS, "prompt": prompt_cpu / REPLAYS * batches,
            "collections": clock.collections, "tracked": len(gc.get_objects()), "litellm": "litellm" in sys.modules}


# ---- the same requests ---------------------------------------------------------------------------
def same_requests() -> str:
    """One chat of each client (N=3 and N=8) to a recording server: their request bodies must be the
    same JSON, of the same length (fsmchat's model name and the floor's aside); returns what was checked."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.openai_server import OpenAIServer, respond

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
def measure(api_base: str, reps: int, batches: int, counts: Callable[[], dict[str, int]],
            trees: dict[str, str]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Each repetition runs every client of a size once, one after the other, starting with the next
    one each time (the raw floor, and fsmchat from each of ``trees``)."""
    cases = [*trees, RAW, ENGINE]
    out: dict[tuple[str, int], list[dict[str, Any]]] = {(c, n): [] for c in cases for n in compare.SIZES}
    for rep in range(reps):
        for n in compare.SIZES:
            for k in range(len(cases)):
                case = cases[(rep + k) % len(cases)]
                model = f"share-{rep}-{n}-{cases.index(case)}"
                proc = start_client(case if case in (RAW, ENGINE) else FAST, api_base, model, n, batches, trees.get(case, str(ROOT)))
                got = result_of(proc, f"{case} N={n}")
                got["calls"] = counts().get(model, 0)
                print(f"rep {rep + 1} N={n} {case}: {got['calls']} calls, {got['cpu'] / got['calls'] * 1e6:.0f} µs "
                      f"CPU per call ({got['gc'] / got['calls'] * 1e6:.0f} µs collector, full collections "
                      f"{got['collections'][2]})", flush=True)
                out[(case, n)].append(got)
    for (case, n), runs in out.items():  # the same model calls for every client, counted at the server
        expected = batches * compare.CHATS * compare.TURNS * n
        assert all(r["calls"] == expected for r in runs), (case, n, [r["calls"] for r in runs], expected)
    return out


# ---- where it goes -------------------------------------------------------------------------------
def group_of(filename: str) -> str:
    for name, needles in GROUPS:
        if any(n in filename for n in needles):
            return name
    return "other"


def shares(stats: pstats.Stats) -> tuple[dict[str, float], dict[str, list[tuple[float, str]]]]:
    """Own time per group (builtins charged to their callers' groups) and each fsmchat group's top functions."""
    groups: dict[str, float] = defaultdict(float)
    own: dict[str, dict[str, float]] = {ENGINE_GROUP: defaultdict(float), CLIENT_GROUP: defaultdict(float)}
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, func), (_cc, _nc, tt, _ct, callers) in raw.items():
        if filename == "~":  # a builtin: charged to its callers' groups, as they spent in it
            total = sum(c[2] for c in callers.values()) or 1.0
            for (cfile, cline, cfunc), c in callers.items():
                group = group_of(cfile)
                groups[group] += tt * c[2] / total
                if group in own:
                    own[group][f"{Path(cfile).name}:{cline} {cfunc}"] += tt * c[2] / total
            continue
        group = group_of(filename)
        groups[group] += tt
        if group in own:
            own[group][f"{Path(filename).name}:{line} {func}"] += tt
    return dict(groups), {g: sorted(((t, f) for f, t in fs.items()), reverse=True) for g, fs in own.items()}


def cumulative(stats: pstats.Stats, path_end: str, func: str) -> float:
    """The time in ``func`` of the file ending in ``path_end`` and in everything it called (cProfile's ``cumtime``)."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return float(sum(ct for (filename, _line, name), (_cc, _nc, _tt, ct, _callers) in raw.items()
                     if name == func and filename.endswith(path_end)))


def file_share(stats: pstats.Stats, path_end: str) -> float:
    """The own time of the functions defined in the file ending in ``path_end`` (builtins aside)."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return float(sum(tt for (filename, _line, _func), (_cc, _nc, tt, _ct, _callers) in raw.items()
                     if filename.endswith(path_end)))


def profile(api_base: str, n: int, case: str) -> pstats.Stats:
    go = batch_of(case, api_base, n, [compare.TASK.format(i=i) for i in range(compare.CHATS)])
    go(f"warm-profile-{n}-{case}")
    gc.collect()
    prof = cProfile.Profile(time.process_time)  # CPU time: the waits for the server are not counted
    prof.enable()
    go(f"profile-{n}-{case}")
    prof.disable()
    return pstats.Stats(prof)


def python_calls(stats: pstats.Stats, where: str = "") -> int:
    """Calls of Python functions (builtins aside) whose file path holds ``where``; a coroutine's resumption counts."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return sum(nc for (filename, _line, _func), (_cc, nc, *_rest) in raw.items() if filename != "~" and where in filename)


def short(filename: str) -> str:
    """``fsmchat/patterns/group_chat.py``, ``asyncio/tasks.py``: a file by its package and name."""
    parts = Path(filename).parts
    if "fsmchat" in parts:
        return "/".join(parts[len(parts) - 1 - parts[::-1].index("fsmchat"):])
    return "/".join(parts[-2:])


def own_times(stats: pstats.Stats, label: Callable[[str, int, str], str]) -> list[tuple[float, str]]:
    """Own time by ``label(file, line, function)``, a builtin's charged to its callers' labels; the largest first."""
    out: dict[str, float] = defaultdict(float)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, func), (_cc, _nc, tt, _ct, callers) in raw.items():
        if filename == "~":
            total = sum(c[2] for c in callers.values()) or 1.0
            for (cfile, cline, cfunc), c in callers.items():
                out[label(cfile, cline, cfunc)] += tt * c[2] / total
        else:
            out[label(filename, line, func)] += tt
    return sorted(((t, k) for k, t in out.items()), reverse=True)


def replay_profile(api_base: str, n: int) -> list[str]:
    """The replayed batch alone (the engine and pattern work of ``engine_client``) under cProfile: by file, by function."""
    tasks = [compare.TASK.format(i=i) for i in range(compare.CHATS)]
    script: dict[tuple[str, str, int], Any] = {}
    executed(recording_agents(api_base, f"record-profile-{n}", n, script), tasks)
    replay_batch(n, tasks, script)
    gc.collect()
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    replay_batch(n, tasks, script)
    prof.disable()
    stats = pstats.Stats(prof)
    files = own_times(stats, lambda f, _line, _func: short(f))
    funcs = own_times(stats, lambda f, line, func: f"{Path(f).name}:{line} {func}")
    total = sum(t for t, _ in files)
    turns = compare.CHATS * compare.TURNS
    return [f"- N={n}, the replayed batch alone (the engine and pattern work; profiled, {total / turns * 1e6:.0f} µs "
            "per turn under cProfile), by file: " + "; ".join(f"`{f}` {t / total:.0%}" for t, f in files[:10]) + ".",
            f"- N={n}, the replayed batch's top functions (own time, share of it): " +
            "; ".join(f"`{f}` {t / total:.1%}" for t, f in funcs[:12]) + "."]


def where_it_goes(api_base: str) -> list[str]:
    cols = (ENGINE_GROUP, CLIENT_GROUP, "aiohttp", "json", "asyncio", "pydantic", "other")
    lines = ["| N | " + " | ".join(cols) + " | of which `Agent.prompt` (cumulative) | Python calls per model call: "
             "fsmchat's / all / the floor's |", "|---:|" + "---:|" * (len(cols) + 2)]
    tops = []
    for n in compare.SIZES:
        stats, floor = profile(api_base, n, FAST), profile(api_base, n, RAW)
        calls = compare.CHATS * compare.TURNS * n
        groups, top = shares(stats)
        total = sum(groups.values())
        lines.append(f"| {n} | " + " | ".join(f"{groups.get(c, 0.0) / total:.1%}" for c in cols) +
                     f" | {cumulative(stats, 'speakers/agent.py', 'prompt') / total:.1%}"
                     f" | {python_calls(stats, '/fsmchat/') / calls:.0f} / {python_calls(stats) / calls:.0f} / "
                     f"{python_calls(floor) / calls:.0f} |")
        for group in (ENGINE_GROUP, CLIENT_GROUP):
            tops.append(f"- N={n}, {group}: top functions (own time, share of the profiled batch): " +
                        "; ".join(f"`{f}` {t / total:.1%}" for t, f in top[group][:10]) + ".")
        tops.append(f"- N={n}: `speakers/tool_loop.py`'s own time (in the agent-and-client column, but run by the "
                    f"replay too: GroupChat asks every bidder through it) {file_share(stats, 'speakers/tool_loop.py') / total:.1%}.")
        tops.extend(replay_profile(api_base, n))
    return [*lines, "", *tops]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 repetitions of 1 measured batch")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    ap.add_argument("--against", metavar="REF", help="also measure REF's fsmchat beside this tree's (git ref)")
    ap.add_argument("--client", help=argparse.SUPPRESS)
    ap.add_argument("--api-base", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--batches", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.update(compare.QUIET_ENV)
    if args.client:
        run = engine_client if args.client == ENGINE else lambda *a: client(args.client, *a)
        print(json.dumps(run(args.api_base, args.model, args.n, args.batches)))
        return
    reps, batches = (2, 1) if args.quick else (5, BATCHES)
    checked = same_requests()
    head = machine_line(reps, f"{compare.CHATS} chats at once, {compare.TURNS} turns, "
                              f"{compare.LATENCY * 1e3:.0f} ms server, {batches} measured batch(es) per client")
    with contextlib.ExitStack() as stack:
        trees = {FAST: str(ROOT)}
        if args.against:
            other = stack.enter_context(trees_against(args.against))[f"`{args.against}`"]
            trees[f"{FAST} at `{args.against}`"] = other
        srv = stack.enter_context(compare.server(compare.LATENCY))
        runs = measure(srv.api_base, reps, batches, srv.counts, trees)
        load_after = os.getloadavg()[0]
        profiled = where_it_goes(srv.api_base)
    lines = ["| client | N | model calls | CPU per call | beyond the floor | client + engine over the floor (range) | "
             "the same, least CPU of each | of which the collector |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows: list[dict[str, Any]] = []
    vs_ref: list[str] = []
    engine_rows: list[str] = []
    for n in compare.SIZES:
        raw = runs[(RAW, n)]
        floor = [r["cpu"] / r["calls"] for r in raw]
        for case in trees:
            got = runs[(case, n)]
            per = [r["cpu"] / r["calls"] for r in got]
            shares_ = [1 - f / c for c, f in zip(per, floor)]  # against the floor of the same repetition
            own = median(shares_)
            collector = median((g["gc"] - r["gc"]) / g["cpu"] for g, r in zip(got, raw))
            beyond = median(c - f for c, f in zip(per, floor))
            least = 1 - min(floor) / min(per)
            lines.append(f"| {case} | {n} | {got[0]['calls']:,} | {median(per) * 1e6:.0f} µs | {beyond * 1e6:.0f} µs | "
                         f"{own:.1%} ({min(shares_):.0%} to {max(shares_):.0%}) | {least:.1%} | {collector:.1%} |")
            if case == FAST:
                rows.append({"target": "client + engine over the raw floor", "measure": f"1 - floor CPU / fsmchat CPU "
                             f"per model call, fast-path GroupChat batches, N={n} (no profiler, floor in the same run)",
                             "fsmchat": f"{own:.1%} (least CPU of each: {least:.1%})",
                             "floor": f"{median(floor) * 1e6:.0f} µs/call", "langgraph": None,
                             "ratio": f"fsmchat {median(per) * 1e6:.0f} µs/call, {beyond * 1e6:.0f} µs beyond the floor; "
                                      "what the floor goal bounds (>= 70 % of the raw floor), not the own-share goal's",
                             "goal": "report", "ok": None, "command": ".venv/bin/python bench/own_share.py --write"})
        lines.append(f"| {RAW} | {n} | {raw[0]['calls']:,} | {median(floor) * 1e6:.0f} µs | - | - | - | - |")
        for case in trees:
            if case != FAST:
                ratio = median(r["cpu"] / o["cpu"] for r, o in zip(runs[(FAST, n)], runs[(case, n)]))
                vs_ref.append(f"N={n}: this tree's fast path takes {ratio:.2f}x the CPU per call of {case.split(' at ')[1]}'s")
        eng = runs[(ENGINE, n)]
        share = [r["replay"] / r["cpu"] for r in eng]  # the same process, the same repetition
        least_e = min(r["replay"] for r in eng) / min(r["cpu"] for r in eng)
        turns = batches * compare.CHATS * compare.TURNS
        per_turn = median(r["replay"] / turns for r in eng)
        model_turn = median(r["cpu"] / turns for r in eng)
        prompt = median(r["prompt"] / r["cpu"] for r in eng)
        same_client = median(e["cpu"] / f["cpu"] for e, f in zip(eng, runs[(FAST, n)]))
        ok = median(share) <= GOAL and least_e <= GOAL
        engine_rows.append(f"| {n} | {median(share):.1%} ({min(share):.1%} to {max(share):.1%}) | {least_e:.1%} | "
                           f"{per_turn * 1e6:.0f} µs ({per_turn / n * 1e6:.0f} per model call) | "
                           f"{model_turn * 1e6:.0f} µs | {median(r['replay_gc'] / r['replay'] for r in eng):.1%} | "
                           f"{prompt:.1%} | {same_client:.2f}x | {status(ok)} |")
        rows.append({"target": "fsmchat-own CPU share (engine + pattern)", "measure": "CPU of the batch with the bids "
                     f"replayed / CPU of the model-backed batch, fast-path GroupChat batches, N={n} (no profiler, one "
                     "process, interleaved)", "fsmchat": f"{median(share):.1%} (least CPU of each: {least_e:.1%})",
                     "floor": None, "langgraph": None,
                     "ratio": f"{per_turn * 1e6:.0f} µs of {model_turn * 1e6:.0f} µs CPU per turn; the agents' prompt "
                              f"building (not in it) {prompt:.1%}", "goal": "<= 5 %", "ok": ok,
                     "command": ".venv/bin/python bench/own_share.py --write"})
    gcs = "; ".join(f"N={n}: {case} {median(r['gc'] / r['calls'] for r in runs[(case, n)]) * 1e6:.0f} µs per call "
                    f"({median(r['collections'][2] for r in runs[(case, n)]):.0f} full collections, "
                    f"{median(r['tracked'] for r in runs[(case, n)]):,.0f} objects tracked after)"
                    for n in compare.SIZES for case in [*trees, RAW])
    text = "\n".join([
        "## fsmchat's own share of a model-backed turn (fast path)", "",
        "`.venv/bin/python bench/own_share.py [--write] [--against REF]`. Two figures, both without a profiler, "
        "from the same runs:", "",
        "- **engine + pattern share** (the goal's quantity: at most 5 % of a model-backed GroupChat turn on the fast "
        "path). fsmchat's own work is the engine's and the pattern's: stepping the graph, asking every bidder at once, "
        "choosing the winner, posting, the step records and events, the run's set-up and result. The model call is "
        "the model's, whoever makes it: fsmchat's fast-path client (the request body, HTTP, parsing, usage, cost, "
        "retries, in `fsmchat/speakers/wire.py` and `llm.py`) stands where litellm stood, and how much it costs over a "
        "raw aiohttp client is the second figure, bounded by its own goal (>= 70 % of the raw floor, "
        "`bench/compare.py`).",
        "- **client + engine over the raw floor**: `1 - floor CPU per call / fsmchat CPU per call`, the whole of "
        "fsmchat's process (client and engine) over a raw aiohttp client posting the same requests.", "",
        "**Engine + pattern share, method.** One interpreter per size and repetition runs the batch below with "
        "fsmchat's fast-path agents once, recording every bid each agent returns (keyed by agent, task and transcript "
        "length). The same tasks are run again with instant replayed bidders: fsmchat's participant protocol (a name "
        "and a `bid` that returns the recorded bid), no model call, no callable wrapper. Every run's path, stop "
        "reason, transcript (role, text, metadata), events and step records are asserted equal to the model-backed "
        "run's. Then, after a warm-up of each and a full collection, "
        f"{batches} time(s) in alternating order: the model-backed batch (`GroupChat.run_batch`, as `bench/compare.py` "
        f"runs it) and {REPLAYS} replayed batches (the same `run_batch`, the same bids, the same transcript growth), "
        "each on the process's CPU clock, their outputs asserted equal. The share is the replayed batch's CPU over "
        "the model-backed batch's, per repetition: the median, the range, and the same from each one's least CPU "
        "over the repetitions. The model-backed side includes its agents' construction and the replay its "
        "bidders'; both include `run_batch`, each run's set-up, the collector and the event loop's task scheduling "
        "for the bids (GroupChat gathers them). \"Of which the collector\" is the collector's part of the replayed "
        "batch's CPU; the last column compares the replay interpreter's model-backed batch with the fast-path "
        "client's of the same repetition (the same work in another process: near 1.00x, the process is a fair "
        "one to take the ratio in).", "",
        "**What the replay leaves out.** An agent turning the transcript into its request messages "
        "(`Agent.prompt`: the context policy, the input-limit check, the roster line) is the agent's work and is "
        "counted with the agent and its model call, not in the engine + pattern share. It is measured on its own: "
        "every agent's prompt for every bid of the batch, rebuilt from the recorded transcripts (each asserted equal "
        "to the raw floor's request messages), timed in the same process, as a share of the model-backed batch. "
        "What the replay keeps that lives in `speakers/` is GroupChat's call of each bidder (`ToolLoop.bid`'s "
        "check for tools) and the bid's `BidOutcome`: the pattern's work, counted in the share.", "",
        "**Client + engine over the floor, method.** fsmchat's fast path and the raw aiohttp "
        f"floor run the batch of `bench/compare.py` ({compare.CHATS} GroupChats at once, {compare.TURNS} turns, every "
        f"agent bidding every turn) against the same local server ({compare.LATENCY * 1e3:.0f} ms per request, a child "
        f"process), each client in its own interpreter: a warm-up batch, a full collection, then {batches} measured "
        "batch(es) on the process's CPU clock (every thread; the garbage collector's part timed by `gc.callbacks`). "
        "In each repetition the clients of a size (the two, and the replay's interpreter) run one after the other, "
        "each repetition starting with the next one; the server's request counts are asserted equal, and one chat "
        "of each client to a recording server first sends the same request bodies (same JSON, same length: "
        f"{checked}). The figure is `1 - floor CPU per call / fsmchat CPU per call` of the same repetition: the "
        "median, and the range over the repetitions; beside it the same figure from each client's least CPU per "
        "call over the repetitions (the run the machine's other load disturbed least). \"Of which the collector\" is "
        "the collector's CPU in fsmchat's process beyond the floor's, as a share of fsmchat's (median). The floor "
        "does less than a client must: it sets no timeout, reads no status code, usage or cost, retries nothing and "
        "keeps no run record (no events, no step records, no checkpoint); fsmchat does all of these, and its process "
        "holds litellm's import (its cost map and error mapping).", "",
        f"{head} Load average {load_after:.2f} after the timed runs (2 cores shared with other work: the ratios, "
        "taken within a repetition, are what count).", "",
        "| N | engine + pattern share (range) | least CPU of each | engine + pattern CPU per turn | model-backed CPU "
        "per turn | of which the collector (replay) | `Agent.prompt`, beside it | model-backed CPU vs the fast-path "
        "client's | goal <= 5 % |", "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *engine_rows, "",
        *lines, "",
        *([f"Against the code before: {'; '.join(vs_ref)} (the median of the same repetitions' ratios).", ""]
          if vs_ref else []),
        f"The collector: {gcs}.", "",
        "### Where it goes (cProfile, an upper bound)", "",
        "The fast-path batch profiled (cProfile on the process's CPU clock) after a warm-up batch and a full "
        "collection; each function's own time is counted to the package its file belongs to, a builtin's to its "
        "callers' packages (a collection goes to the function whose allocation started it). fsmchat is split into "
        "its layers: the engine and pattern (every file of `fsmchat/` outside `speakers/`: the engine, the graph, "
        "the patterns, the models, the writer) and the agent and its model client (`fsmchat/speakers/`); "
        "`Agent.prompt`'s cumulative time (the prompt building, with everything it calls) is shown beside them. The "
        "Python calls per model call (cProfile's counts, a coroutine's resumption counting as a call; builtins "
        "aside) do not depend on the machine's load: fsmchat's own functions, every Python function of fsmchat's "
        "process, and every one of the floor's, profiled the same way. cProfile inflates Python-heavy code more than "
        "C, so the engine's profiled share is above its measured one.", "",
        *profiled,
    ])
    finish("own_share", {"own_share": text}, rows, args.write)

if __name__ == "__main__":
    main()
