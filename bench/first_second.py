"""The first second: what a new user's first commands cost in a cold process, against the targets.

Each command runs in a fresh interpreter, interleaved with the others over 5 rounds (a slow phase
of the VM hits every command alike), median per command; its CPU is the child's user + system time
(``getrusage(RUSAGE_CHILDREN)`` around it), its wall time the parent's clock. Against the
interpreter's own start (``python -c pass``) in the same run:

- ``from fsmchat import Agent, RoundRobinSwarm``: the import's own CPU, measured inside the child
  (``time.process_time`` around the import): <= 150 ms;
- ``import fsmchat; <first offline turn>``: a RoundRobinSwarm of one offline agent, one turn, the
  whole process's CPU: <= 300 ms;
- the first fast-path call: the same turn through ``Agent(model="openai/...", api_base=...)`` at a
  local OpenAI-compatible server (its own process, not counted), the whole process's CPU: <= 0.5 s;
- ``fsmchat run examples/group_chat.py`` offline: the first line the model wrote (the first bids)
  printed <= 0.6 s wall after start, the whole run <= 1.5 s wall;
- ``make demo`` on a fresh clone (``git clone`` of this checkout's HEAD, a warm pip cache): <= 20 s
  wall (one run; ``--quick`` leaves it out).

    .venv/bin/python bench/first_second.py [--quick] [--write]
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from time import perf_counter
from typing import Any

from common import PY, ROOT, cli_args, finish, machine_line, median, status

FSMCHAT = str(Path(PY).parent / "fsmchat")
IMPORT = ("import json, time; t = time.process_time(); from fsmchat import Agent, RoundRobinSwarm; "
          "print(json.dumps({'import_cpu': time.process_time() - t}))")
FLOOR_IMPORT = ("import json, time; t = time.process_time(); import asyncio; from pydantic import BaseModel; "
                "print(json.dumps({'import_cpu': time.process_time() - t}))")  # what any fsmchat import pays
TURN = ("from fsmchat import Agent, RoundRobinSwarm; "
        "r = RoundRobinSwarm(agents=[Agent('A', {kw})], max_loops=1).execute('plan a trip'); "
        "assert r.ok and len(r.transcript) == 2, (r.stop_reason, r.error)")
TARGETS = {"from fsmchat import Agent, RoundRobinSwarm": ("import CPU", 150),
           "first offline turn": ("CPU", 300), "first fast-path call (local server)": ("CPU", 500),
           "fsmchat run examples/group_chat.py": ("first model line, wall", 600),
           "fsmchat run examples/group_chat.py (whole run)": ("wall", 1500), "make demo (fresh clone)": ("wall", 20_000)}
ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def run_child(cmd: list[str], cwd: str | None = None) -> tuple[float, float, str]:
    """(CPU ms of the child, wall ms, its stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=600)
    wall = (perf_counter() - t0) * 1e3
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1e3
    return cpu, wall, done.stdout


def first_line_of_run() -> tuple[float, float]:
    """``fsmchat run examples/group_chat.py``: wall ms to the first line after the task's, and to the end."""
    t0 = perf_counter()
    proc = subprocess.Popen([FSMCHAT, "run", str(ROOT / "examples" / "group_chat.py")], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=ENV, bufsize=1)
    assert proc.stdout is not None
    first = None
    seen_task = False
    for line in proc.stdout:
        if first is None and seen_task and line.strip():
            first = (perf_counter() - t0) * 1e3
        seen_task = seen_task or line.startswith("User:")
    if proc.wait() != 0 or first is None:
        raise SystemExit(f"fsmchat run examples/group_chat.py failed ({proc.returncode}) or printed no model line")
    return first, (perf_counter() - t0) * 1e3


def make_demo() -> float:
    """Wall ms of ``make demo`` in a fresh clone of HEAD (pip's cache is warm from this checkout's install)."""
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "fsmchat"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in ENV.items() if not k.startswith("VIRTUAL_ENV")}
        t0 = perf_counter()
        done = subprocess.run(["make", "demo"], cwd=clone, capture_output=True, text=True, env=env, timeout=900)
        wall = (perf_counter() - t0) * 1e3
        if done.returncode != 0:
            raise SystemExit(f"make demo failed in a fresh clone:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return wall


def measure(quick: bool) -> tuple[str, list[dict[str, Any]]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.openai_server import OpenAIServer, text

    rounds, per = (3, 2) if quick else (5, 4)
    cpu: dict[str, list[float]] = defaultdict(list)
    wall: dict[str, list[float]] = defaultdict(list)
    load_start = os.getloadavg()[0]
    with OpenAIServer(lambda req: text("Let us start with the budget."), max_requests=10_000, max_lifetime=3600) as srv:
        fast = f"model='openai/test-model', api_base='{srv.url}/v1', api_key='sk-test', num_retries=0"
        cmds = {"python -c pass": [PY, "-c", "pass"],
                "import asyncio, pydantic (the floor of the import)": [PY, "-c", FLOOR_IMPORT],
                "from fsmchat import Agent, RoundRobinSwarm": [PY, "-c", IMPORT],
                "first offline turn": [PY, "-c", TURN.format(kw="model='offline'")],
                "first fast-path call (local server)": [PY, "-c", TURN.format(kw=fast)]}
        for name, cmd in cmds.items():  # warm-up: the OS's file cache, fsmchat's compiled modules
            run_child(cmd)
        run_child([FSMCHAT, "run", str(ROOT / "examples" / "group_chat.py")])
        for _ in range(rounds):
            for name, cmd in cmds.items():
                for _ in range(per):
                    c, w, out = run_child(cmd)
                    cpu[name].append(json.loads(out)["import_cpu"] * 1e3 if "import_cpu" in out else c)
                    wall[name].append(w)
            for _ in range(per):
                first, whole = first_line_of_run()
                wall["fsmchat run examples/group_chat.py"].append(first)
                wall["fsmchat run examples/group_chat.py (whole run)"].append(whole)
    if not quick:
        wall["make demo (fresh clone)"].append(make_demo())
    load_end = os.getloadavg()[0]
    py_cpu, py_wall = median(cpu["python -c pass"]), median(wall["python -c pass"])
    lines = [machine_line(None, f"{rounds} interleaved rounds of {per} runs, median; load average {load_end:.2f} "
                                f"at the end"), "",
             "| command | CPU ms | wall ms | against `python -c pass` | target | |", "|---|---:|---:|---|---|---|"]
    rows = []
    for name in ["python -c pass", "import asyncio, pydantic (the floor of the import)", *TARGETS]:
        c = median(cpu[name]) if cpu.get(name) else None
        w = median(wall[name]) if wall.get(name) else None
        if c is None and w is None:
            continue
        goal = TARGETS.get(name)
        value = None if goal is None else (c if goal[0].endswith("CPU") else w)
        ok = None if goal is None or value is None else value <= goal[1]
        base = "" if name == "python -c pass" else (
            f"{c / py_cpu:.1f}x its CPU" if c is not None and goal and goal[0] == "CPU" else
            f"+{w - py_wall:.0f} ms wall" if w is not None else "")
        if name.startswith(("from ", "import asyncio")):
            floor = median(cpu["import asyncio, pydantic (the floor of the import)"])
            base = "the import alone" if name.startswith("import") else f"{c / floor:.1f}x the floor's import"
        target = f"{goal[0]} <= {goal[1]:,} ms" if goal else ""
        lines.append(f"| `{name}` | {'' if c is None else f'{c:.0f}'} | {'' if w is None else f'{w:.0f}'} | "
                     f"{base} | {target} | {status(ok) if goal else ''} |")
        if goal:
            rows.append({"target": "40. The first second", "measure": name, "fsmchat": f"{value:.0f} ms",
                         "floor": f"{py_cpu:.0f} ms CPU / {py_wall:.0f} ms wall (python -c pass)", "langgraph": None,
                         "ratio": base, "goal": target, "ok": ok, "command": ".venv/bin/python bench/first_second.py --write"})
    lines += ["", "Imports are timed inside the child (the interpreter's start excluded); `import asyncio, pydantic` "
              "is what any fsmchat import pays, so its figure says how fast the machine was (51 ms on a quiet "
              "run of this VM, twice that in a slow phase).",
              "", f"Load average {load_start:.2f} at the start, {load_end:.2f} at the end. The first model line of "
              "`fsmchat run` is the first line printed after the task's (the first round of bids). `make demo` "
              "is one run in a fresh `git clone` of HEAD (a new venv, pip's cache warm, Graphviz installed)."
              + ("" if not quick else " `--quick`: `make demo` not measured.")]
    return "\n".join(lines), rows


def main() -> None:
    if not shutil.which("git"):
        raise SystemExit("bench/first_second.py needs git (it clones HEAD for `make demo`)")
    args = cli_args(__doc__, "3 rounds of 2 runs, and no `make demo`")
    text_, rows = measure(args.quick)
    finish("first_second", {"first_second": text_}, rows, args.write)


if __name__ == "__main__":
    main()
