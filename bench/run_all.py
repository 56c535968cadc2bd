"""The benchmark suite: every target's script, one after the other (each in its own
interpreter, so one's imports and heap never weigh on the next), then the summary table built
from ``bench/results/*.json``.

    .venv/bin/python bench/run_all.py [--quick] [--write] [--only engine_overhead,scale,...]

``--write`` rewrites each script's marked sections of docs/benchmarks.md, its results file, and
the ``summary`` section. With ``--summary-only`` it just rebuilds the summary from the results
files. A full run takes ~15 minutes on the 2-core VM (scale's 10,000-chat runs are most of it).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from common import PY, RESULTS, ROOT, write_doc

SCRIPTS = ["user_path", "engine_overhead", "durable_overhead", "durable_deltas", "fanout", "litellm_cost", "scale", "cold_start", "tokens", "ray_batch", "whatif", "wire", "compare",
           "own_share", "selector_turn", "evals_cpu"]  # compare, selector_turn and evals_cpu need their venvs: make
# bench-compare / bench-selector / bench-evals


def fmt(v: object) -> str:
    if v is None:
        return "n/a"
    return f"{v}"


def _rows(name: str) -> list[dict[str, object]]:
    f = RESULTS / f"{name}.json"
    return json.loads(f.read_text())["rows"] if f.exists() else []


def headline() -> str:
    """The summary's prose, built from the results files (no hand-written numbers): what users run
    against LangGraph's fastest spelling first, then the engine alone, then cold starts."""
    out = []
    user = _rows("user_path")
    plain = [r for r in user if r["target"] == "User path"]
    if plain:
        parts = [f"{str(r['measure']).split('.run')[0]} {r['fsmchat']} µs/turn, LangGraph "
                 f"{r['lg_ratio']}x slower" for r in plain if r.get("lg_ratio")]
        turns = str(plain[0]["measure"]).rsplit("T=", 1)[-1]
        floors = ", ".join(f"{str(r['measure']).split('.run')[0]} {r['floor_ratio']}x" for r in plain)
        out.append(f"**What users run** (`pattern.run` / `flow.run`, 3 instant participants, T={turns} turns), "
                   f"against LangGraph's fastest idiomatic spelling of the same conversation measured in the same "
                   f"run (`invoke` with sync nodes and `ainvoke` with async nodes tried): " + "; ".join(parts) +
                   f". Against a plain asyncio loop doing the same work: {floors}.")
    for store in ("sqlite", "memory"):
        rows = [r for r in user if r["target"] == f"User path ({store} checkpoint)" and r.get("lg_ratio")]
        if rows:
            saver = "SqliteSaver" if store == "sqlite" else "InMemorySaver"
            out.append(f"With a {store} checkpoint (LangGraph's {saver}): " + "; ".join(
                f"{str(r['measure']).split('.run')[0]} {r['fsmchat']} µs/turn, LangGraph {r['lg_ratio']}x slower"
                for r in rows) + ".")
    comp = _rows("compare")
    if comp:
        out.append("**Model-backed GroupChats** (batches of chats against a local OpenAI-compatible server, model "
                   "calls per CPU-second of the client process, against swarms, LangGraph + langchain-openai and "
                   "a raw aiohttp floor in the same run): " + "; ".join(
                       f"{str(r['measure']).split(', ')[2]}: fsmchat's fast path {r['fsmchat']}/s, {r['ratio']}"
                       for r in comp) + ".")
    sel = _rows("selector_turn")
    if sel:
        out.append("**Who speaks next, model-backed** (selector and handoff turns against AutoGen's SelectorGroupChat "
                   "and Swarm and langgraph-swarm, CPU per turn of the client process, local server): " + "; ".join(
                       f"{str(r['measure']).split(' (')[0].removeprefix('CPU ms per ')}"
                       f"{' against either kind' if 'either kind' in str(r['measure']) else ''}: fsmchat "
                       f"{r['fsmchat']} ms, {r['ratio']} (goal >= 5x: {'met' if r.get('ok') else 'missed'})"
                       for r in sel) + ".")
    evals = _rows("evals_cpu")
    if evals:
        out.append("**Evaluations** (an eval of 200 cases, one model call each, against pydantic-evals alone driving "
                   "the same calls with a plain aiohttp client and inspect-ai, CPU per case of the client process, "
                   "local server): " + "; ".join(
                       f"fsmchat's `Eval` {r['fsmchat']} ms, {r['ratio']} (goal {r['goal']}: "
                       f"{'met' if r.get('ok') else 'missed'})" for r in evals) + ".")
    eng = _rows("engine_overhead")
    if eng:
        r = eng[-1]
        out.append(f"**The engine alone** (`run_graph` over hand-written actions, no pattern layer; "
                   f"{str(r['measure']).split(', ', 1)[1]}): {r['fsmchat']} µs CPU per step; LangGraph's fastest "
                   f"spelling of the same round robin is {r.get('lg_ratio')}x slower (wall).")
    cold = {str(r["measure"]): r["fsmchat"] for r in _rows("cold_start")}
    keys = [k for k in ("import fsmchat", "from fsmchat import GroupChat", "first offline run (GroupChat, 2 turns)",
                        "first litellm run (GroupChat, 2 turns, local HTTP server)") if k in cold]
    if keys:
        out.append("**Cold start** (a fresh interpreter): " + "; ".join(f"`{k}` {cold[k]}" if k.startswith(
            ("import", "from")) else f"{k} {cold[k]}" for k in keys) + " (the first runs include litellm's import).")
    return "\n\n".join(out)


def summary() -> str:
    lines = [headline(), "", "| target | measure | fsmchat | floor | LangGraph | notes | goal | status | reproduce |",
             "|---|---|---:|---:|---:|---|---|---|---|"]
    dates = set()
    for name in SCRIPTS:
        if name == "whatif":
            continue
        f = RESULTS / f"{name}.json"
        if not f.exists():
            lines.append(f"| {name} | not run yet | | | | | | | `.venv/bin/python bench/{name}.py --write` |")
            continue
        data = json.loads(f.read_text())
        dates.add(data["date"])
        for r in data["rows"]:
            ok = r.get("ok")
            st = "n/a" if ok is None else ("met" if ok else "**missed**")
            lines.append(f"| {r['target']} | {r['measure']} | {fmt(r.get('fsmchat'))} | {fmt(r.get('floor'))} | "
                         f"{fmt(r.get('langgraph'))} | {r.get('ratio') or ''} | {r.get('goal') or ''} | {st} | "
                         f"`{r['command']}` |")
    lines += ["", "Row 7 (per-step work flat from T=100 to T=1,000) is a test, not a timing: "
              "`.venv/bin/python -m pytest "
              "tests/engine/test_perf_budget.py`.", f"Results dated {', '.join(sorted(dates)) or '-'}; each row's section "
              "below has the machine line and the method."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated script names (default: all)")
    ap.add_argument("--summary-only", action="store_true")
    args = ap.parse_args()
    names = [n for n in (args.only.split(",") if args.only else SCRIPTS) if n]
    failed = []
    if not args.summary_only:
        for name in names:
            cmd = [PY, str(ROOT / "bench" / f"{name}.py")] + (["--quick"] if args.quick else []) + \
                  (["--write"] if args.write else [])
            print(f"\n==== {name} ====", flush=True)
            t0 = time.perf_counter()
            rc = subprocess.run(cmd, cwd=ROOT).returncode
            print(f"==== {name}: exit {rc} in {time.perf_counter() - t0:.0f} s", flush=True)
            if rc:
                failed.append(name)
    text = summary()
    print("\n" + text)
    if args.write:
        write_doc({"summary": text})
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
