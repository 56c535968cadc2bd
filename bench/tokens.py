"""Tokens (target 6): prompt tokens per GroupChat conversation, as the scripted model receives
them, against the count the reference semantics require (computed here independently from the
final transcript), and the cut from GroupChat's windowed context view (``context_window``).

The chat: 3 agents (system prompts of ~20 words), ``max_loops=30`` (the task plus 29 posted
messages), every bid 0.9 with a ~50-word message, so the recency penalty hands the floor on and
every turn posts: 29 bidding turns x 3 calls = 87 requests. ``fsmchat.testing.ScriptedModel``
records every request's messages (the real litellm path).

Token proxy: **characters / 4** of the message contents (no tokenizer is downloaded here; the
ratio, not the absolute count, is the point). Counted in parts: system prompts, the shared
conversation (history), the turn instruction (it names the latest sender and repeats the latest
message, as the semantics require) and, separately, the ``respond`` tool schema sent with every
call.

Expected, from SEMANTICS.md ("the shared conversation as an agent sees it"): every call of a
turn carries the system prompt, then every message so far, oldest first (own as assistant, the
task as plain user, others as ``"Name: text"``), then one instruction. With a window of W,
the history is the task plus the last W messages. Any difference is an extra resend.

    .venv/bin/python bench/tokens.py [--write]   # deterministic: counts, not timings
"""
from __future__ import annotations

import inspect
import json
from typing import Any

from common import cli_args, finish
from fsmchat import Bid, GroupChat
from fsmchat.speakers.respond import RESPOND_TOOL

ROSTER = {"Analyst": "You are the analyst. You weigh evidence, name assumptions and keep the group honest "
                     "about what is known.",
          "Critic": "You are the critic. You look for the weakest point in every proposal and say so plainly, "
                    "with a fix.",
          "Writer": "You are the writer. You turn the group's ideas into clear prose a newcomer can follow."}
TASK = "Plan the launch of a small open-source library: audience, message, timeline and risks."
MAX_LOOPS, WINDOWS = 30, (6, 4)
WORDS = ("the plan needs a clear audience a short message a realistic timeline and a list of risks with owners "
         "so that everyone knows what to do next and when we will check progress again").split()


def reply(agent: str, n: int) -> str:
    """A deterministic ~50-word message."""
    body = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(48))
    return f"{agent}, point {n}: {body}."


def tok(text: str) -> float:
    return len(text) / 4


def content(m: dict[str, Any]) -> str:
    c = m.get("content") or ""
    return c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if isinstance(p, dict))


def run_chat(window: int | None) -> tuple[Any, Any]:
    from fsmchat.testing import ScriptedModel

    sm = ScriptedModel(fn=lambda req: Bid(0.9, reply(req.agent, req.n)), name="tokens")
    kw = {"context_window": window} if window is not None else {}
    chat = GroupChat(agents=[sm.agent(a, system_prompt=p) for a, p in ROSTER.items()], max_loops=MAX_LOOPS, **kw)
    res = chat.execute(TASK)
    assert res.error is None and len(res.transcript) == MAX_LOOPS, (res.stop_reason, res.error)
    return res, sm


def measured(sm: Any) -> dict[str, Any]:
    """Per part, summed over every request; and the last turn's per-call prompt."""
    parts = {"system": 0.0, "history": 0.0, "instruction": 0.0}
    last_call = 0.0
    for r in sm.requests:
        msgs = r.messages
        sys_ = [m for m in msgs if m["role"] == "system"]
        body = [m for m in msgs if m["role"] != "system"]
        parts["system"] += sum(tok(content(m)) for m in sys_)
        parts["history"] += sum(tok(content(m)) for m in body[:-1])
        parts["instruction"] += tok(content(body[-1]))
        last_call = sum(tok(content(m)) for m in msgs)
    tools = sum(tok(json.dumps(r.tools)) for r in sm.requests if r.tools)
    return {**parts, "total": sum(parts.values()), "tools": tools, "calls": len(sm.requests), "last_call": last_call}


def expected(res: Any, sm: Any, window: int | None) -> dict[str, float]:
    """What the semantics require, rebuilt from the final transcript: turn k (k messages so far)
    sends each of the 3 agents its system prompt and its view of those messages; the
    instruction is taken from the request (its wording is fsmchat's own) but must hold the latest
    message exactly once."""
    rows = res.transcript
    hist = sys_ = 0.0
    calls = 0
    for k in range(1, len(rows)):  # a bidding turn after k messages (the last turn posts message k+1)
        seen = rows[:k]
        if window is not None and len(seen) > window + 1:
            seen = seen[:1] + seen[-window:]
        for agent, prompt in ROSTER.items():
            calls += 1
            sys_ += tok(prompt)
            for m in seen:
                text = m.content if m.role in (agent, "User") else f"{m.role}: {m.content}"
                hist += tok(text)
    for r in sm.requests:  # the latest message rides in the instruction once, and only there once more
        latest = rows[len([m for m in r.messages if m["role"] != "system"]) - 2] if window is None else None
        if latest is not None:
            assert content(r.messages[-1]).count(latest.content) == 1, "instruction must repeat the latest message once"
    assert calls == len(sm.requests), (calls, len(sm.requests))
    return {"system": sys_, "history": hist}


def measure() -> tuple[str, list[dict[str, Any]]]:
    res, sm = run_chat(None)
    full, exp = measured(sm), expected(res, sm, None)
    has_window = "context_window" in inspect.signature(GroupChat.__init__).parameters
    win: dict[int, dict[str, Any]] = {}
    wexp: dict[int, dict[str, float]] = {}
    if has_window:
        for w in WINDOWS:
            wres, wsm = run_chat(w)
            win[w], wexp[w] = measured(wsm), expected(wres, wsm, w)
    equal = abs(full["history"] - exp["history"]) < 1 and abs(full["system"] - exp["system"]) < 1
    lines = [f"GroupChat, 3 agents, max_loops={MAX_LOOPS} ({MAX_LOOPS - 1} posts, {full['calls']} bid calls), "
             "~50-word messages; tokens = characters / 4 of message contents (a proxy: no tokenizer).", "",
             "| prompt part (whole conversation) | measured | required by the semantics | "
             + " | ".join(f"context_window={w}" for w in win) + " |",
             "|---|---:|---:|" + "---:|" * len(win)]
    for part in ("system", "history", "instruction"):
        req = f"{exp[part]:,.0f}" if part in exp else "(fsmchat's wording)"
        lines.append(f"| {part} | {full[part]:,.0f} | {req} | " + " | ".join(f"{win[w][part]:,.0f}" for w in win) + " |")
    lines.append(f"| **total prompt** | **{full['total']:,.0f}** | | " +
                 " | ".join(f"**{win[w]['total']:,.0f}** ({full['total'] / win[w]['total']:.1f}x less)" for w in win) + " |")
    lines.append(f"| last turn, one call (29 messages so far) | {full['last_call']:,.0f} | | " +
                 " | ".join(f"{win[w]['last_call']:,.0f} ({full['last_call'] / win[w]['last_call']:.1f}x less)"
                            for w in win) + " |")
    lines.append(f"| `respond` tool schema, all calls (not in the totals) | {full['tools']:,.0f} | "
                 f"{len(json.dumps([RESPOND_TOOL])) / 4 * full['calls']:,.0f} | " +
                 " | ".join(f"{win[w]['tools']:,.0f}" for w in win) + " |")
    lines += ["",
              f"- No extra resends: the measured system and history tokens {'equal' if equal else 'DIFFER FROM'} "
              "the count the semantics require (each call sends the conversation once; the instruction repeats only "
              "the latest message, as the semantics ask)."]
    if win:
        ok = {w: full["last_call"] / win[w]["last_call"] >= 3 for w in win}
        wequal = all(abs(win[w]["history"] - wexp[w]["history"]) < 1 for w in win)
        lines.append("- `context_window=W` sends the task plus the last W messages. At 30 messages it cuts one call's "
                     "prompt " + ", ".join(f"{full['last_call'] / win[w]['last_call']:.1f}x (W={w})" for w in win) +
                     " and the whole conversation's " + ", ".join(f"{full['total'] / win[w]['total']:.1f}x (W={w})"
                                                                  for w in win) +
                     f"; the windowed history {'matches' if wequal else 'DIFFERS FROM'} the expected count. The "
                     "conversation total falls less than one call's prompt because the early turns are shorter "
                     "than any window and the instruction and system prompt are per call; the cut grows with "
                     "max_loops (a full view costs O(turns^2) tokens, a window O(turns)).")
    else:
        ok = {}
        lines.append("- The windowed view (`context_window`) is not in this fsmchat yet.")
    rows = [{"target": "6. Tokens", "measure": "prompt tokens per conversation (chars/4), max_loops=30",
             "fsmchat": round(full["total"]), "floor": round(exp["system"] + exp["history"] + full["instruction"]),
             "langgraph": None, "ratio": "equal to the semantics" if equal else "extra resends",
             "goal": "= semantics", "ok": equal, "command": ".venv/bin/python bench/tokens.py --write"}]
    for w in win:
        rows.append({"target": "6. Tokens", "measure": f"context_window={w}: one call at 30 messages / whole chat",
                     "fsmchat": f"{full['last_call'] / win[w]['last_call']:.1f}x / {full['total'] / win[w]['total']:.1f}x less",
                     "floor": None, "langgraph": None, "ratio": "", "goal": ">= 3x at 30 messages", "ok": ok[w],
                     "command": ".venv/bin/python bench/tokens.py --write"})
    return "\n".join(lines), rows


def main() -> None:
    args = cli_args(__doc__, "no effect (the counts are deterministic)")
    text, rows = measure()
    finish("tokens", {"tokens": text}, rows, args.write)


if __name__ == "__main__":
    main()
