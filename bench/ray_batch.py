"""Batches on Ray: N = 10,000 GroupChats whose scripted model answers after 50 ms,
``run_batch`` in one process (asyncio, ``max_concurrency=C``) against ``executor="ray"`` with 2
local workers (``max_concurrency_per_worker=C``), each side in a fresh interpreter.

The chat: 2 ``Agent``s on a ``FunctionModel`` (a module-level function of the request, so Ray
workers rebuild it from the config), ``max_loops=3``: 2 bidding turns, 4 model calls through
litellm per chat. Both sides must return the same results (compared by hash). Reported: wall
time and throughput of the batch, and Ray's start-up, split into ``ray.init`` (a local Ray) and
readying the 2 workers (an actor each, importing fsmchat and litellm), plus ``ray.shutdown``.

    .venv/bin/python bench/ray_batch.py [--n 10000] [--concurrency 64] [--quick] [--write]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from time import perf_counter, process_time
from typing import Any

from common import child, finish, machine_line, version

LATENCY = 0.05
WORKERS = 2


def answer(req: Any) -> Any:
    """The 50 ms scripted model: a bid hashed from the agent and the conversation."""
    from fsmchat import Bid
    from fsmchat.testing import Delay

    text = "|".join(str(m.get("content")) for m in req.messages)
    h = int(hashlib.sha256(f"{req.agent}|{text}".encode()).hexdigest()[:8], 16)
    return Delay(LATENCY, Bid(0.5 + (h % 500) / 1000, f"{req.agent}: point {h % 97}"))


def make_chat() -> Any:
    from fsmchat import GroupChat
    from fsmchat.testing import FunctionModel

    model = FunctionModel(answer, id="bench-answer")
    return GroupChat(agents=[model.agent("Optimist", system_prompt="You see the upside."),
                             model.agent("Skeptic", system_prompt="You see the risks.")], max_loops=3)


def tasks(n: int) -> list[str]:
    return [f"Question {i}: should team {i % 17} ship feature {i % 101}?" for i in range(n)]


def digest(results: list[Any]) -> str:
    return hashlib.sha256(json.dumps(results, default=str).encode()).hexdigest()[:16]


def run_local(n: int, c: int) -> dict[str, Any]:
    t0 = perf_counter()
    chat = make_chat()  # imports litellm (the scripted model registers with it)
    chat.run_batch(["warm up"])
    warm = perf_counter() - t0  # paid once per process, not part of the batch
    todo = tasks(n)
    t0, c0 = perf_counter(), process_time()
    results = chat.run_batch(todo, max_concurrency=c)
    wall, cpu = perf_counter() - t0, process_time() - c0
    return {"wall": wall, "cpu": cpu, "warm": warm, "hash": digest(results), "n": n}


def run_ray(n: int, c: int) -> dict[str, Any]:
    from fsmchat.patterns.distributed import execute_batch, shutdown, start_local_ray, worker_pool

    chat = make_chat()
    t0 = perf_counter()
    start_local_ray(num_cpus=WORKERS, log_to_driver=False)
    init = perf_counter() - t0
    t0 = perf_counter()
    worker_pool(WORKERS)
    pool = perf_counter() - t0
    todo = tasks(n)
    t0 = perf_counter()
    report = execute_batch(chat, todo, workers=WORKERS, max_concurrency_per_worker=c, progress=False)
    wall = perf_counter() - t0
    assert report.failed == 0, report.failures[:3]
    t0 = perf_counter()
    shutdown()
    down = perf_counter() - t0
    return {"wall": wall, "init": init, "pool": pool, "shutdown": down, "prepare": report.startup_s,
            "hash": digest(report.results), "n": n, "calls": report.model_calls}


def measure(n: int, c: int) -> tuple[str, list[dict[str, Any]]]:
    head = machine_line(None, f"litellm {version('litellm')}, Ray {version('ray')}")  # the load before our runs
    local = child("ray_batch.py", "local", n, c, timeout=3600)
    ray = child("ray_batch.py", "ray", n, c, timeout=3600)
    same = local["hash"] == ray["hash"]
    startup = ray["init"] + ray["pool"]
    lines = [head + f" {n:,} GroupChats (2 agents, max_loops=3: 4 model calls each), scripted model latency "
             f"{LATENCY * 1e3:.0f} ms, concurrency {c} per process.", "",
             "| executor | batch wall s | chats/s | start-up s | wall incl. start-up s | speed-up |",
             "|---|---:|---:|---:|---:|---:|",
             f"| local `run_batch`, 1 process | {local['wall']:.1f} | {n / local['wall']:.0f} | "
             f"{local['warm']:.1f} (litellm import) | {local['wall'] + local['warm']:.1f} | 1.00x |",
             f"| Ray, {WORKERS} local workers | {ray['wall']:.1f} | {n / ray['wall']:.0f} | {startup:.1f} | "
             f"{ray['wall'] + startup:.1f} | {local['wall'] / ray['wall']:.2f}x |", "",
             f"- Ray's start-up: `ray.init` of a local instance {ray['init']:.1f} s, readying {WORKERS} workers "
             f"(an actor each, importing fsmchat and litellm) {ray['pool']:.1f} s, the batch's own set-up (config "
             f"shipped, pattern rebuilt per worker) {ray['prepare']:.2f} s; `ray.shutdown` {ray['shutdown']:.1f} s.",
             f"- Local CPU: {local['cpu']:.1f} s for {n * 4:,} model calls ({local['cpu'] / (n * 4) * 1e3:.2f} ms per "
             "call, mostly litellm): one process is CPU-bound long before 50 ms latency matters, which is what "
             "the workers spread.",
             f"- Results identical (hash of the {n:,} outputs): {'yes' if same else '**no**'}."]
    speedup = local["wall"] / ray["wall"]
    rows = [{"target": "Ray batches",
             "measure": f"{n:,} GroupChats, 50 ms scripted model: batch wall (chats/s), Ray with {WORKERS} local "
                        "workers vs local run_batch",
             "fsmchat": f"{ray['wall']:.1f} s ({n / ray['wall']:.0f}/s)",
             "floor": f"{local['wall']:.1f} s ({n / local['wall']:.0f}/s), 1 process", "langgraph": None,
             "ratio": f"{speedup:.2f}x one process; Ray start-up {startup:.1f} s (init {ray['init']:.1f} + "
                      f"workers {ray['pool']:.1f})",
             "goal": f">= 1.5x one process on {WORKERS} cores, identical results", "ok": speedup >= 1.5 and same,
             "command": ".venv/bin/python bench/ray_batch.py --write"}]
    return "\n".join(lines), rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, n, c = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(run_local(n, c) if mode == "local" else run_ray(n, c)))
        return
    try:
        import ray  # noqa: F401
    except ImportError:
        print('bench/ray_batch.py needs Ray: .venv/bin/pip install -e ".[ray]"')
        return
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="chats per batch (default 10,000)")
    ap.add_argument("--concurrency", type=int, default=64, help="chats at once per process (default 64)")
    ap.add_argument("--quick", action="store_true", help="1,000 chats")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    args = ap.parse_args()
    text, rows = measure(1000 if args.quick else args.n, args.concurrency)
    finish("ray_batch", {"ray_batch": text}, rows, args.write)


if __name__ == "__main__":
    main()
