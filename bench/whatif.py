"""What-if measurements behind the recommendations in docs/benchmarks.md: candidate changes to
fsmchat applied in this process only (monkeypatches; no fsmchat file is touched), measured in
the same run as the current code.

- ``gc``: ``gc.freeze()`` after imports (long-lived module objects leave the collector's view)
  and ``gc.set_threshold(50_000, 20, 100)`` for the batch: what ``run_batch`` could do while a
  large batch runs (and restore after).
- cold start without networkx: ``bench/nx_shim.py`` (plain-Python stand-ins for the four
  networkx calls ``StateGraph.validate`` makes) installed before fsmchat is imported, timed with
  hyperfine against the same command without it.

Measured: engine µs/turn (the engine-overhead round robin, T=3000, median of 9 in a child
process) and the 1,000-chat ``run_batch`` of scale.py (child processes, median of 5).

    .venv/bin/python bench/whatif.py [--quick] [--write]
"""
from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import tempfile
from pathlib import Path
from time import perf_counter
from typing import Any

from common import child, cli_args, finish, machine_line, median

VARIANTS = ["current", "gc"]  # (the engine's own set_state step is the current code now)


def engine_us(variant: str, reps: int, T: int = 3000) -> float:
    import engine_overhead as eo

    g = eo.build_graph()

    async def go() -> float:
        ctx = eo.Ctx(T)
        t0 = perf_counter()
        await eo.engine(g, ctx)
        return (perf_counter() - t0) / T * 1e6
    asyncio.run(go())
    xs = []
    for _ in range(reps):
        gc.collect()
        xs.append(asyncio.run(go()))
    return median(xs)


def scale_child(variant: str) -> dict[str, Any]:
    import scale

    if "gc" in variant:
        real = scale.child_main

        def tuned(*a: Any) -> dict[str, Any]:
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 20, 100)
            return real(*a)
        scale.child_main = tuned  # type: ignore[assignment]
        return tuned("fsmchat", 1000, 0.05, 10, False)
    return scale.child_main("fsmchat", 1000, 0.05, 10, False)


def cold_start(runs: int) -> tuple[list[str], dict[str, float]]:
    import cold_start as cs

    bench = str(Path(__file__).resolve().parent)
    out = f"{tempfile.gettempdir()}/fsmchat-whatif.svg"
    shim = f"import sys; sys.path.insert(0, {bench!r}); import nx_shim; "
    render = f"from fsmchat.cli import main; main(['render', '{cs.RENDER_TARGET}', '-o', '{out}'])"
    cmds = {"render, current": [cs.PY, "-c", render], "render, validate without networkx": [cs.PY, "-c", shim + render],
            "build a GroupChat, current": [cs.PY, "-c", cs.BUILD],
            "build a GroupChat, validate without networkx": [cs.PY, "-c", shim + cs.BUILD]}
    secs, how = cs.time_all(cmds, runs)
    ms = {k: v * 1e3 for k, v in secs.items()}
    lines = ["", f"Cold start ({how}), wall ms:", "", "| command | current | validate without networkx | saved |",
             "|---|---:|---:|---:|"]
    for what in ("render", "build a GroupChat"):
        a, b = ms[f"{what}, current"], ms[f"{what}, validate without networkx"]
        lines.append(f"| `{what}` | {a:.0f} | {b:.0f} | {a - b:.0f} ({(a - b) / a * 100:.0f}%) |")
    return lines, ms


def measure(quick: bool) -> tuple[str, list[dict[str, Any]]]:
    reps = 5
    eng = {v: median(child("whatif.py", "engine", v, 5 if quick else 9)["us"] for _ in range(3))
           for v in VARIANTS if "gc" not in v}
    sc: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    for _ in range(reps):
        for v in VARIANTS:
            sc[v].append(child("whatif.py", "scale", v))
    wall = {v: median(r["wall"] for r in rs) for v, rs in sc.items()}
    cpu = {v: median(r["cpu"] for r in rs) for v, rs in sc.items()}
    gct = {v: median(r["gc"] for r in rs) for v, rs in sc.items()}
    lines = [machine_line(reps), "",
             "| variant | engine µs/turn (T=3000) | 1,000 GroupChats wall (latency floor 0.45 s) | CPU | of which GC |",
             "|---|---:|---:|---:|---:|"]
    for v in VARIANTS:
        e = eng.get(v)
        lines.append(f"| {v} | {f'{e:.2f}' if e is not None else '(as above)'} | {wall[v]:.2f} s "
                     f"({wall[v] / 0.45:.1f}x) | {cpu[v]:.2f} s | {gct[v]:.2f} s |")
    cold, cms = cold_start(10 if quick else 20)
    lines += cold
    rows = [{"target": "what-if", "measure": "render without networkx (ms)", "fsmchat": round(
        cms["render, validate without networkx"]), "floor": None, "langgraph": None,
        "ratio": f"current {cms['render, current']:.0f} ms", "goal": "", "ok": None,
        "command": ".venv/bin/python bench/whatif.py --write"}]
    rows += [{"target": "what-if", "measure": f"{v}", "fsmchat": round(wall[v], 2), "floor": None, "langgraph": None,
             "ratio": f"engine {eng[v]:.2f} µs/turn" if v in eng else "", "goal": "", "ok": None,
             "command": ".venv/bin/python bench/whatif.py --write"} for v in VARIANTS]
    return "\n".join(lines), rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "engine":
            print(json.dumps({"us": engine_us(sys.argv[3], int(sys.argv[4]))}))
        else:
            print(json.dumps(scale_child(sys.argv[3])), flush=True)
            os._exit(0)
        return
    args = cli_args(__doc__, "fewer engine repetitions")
    text, rows = measure(args.quick)
    finish("whatif", {"whatif": text}, rows, args.write)


if __name__ == "__main__":
    main()
