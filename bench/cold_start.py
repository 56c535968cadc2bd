"""Cold start (target 5): wall time of a fresh interpreter that imports fsmchat, that imports
``GroupChat``, that builds a GroupChat, and of ``fsmchat render`` of a pattern to SVG (litellm must
not be imported by any of them); then a new user's first conversation, with the offline model
and through litellm to a local OpenAI-compatible server (both import litellm). Against
``python -c pass`` (the interpreter's own start) and LangGraph's ``StateGraph`` import, in the
same run.

Timed with hyperfine (``-N``) when it is installed (``apt-get install hyperfine``), else a
subprocess loop: 20 runs per command in 5 interleaved rounds (a slow phase of the VM hits every
command alike), median. Then
``python -X importtime`` (median of 5 runs per module) lists where the import time goes.

    .venv/bin/python bench/cold_start.py [--quick] [--write]
"""
from __future__ import annotations

import atexit
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from time import perf_counter
from typing import Any

from common import PY, ROOT, cli_args, finish, machine_line, median, status, version

FSMCHAT = str(Path(PY).parent / "fsmchat")
RENDER_TARGET = "fsmchat.patterns.group_chat:example_graph"
BUILD = ("from fsmchat import Agent, GroupChat; "
         "GroupChat(agents=[Agent('A', model='offline'), Agent('B', model='offline')]).graph")
# a first conversation (3 messages: the task and two turns), as a new user's first script runs it
FIRST_RUN = ("from fsmchat import Agent, GroupChat; "
             "r = GroupChat(agents=[Agent('A', {kw}), Agent('B', {kw})], max_loops=3).execute('plan a trip'); "
             "assert r.ok and len(r.transcript) == 3, (r.stop_reason, r.error)")


def commands(out_svg: str) -> dict[str, list[str]]:
    cmds = {
        "python -c pass": [PY, "-c", "pass"],
        "import fsmchat": [PY, "-c", "import fsmchat"],
        "from fsmchat import GroupChat": [PY, "-c", "from fsmchat import GroupChat"],
        "build a GroupChat (Agents, graph)": [PY, "-c", BUILD],
        "fsmchat render GroupChat -> SVG": [FSMCHAT, "render", RENDER_TARGET, "-o", out_svg],
    }
    dot = shutil.which("dot")
    if dot:  # the part of render that is graphviz's own process
        cmds["dot -Tsvg graphs/group_chat.dot (graphviz alone)"] = [dot, "-Tsvg", str(ROOT / "graphs" / "group_chat.dot"),
                                                                     "-o", out_svg + ".dot.svg"]
    cmds["import networkx (graph validation's dependency)"] = [PY, "-c", "import networkx"]
    cmds["import pydantic (the models' dependency)"] = [PY, "-c", "import pydantic"]
    if version("langgraph") != "not installed":
        cmds["from langgraph.graph import StateGraph"] = [PY, "-c", "from langgraph.graph import StateGraph"]
    return cmds


def first_runs() -> dict[str, list[str]]:
    """litellm's import, then a new user's first conversation: with the offline model (a litellm
    custom provider: litellm is imported) and with a real provider's path (an OpenAI-compatible
    server on 127.0.0.1, started here for the whole measurement: HTTP, litellm, fsmchat)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support.openai_server import OpenAIServer, respond

    srv = OpenAIServer(lambda req: respond(0.9, "Let us start with the budget."), max_requests=10_000,
                       max_lifetime=3600).__enter__()
    atexit.register(srv.__exit__, None, None, None)
    http = f"model='openai/test-model', api_base='{srv.url}/v1', api_key='sk-test', num_retries=0"
    return {"import litellm": [PY, "-c", "import litellm"],
            "first offline run (GroupChat, 2 turns)": [PY, "-c", FIRST_RUN.format(kw="model='offline'")],
            "first litellm run (GroupChat, 2 turns, local HTTP server)": [PY, "-c", FIRST_RUN.format(kw=http)]}


def time_all(cmds: dict[str, list[str]], runs: int, rounds: int = 5) -> tuple[dict[str, float], str]:
    """Median wall seconds per command, over ``runs`` runs taken in ``rounds`` interleaved rounds
    (every command's runs of a round, then the next round), so a slow phase of the VM hits all
    commands alike instead of whichever ran during it."""
    hf = shutil.which("hyperfine")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    per = max(1, runs // rounds)
    if hf:
        times: dict[str, list[float]] = defaultdict(list)
        for _ in range(rounds):
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                args = [hf, "-N", "--warmup", "1", "--runs", str(per), "--export-json", f.name, "--style", "none"]
                for name, cmd in cmds.items():
                    args += ["-n", name, shlex.join(cmd)]
                subprocess.run(args, check=True, capture_output=True, env=env, cwd=tempfile.gettempdir())
                for r in json.loads(Path(f.name).read_text())["results"]:
                    times[r["command"]] += r["times"]
        hv = subprocess.run([hf, "--version"], capture_output=True, text=True).stdout.strip()
        return ({k: median(v) for k, v in times.items()},
                f"{hv}, `-N`, {rounds} interleaved rounds of 1 warm-up + {per} runs, median of {per * rounds}")
    times = defaultdict(list)
    for _ in range(rounds):
        for k, v in time_loop(cmds, per, warmup=1, keep=True).items():
            times[k] += v
    return ({k: median(v) for k, v in times.items()},
            f"subprocess loop (hyperfine not installed), {rounds} interleaved rounds of {per} runs, median")


def time_loop(cmds: dict[str, list[str]], runs: int, warmup: int = 0, keep: bool = False) -> dict[str, Any]:
    """Wall seconds per command from a plain subprocess loop: the median, or every run (``keep``)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out: dict[str, Any] = {}
    for name, cmd in cmds.items():
        for _ in range(warmup):
            subprocess.run(cmd, check=True, capture_output=True, env=env)
        xs = []
        for _ in range(runs):
            t0 = perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=env)
            xs.append(perf_counter() - t0)
        out[name] = xs if keep else median(xs)
    return out


def importtime(code: str, reps: int) -> tuple[dict[str, float], dict[str, float], set[str]]:
    """``-X importtime`` of ``code``: median self time (ms) by top-level package and median
    cumulative time (ms) of each fsmchat module, and every module imported."""
    by_pkg: dict[str, list[float]] = defaultdict(list)
    fsm: dict[str, list[float]] = defaultdict(list)
    mods: set[str] = set()
    for _ in range(reps):
        err = subprocess.run([PY, "-X", "importtime", "-c", code], capture_output=True, text=True,
                             cwd=tempfile.gettempdir()).stderr
        run_pkg: dict[str, float] = defaultdict(float)
        for line in err.splitlines():
            if not line.startswith("import time:") or "self [us]" in line:
                continue
            self_us, cum_us, name = (x.strip() for x in line[len("import time:"):].split("|"))
            name = name.strip()
            mods.add(name)
            run_pkg[name.split(".")[0]] += int(self_us) / 1e3
            if name.startswith("fsmchat"):
                fsm[name].append(int(cum_us) / 1e3)
        for k, v in run_pkg.items():
            by_pkg[k].append(v)
    return ({k: median(v) for k, v in by_pkg.items()}, {k: median(v) for k, v in fsm.items()}, mods)


def measure(quick: bool) -> tuple[str, list[dict[str, Any]]]:
    runs = 10 if quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        svg = str(Path(tmp) / "group_chat.svg")
        cmds = commands(svg)
        secs, how = time_all(cmds, runs)
        assert Path(svg).stat().st_size > 0, "render wrote no SVG"
    secs.update(time_loop(first_runs(), 3))  # litellm's import (~4-7 s a run here): 3 runs, no warm-up
    ms = {k: v * 1e3 for k, v in secs.items()}
    py = ms["python -c pass"]
    render_code = (f"import sys; from fsmchat.cli import main; main(['render', '{RENDER_TARGET}', '-o', "
                   f"'{tempfile.gettempdir()}/fsmchat-bench.svg'])")
    probes = {"import fsmchat": "import fsmchat", "from fsmchat import GroupChat": "from fsmchat import GroupChat",
              "build a GroupChat (Agents, graph)": BUILD,
              "fsmchat render GroupChat -> SVG": render_code}
    it = {k: importtime(code, 3 if quick else 5) for k, code in probes.items()}
    no_litellm = {k: not any(m == "litellm" or m.startswith("litellm.") for m in v[2]) for k, v in it.items()}
    ok_import = ms["import fsmchat"] <= 150 and no_litellm["import fsmchat"]
    ok_render = ms["fsmchat render GroupChat -> SVG"] <= 500 and no_litellm["fsmchat render GroupChat -> SVG"]
    goals = {"import fsmchat": ("<= 150 ms", ok_import), "fsmchat render GroupChat -> SVG": ("<= 500 ms", ok_render)}
    lines = [machine_line(None, how), "",
             "| command | wall ms | minus `python -c pass` | litellm imported? | goal |", "|---|---:|---:|---|---|"]
    for k, v in ms.items():
        lit = ("no" if no_litellm[k] else "**yes**") if k in no_litellm else \
            ("yes" if k == "import litellm" or k.startswith("first ") else "-")
        g = goals.get(k)
        name = f"`{k}`" if "(" not in k else f"`{k[:k.index(' (')]}` {k[k.index(' (') + 1:]}"
        if k == "import litellm" or k.startswith("first "):
            name += " (3 runs, no warm-up)"
        lines.append(f"| {name} | {v:.0f} | {v - py:+.0f} | {lit} | {f'{g[0]}: {status(g[1])}' if g else ''} |")
    lines += ["", f"`fsmchat render` runs `{FSMCHAT.replace(str(ROOT) + '/', '')} render {RENDER_TARGET} -o x.svg` "
              "(graphviz's `dot` included). Where the import time goes (`python -X importtime`, median self time by "
              "top-level package, ms; the interpreter's own start-up modules excluded):", ""]
    base = importtime("pass", 3 if quick else 5)[0]
    for k, (pkgs, fsm, _) in it.items():
        extra = {p: t for p, t in pkgs.items() if t - base.get(p, 0.0) >= 1.0 and p not in ("encodings", "site")}
        top = sorted(extra.items(), key=lambda kv: -kv[1])[:10]
        heavy = sorted(((m, t) for m, t in fsm.items() if m.count(".") <= 1), key=lambda kv: -kv[1])[:5]
        lines.append(f"- `{k}`: " + ", ".join(f"{p} {t:.0f}" for p, t in top) +
                     ". Heaviest fsmchat modules (cumulative): " + ", ".join(f"{m} {t:.0f}" for m, t in heavy) + ".")
    rows = [{"target": "5. Cold start", "measure": k, "fsmchat": f"{ms[k]:.0f} ms", "floor": f"{py:.0f} ms (python)",
             "langgraph": (f"{ms['from langgraph.graph import StateGraph']:.0f} ms (StateGraph import)"
                           if "from langgraph.graph import StateGraph" in ms else None),
             "ratio": "litellm not imported" if no_litellm[k] else "litellm IMPORTED", "goal": goals[k][0],
             "ok": goals[k][1], "command": ".venv/bin/python bench/cold_start.py --write"} for k in goals]
    rows += [{"target": "5. Cold start", "measure": k, "fsmchat": f"{ms[k]:.0f} ms", "floor": f"{py:.0f} ms (python)",
              "langgraph": None, "ratio": note, "goal": "report", "ok": None,
              "command": ".venv/bin/python bench/cold_start.py --write"}
             for k, note in (("from fsmchat import GroupChat", "litellm not imported" if no_litellm.get(
                                 "from fsmchat import GroupChat", True) else "litellm IMPORTED"),
                             ("first offline run (GroupChat, 2 turns)", "litellm's import included"),
                             ("first litellm run (GroupChat, 2 turns, local HTTP server)",
                              "litellm's import included"))]
    return "\n".join(lines), rows


def main() -> None:
    args = cli_args(__doc__, "10 runs instead of 20, 3 importtime runs instead of 5")
    text, rows = measure(args.quick)
    finish("cold_start", {"cold_start": text}, rows, args.write)


if __name__ == "__main__":
    main()
