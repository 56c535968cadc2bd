"""What the run page shows, as JSON-able data: built once from a ``RunRecord`` and rendered by the
page's script, in the server and in an exported report alike.

Nothing here is invented: each field is what the store holds, and what it does not hold is said
(``notes``): a run checkpointed before runs kept their graph has no picture, one written before
steps recorded their message counts shows its whole transcript at every step.
"""
from __future__ import annotations

import json
from typing import Mapping

from ..graph.render import (dot_source, drawing_from_data, has_graphviz, overlay, render_svg, step_marks,
                            INSTALL_HINT)
from ..events import BidTools, InvalidBid, parse_events
from ..checks import JsonObject
from ..models import TraceEvent
from ..speakers.agent import mask_secrets
from ..speakers.context import token_summary
from .store import RunRecord, Step, ViewMessage, summary

PAYLOAD_CHARS = 400


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def num(x: object) -> str:
    return f"{x:.3g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else "—"


def payload_text(payload: object) -> str:
    if payload is None:
        return ""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, default=str)
    return text if len(text) <= PAYLOAD_CHARS else text[:PAYLOAD_CHARS] + f"… (+{len(text) - PAYLOAD_CHARS} chars)"


# ---- GroupChat turns: the bid step's raw scores, the select step's decision ----
def _is_bid(s: Step) -> bool:
    return (_short(s.state) == "bid" and isinstance(s.payload, dict) and bool(s.payload)
            and all(isinstance(v, (int, float)) for v in s.payload.values()))


def _is_select(s: Step) -> bool:
    return _short(s.state) == "select" and isinstance(s.payload, dict) and "adjusted" in s.payload


def turn_of(bid: Step, select: Step | None, threshold: object, invalid_events: dict[str, str],
            tools: Mapping[str, list[JsonObject]] | None = None) -> dict[str, object]:
    """Every agent's bid of one turn (with the tool calls a bidder made before it bid) and why the
    winner won (or why no one did). ``bid`` is a bid step and ``select`` its select step (``turns``)."""
    sel = select.payload if select is not None and isinstance(select.payload, dict) else {}
    adjusted = a if isinstance(a := sel.get("adjusted", {}), dict) else {}
    winner = sel.get("winner")
    threshold = sel.get("threshold", threshold)
    messages = sel.get("messages")
    invalid = i if isinstance(i := sel.get("invalid", invalid_events), dict) else {}
    agents: list[dict[str, object]] = []
    for name, raw in (bid.payload.items() if isinstance(bid.payload, dict) else ()):
        adj = adjusted.get(name)
        agents.append({"name": name, "raw": raw, "adjusted": adj,
                       "message": messages.get(name, "") if isinstance(messages, dict) else None,
                       "invalid": invalid.get(name),
                       "note": _bid_note(name, raw, adj, winner, adjusted, threshold) if select is not None else ""})
        if tools and tools.get(name):
            agents[-1]["tools"] = tools[name]
    if select is None:
        why = "the turn's selection is not committed yet"
    elif winner is None:
        why = (f"no bid's recency-adjusted score was strictly above the threshold {num(threshold)}: nothing is "
               "posted and the chat ends (lull)" if threshold is not None else
               "no bid cleared the threshold (its value is not recorded): the chat ends (lull)")
    else:
        tied = [n for n, a in adjusted.items() if n != winner and a == adjusted.get(winner)]
        why = (f"{winner} won with {num(adjusted.get(winner))}, the best recency-adjusted bid strictly above the "
               f"threshold {num(threshold)}" + (f"; tied with {', '.join(tied)}, and ties go to the earlier agent in "
                                                "the roster" if tied else ""))
    return {"agents": agents, "winner": winner, "threshold": threshold, "why": why,
            "messages_recorded": isinstance(messages, dict)}


def _bid_note(name: str, raw: object, adj: float | None, winner: str | None, adjusted: Mapping[str, object],
              threshold: object) -> str:
    """Why this bid did or did not win the turn (``adj``: its recency-adjusted score, a number the
    select step recorded, None: silent; ``winner``: the agent that won, None: no one)."""
    if adj is None:
        return "silent (no message)"
    parts = []
    if isinstance(raw, (int, float)) and adj < raw - 1e-9:
        parts.append(f"{num(raw)} − {num(raw - adj)} recency penalty (spoke recently) = {num(adj)}")
    if name == winner:
        parts.append("won: the best adjusted bid above the threshold")
    elif isinstance(threshold, (int, float)) and adj <= threshold:
        parts.append(f"not above the threshold {num(threshold)}")
    elif winner is not None and adj == adjusted.get(winner):
        parts.append(f"tied with {winner}, who comes earlier in the roster")
    elif winner is not None:
        parts.append(f"below {winner}'s {num(adjusted.get(winner))}")
    return "; ".join(parts)


def turns(steps: list[Step], threshold: object, events: list[object]) -> tuple[list[dict[str, object]], dict[int, int]]:
    """The GroupChat turns in ``steps`` and, per step index, the turn its bid or select step belongs to."""
    out: list[dict[str, object]] = []
    where: dict[int, int] = {}
    bids_in: dict[str, int] = {}  # bid steps per lane so far: the turn number, as events count it
    invalid_at: dict[int, dict[str, str]] = {}  # an older store's invalid bids: in the run's events, by turn
    tools_at: dict[int, dict[str, list[JsonObject]]] = {}  # the tool calls each bidder made before it bid, by turn
    for e in parse_events(e for e in events if isinstance(e, dict)):
        match e:
            case InvalidBid(turn=turn, agent=agent, reason=reason):
                invalid_at.setdefault(turn, {})[agent] = reason
            case BidTools(turn=turn, agent=agent, tool_calls=calls):
                tools_at.setdefault(turn, {})[agent] = calls
    for i, s in enumerate(steps):
        if not _is_bid(s):
            continue
        j = next((k for k in range(i + 1, len(steps)) if steps[k].lane == s.lane), None)
        select = steps[j] if j is not None and _is_select(steps[j]) else None
        k = bids_in[s.lane] = bids_in.get(s.lane, -1) + 1
        invalid = invalid_at.get(k, {}) if s.lane == "" else {}
        where[i] = len(out)
        if j is not None and select is not None:
            where[j] = len(out)
        out.append(turn_of(s, select, threshold, invalid, tools_at.get(k) if s.lane == "" else None))
    return out, where


# ---- the transcript at each step ----
def transcript_marks(steps: list[Step]) -> tuple[list[dict[str, object]], bool]:
    """Per step: how many of the run's messages were stored (``upto``) and, inside a fork, how many
    of each open branch lane's (``open``). False when the store does not record it."""
    if any(s.nmsg is None for s in steps):
        return [{} for _ in steps], False
    upto: int | None = 0
    open_lanes: dict[str, int | None] = {}
    marks: list[dict[str, object]] = []
    for s in steps:
        if s.lane == "":
            upto, open_lanes = s.nmsg, {}  # the run moved on: a fork's branches were joined into it
        else:
            open_lanes = {k: v for k, v in open_lanes.items() if not k.startswith(s.lane + "/")}
            open_lanes[s.lane] = s.nmsg
        marks.append({"upto": upto, **({"open": dict(open_lanes)} if open_lanes else {})})
    return marks, True


# ---- the picture ----
def picture(rec: RunRecord) -> tuple[str | None, list[tuple[int | None, int | None]], str | None]:
    """The run's graph as SVG with its trace overlaid, each step's (node, edge) index, or why there is no SVG."""
    data = rec.meta.get("graph")
    if data is None:
        return None, [(None, None)] * len(rec.steps), ("this run was checkpointed before runs kept their graph, "
                                                       "so there is no picture; its steps are listed below")
    try:
        if not isinstance(data, dict):
            raise TypeError(f"it is a {type(data).__name__}, not a JSON object")
        d = drawing_from_data(data)
    except (KeyError, TypeError, AttributeError) as exc:
        return None, [(None, None)] * len(rec.steps), f"the stored graph cannot be read ({type(exc).__name__}: {exc})"
    memo: dict[tuple[str, object, object], tuple[int | None, int | None]] = {}
    marks = [memo.setdefault((s.state, s.trigger, s.dest), step_marks(d, s.state, s.trigger, s.dest))
             for s in rec.steps]
    if not has_graphviz():
        return None, marks, f"Graphviz's dot is not installed, so the graph cannot be drawn; {INSTALL_HINT}"
    overlay(d, [TraceEvent(s.step, s.state, s.trigger, s.dest, s.t or 0.0, None) for s in rec.steps])
    svg = render_svg(dot_source(d, ids=True))
    return svg[svg.index("<svg"):], marks, None


# ---- the whole page ----
def run_view(rec: RunRecord, now: float) -> dict[str, object]:
    """The run page's data."""
    state = rec.state if isinstance(rec.state, dict) else {}
    stats = st if isinstance(st := state.get("stats"), dict) else {}
    events = ev if isinstance(ev := state.get("events"), list) else []
    config = rec.meta.get("config")
    threshold = config.get("threshold") if isinstance(config, dict) else None
    svg, marks, svg_note = picture(rec)
    tmarks, per_step = transcript_marks(rec.steps)
    bid_turns, turn_at = turns(rec.steps, threshold, events)
    last_t = max((s.t for s in rec.steps if s.lane == "" and s.t is not None), default=None)
    run = summary(rec.run_id, rec.meta, rec.stop_reason, rec.created, rec.updated, rec.status, len(rec.messages),
                  (len(rec.steps), last_t), stats, now)
    steps = [{"lane": s.lane, "step": s.step, "state": s.state, "trigger": s.trigger, "dest": s.dest, "t": s.t,
              "payload": payload_text(s.payload), "node": node, "edge": edge, **tm,
              **({"turn": turn_at[i]} if i in turn_at else {})}
             for i, (s, (node, edge), tm) in enumerate(zip(rec.steps, marks, tmarks))]
    errors = [{"step": i, "state": s.state, "text": payload_text(s.payload)} for i, s in enumerate(rec.steps)
              if s.trigger == "error" and s.dest is None]
    if state.get("error"):
        errors.append({"step": None, "state": "flow", "text": str(state["error"])})
    notes = [n for n in (svg_note, None if per_step or not rec.steps else
                         "this store does not record which step posted each message (it was written before "
                         "steps recorded it), so every step shows the whole transcript") if n]
    if "config" not in rec.meta:
        missing = rec.meta.get("config_missing")
        notes.append("no config: " + (missing if isinstance(missing, str) else "this run was checkpointed before runs kept it"))
    return {"kind": "run", "run": {**run, "attempts": stats.get("attempts"), "factory": rec.meta.get("factory")},
            "svg": svg, "steps": steps, "per_step_transcript": per_step, "turns": bid_turns,
            "messages": [_message(m) for m in rec.messages],
            "lanes": {k: [_message(m) for m in v] for k, v in rec.lanes.items()},
            "errors": errors, "events": events, "notes": notes,
            "limits": fp.get("limits") if isinstance(fp := rec.meta.get("fingerprint"), dict) else None,
            "usage": {**{k: stats.get(k) for k in ("calls", "attempts", "usage", "cost_usd", "over_cap") if k in stats},
                      **token_summary(events)},
            "config": mask_secrets(config) if config is not None else None}


def _message(m: ViewMessage) -> dict[str, object]:
    meta = md if isinstance(md := m.get("metadata"), dict) else {}
    out = {"role": m["role"], "content": m["content"], **({"score": meta["score"]} if "score" in meta else {})}
    calls = meta.get("tool_calls")
    if isinstance(calls, list) and calls:  # the tool calls the speaker made before this reply: a block under it
        out["tool_calls"] = [{k: c.get(k) for k in ("name", "arguments", "status", "result", "error", "duration_s")}
                             for c in calls if isinstance(c, dict)]
    return out
