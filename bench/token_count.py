"""Counting a prompt's tokens (``fsmchat.speakers.context.count_tokens``): fsmchat's own count
(``fsmchat.speakers.tokens``, cl100k_base by litellm's rule) against the count it replaced,
``litellm.token_counter(model="", ...)`` (the same number: tests/speakers/test_tokens.py).

- first call, cold process: CPU and wall time of the first count in a fresh interpreter (fsmchat's
  modules already imported, the count's own imports and loads included: litellm's import before,
  tiktoken's encoding after), median of ``--cold`` processes per side;
- per call: CPU of counting a 100-message request (a system prompt, 99 turns of ~50 words, some
  named, the ``respond`` tool with a named tool choice) once warm, median of ``--reps`` rounds;
  ``same request`` counts one request again and again (what a conversation does with its history:
  fsmchat keeps each text's count), ``new texts`` a request whose every text is new each call.

    .venv/bin/python bench/token_count.py [--cold 5] [--reps 7]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("the plan needs a clear audience a short message a realistic timeline and a list of risks with owners "
         "so that everyone knows what to do next and when we will check progress again").split()
RESPOND = {"type": "function", "function": {"name": "respond", "description": "Bid for the floor and say it.",
                                            "parameters": {"type": "object", "properties": {
                                                "bid": {"type": "number", "description": "0 to 1"},
                                                "message": {"type": "string"}}, "required": ["bid", "message"]}}}
CHOICE = {"type": "function", "function": {"name": "respond"}}


def request(salt: int = 0) -> list[dict[str, Any]]:
    """A 100-message request; ``salt`` makes every text new."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"You are the critic ({salt}). Say what is weak."}]
    for i in range(99):
        body = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(48))
        if i % 3 == 0:
            messages.append({"role": "assistant", "content": f"Point {salt}.{i}: {body}."})
        else:
            messages.append({"role": "user", "name": ("Analyst", "Writer")[i % 2], "content": f"Point {salt}.{i}: {body}."})
    return messages


def old_count(model: str, messages: Any, tools: Any = None, tool_choice: Any = None) -> int:
    """``count_tokens`` before fsmchat counted itself: litellm's ``token_counter``, word for word."""
    from fsmchat.speakers.llm import get_litellm
    from fsmchat.speakers.wire import sent_messages

    lm = get_litellm()
    kind = lm.utils.huggingface_tokenizer_kind(model)
    return int(lm.token_counter(model=model if kind in ("anthropic", "deepseek") else "",
                                messages=sent_messages(list(messages)), tools=list(tools) if tools else None,
                                tool_choice=tool_choice if tools else None))


def counter(side: str) -> Callable[..., int]:
    if side == "litellm":
        return old_count
    from fsmchat.speakers.context import count_tokens
    return count_tokens


def cold(side: str) -> dict[str, Any]:
    """In this (fresh) process: the first count's CPU and wall, and whether litellm got imported."""
    import fsmchat.speakers.context  # noqa: F401  (fsmchat's modules are loaded first: not the count's cost)
    import fsmchat.speakers.llm  # noqa: F401
    import fsmchat.speakers.wire  # noqa: F401

    count = counter(side)
    messages = request()
    cpu, wall = time.process_time(), time.perf_counter()
    n = count("gpt-4o-mini", messages, [RESPOND], CHOICE)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"tokens": n, "cpu_ms": cpu * 1e3, "wall_ms": wall * 1e3, "litellm": "litellm" in sys.modules}


def per_call(side: str, reps: int, calls: int = 200) -> dict[str, Any]:
    count = counter(side)
    same = request()
    count("gpt-4o-mini", same, [RESPOND], CHOICE)  # warm: imports and the encoding loaded
    same_us, new_us = [], []
    for r in range(reps):
        start = time.process_time()
        for _ in range(calls):
            count("gpt-4o-mini", same, [RESPOND], CHOICE)
        same_us.append((time.process_time() - start) / calls * 1e6)
        fresh = [request(salt=1 + r * calls + i) for i in range(calls // 10)]
        start = time.process_time()
        for messages in fresh:
            count("gpt-4o-mini", messages, [RESPOND], CHOICE)
        new_us.append((time.process_time() - start) / len(fresh) * 1e6)
    return {"same_us": statistics.median(same_us), "new_us": statistics.median(new_us),
            "tokens": count("gpt-4o-mini", same, [RESPOND], CHOICE)}


def child(mode: str, side: str, reps: int = 0) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, __file__, "--child", mode, side, str(reps)], capture_output=True,
                          text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        mode, side, reps = sys.argv[2], sys.argv[3], int(sys.argv[4])
        print(json.dumps(cold(side) if mode == "cold" else per_call(side, reps)))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cold", type=int, default=5, help="fresh processes per side (default 5)")
    parser.add_argument("--reps", type=int, default=7, help="rounds of the per-call timing (default 7)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} at start, {os.cpu_count()} cores, Python {sys.version.split()[0]}")
    rows = {}
    for side in ("litellm", "fsmchat"):
        runs = []
        for _ in range(args.cold):
            runs.append(child("cold", side))
        warm = child("warm", side, args.reps)
        rows[side] = {"same_us": warm["same_us"], "new_us": warm["new_us"],
                      "tokens": {r["tokens"] for r in runs} | {warm["tokens"]},
                      "litellm": {r["litellm"] for r in runs},
                      "cpu_ms": statistics.median(r["cpu_ms"] for r in runs),
                      "wall_ms": statistics.median(r["wall_ms"] for r in runs)}
    print("\n| count | tokens | first call, cold: CPU / wall | imports litellm | per call, same request | "
          "per call, new texts |\n|---|---:|---:|---|---:|---:|")
    for side, label in (("litellm", "litellm.token_counter (before)"), ("fsmchat", "fsmchat.speakers.tokens (after)")):
        r = rows[side]
        print(f"| {label} | {', '.join(map(str, sorted(r['tokens'])))} | {r['cpu_ms']:,.0f} ms / {r['wall_ms']:,.0f} ms "
              f"| {'yes' if True in r['litellm'] else 'no'} | {r['same_us']:,.0f} us | {r['new_us']:,.0f} us |")
    assert rows["litellm"]["tokens"] == rows["fsmchat"]["tokens"], "the counts differ"


if __name__ == "__main__":
    main()
