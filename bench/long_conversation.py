"""A long GroupChat under ``Summarize``: prompt tokens per call stay under the model's input limit and
flat, and the compactions are the only calls added.

Two bidders talk for ``--messages`` messages (the task included) against a scripted model that
declares a window of ``--limit`` tokens; a third agent writes the summaries. The same chat without
a policy is run until its first refusal (``ContextTooLong``) to show where the whole transcript
stops fitting.

    PYTHONPATH=. python bench/long_conversation.py --messages 2000 --limit 4000
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from fsmchat import Bid, GroupChat, Summarize  # noqa: E402
from fsmchat.testing import ScriptedModel  # noqa: E402

WORDS = "we should weigh the cost the risk and the time before we commit to the plan".split()


def bid(agent: str, score: float):
    def answer(req):
        return Bid(score, f"{agent} {req.n}: " + " ".join(WORDS[(req.n + i) % len(WORDS)] for i in range(24)))
    return answer


def summary(req):
    return f"Summary {req.n}: the two agents weighed cost, risk and time; no decision yet."


def chat(model: ScriptedModel, messages: int, policy: Summarize | None) -> GroupChat:
    a, b = model.agent("a"), model.agent("b")
    return GroupChat(agents=[a, b], max_loops=messages, recency_penalty=0.3, context=policy)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--limit", type=int, default=4000)
    p.add_argument("--keep-last", type=int, default=8)
    p.add_argument("--at", type=float, default=0.7)
    args = p.parse_args()

    m = ScriptedModel({"a": [bid("a", 0.9)] * args.messages, "b": [bid("b", 0.8)] * args.messages,
                       "scribe": [summary] * args.messages}, max_input_tokens=args.limit, keep_messages=1)
    policy = Summarize(agent=m.agent("scribe"), keep_last=args.keep_last, at=args.at)
    g = chat(m, args.messages, policy)
    started = time.perf_counter()
    r = g.execute("Plan the launch.")
    wall = time.perf_counter() - started
    counted = [e for e in r.events if e["event"] == "prompt_tokens"]
    bids = [e["tokens"] for e in counted if e["agent"] != "scribe"]
    scribe = [e["tokens"] for e in counted if e["agent"] == "scribe"]
    turns = len(r.transcript) - 1
    compactions = sum(1 for e in r.events if e["event"] == "compacted")
    quarter = len(bids) // 4
    print(f"ok={r.ok} stop={r.stop_reason} messages={len(r.transcript)} turns={turns} limit={args.limit}")
    print(f"calls={r.calls} bids={m.calls('a') + m.calls('b')} (2 x {turns} turns) compactions={compactions} "
          f"(summary calls {m.calls('scribe')}) max_calls()={g.max_calls()}")
    print(f"bid prompt tokens: max={max(bids)} mean={statistics.mean(bids):.0f} "
          f"first-quarter mean={statistics.mean(bids[:quarter]):.0f} last-quarter mean={statistics.mean(bids[-quarter:]):.0f}")
    print(f"summary prompt tokens: max={max(scribe) if scribe else 0}")
    print(f"wall={wall:.1f}s ({wall / max(1, r.calls) * 1000:.2f} ms per call, token counting included)")

    m2 = ScriptedModel({"a": [bid("a", 0.9)] * args.messages, "b": [bid("b", 0.8)] * args.messages},
                       max_input_tokens=args.limit, keep_messages=1)
    r2 = chat(m2, args.messages, None).execute("Plan the launch.")
    print(f"without a policy: ok={r2.ok} after {len(r2.transcript)} messages: {type(r2.error).__name__}")


if __name__ == "__main__":
    main()
