"""fsmchat's own share of a model-backed GroupChat turn on the fast path: where the CPU goes.

The batch of ``bench/compare.py`` (GroupChats of N=3 and N=8 agents, 5 turns, 20 at once, fsmchat's
fast path to a local OpenAI-compatible server in a child process with a fixed latency), run under
``cProfile`` after a warm-up batch. Every function's own time (``tottime``) is put in the group of
the file it is defined in: ``fsmchat/``, ``aiohttp``/``yarl``/``multidict``, ``json``, ``asyncio``
(with ``selectors``/``socket``/``ssl``), pydantic, other. A builtin's time (``len``, ``dict.get``,
a socket's ``send``) goes to the group of its callers, in proportion to what each caller spent in
it. The figure is fsmchat's share of the profiled CPU; cProfile inflates Python-heavy code more than
C, so the share is an upper bound of the unprofiled one. The top fsmchat functions are listed.

    .venv/bin/python bench/own_share.py [--quick] [--write]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare  # noqa: E402
from common import ROOT, finish, machine_line, status  # noqa: E402

sys.path.insert(0, str(ROOT))  # this checkout's fsmchat
GOAL = 0.05
GROUPS = (("fsmchat", ("/fsmchat/",)), ("aiohttp", ("/aiohttp/", "/yarl/", "/multidict/", "/aiohappyeyeballs/",
                                                    "/frozenlist/", "/propcache/")),
          ("json", ("/json/",)), ("asyncio", ("/asyncio/", "selectors.py", "socket.py", "ssl.py")),
          ("pydantic", ("/pydantic/", "/pydantic_core/")))


def group_of(filename: str) -> str:
    for name, needles in GROUPS:
        if any(n in filename for n in needles):
            return name
    return "other"


def shares(stats: pstats.Stats) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """Own time per group (builtins charged to their callers' groups) and fsmchat's top functions."""
    groups: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, func), (_cc, _nc, tt, _ct, callers) in raw.items():
        if filename == "~":  # a builtin: charged to its callers' groups, as they spent in it
            total = sum(c[2] for c in callers.values()) or 1.0
            for (cfile, cline, cfunc), c in callers.items():
                groups[group_of(cfile)] += tt * c[2] / total
                if group_of(cfile) == "fsmchat":
                    own[f"{Path(cfile).name}:{cline} {cfunc}"] += tt * c[2] / total
            continue
        groups[group_of(filename)] += tt
        if group_of(filename) == "fsmchat":
            own[f"{Path(filename).name}:{line} {func}"] += tt
    return dict(groups), sorted(((t, f) for f, t in own.items()), reverse=True)


def profile(api_base: str, n: int) -> pstats.Stats:
    tasks = [compare.TASK.format(i=i) for i in range(compare.CHATS)]
    compare.run_fsmchat(api_base, "warm-share", n, tasks, "auto")
    prof = cProfile.Profile(time.process_time)  # CPU time: the waits for the server are not counted
    prof.enable()
    compare.run_fsmchat(api_base, f"share-{n}", n, tasks, "auto")
    prof.disable()
    return pstats.Stats(prof)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one profiled batch per size (the default too)")
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    args = ap.parse_args()
    os.environ.update(compare.QUIET_ENV)
    head = machine_line(None, f"{compare.CHATS} chats at once, {compare.TURNS} turns, "
                              f"{compare.LATENCY * 1e3:.0f} ms server")
    results: dict[int, tuple[dict[str, float], list[tuple[float, str]]]] = {}
    with compare.server(compare.LATENCY) as srv:
        for n in compare.SIZES:
            results[n] = shares(profile(srv.api_base, n))
    cols = ("fsmchat", "aiohttp", "json", "asyncio", "pydantic", "other")
    lines = ["| N | " + " | ".join(cols) + " | fsmchat's share | goal <= 5 % |", "|---:|" + "---:|" * (len(cols) + 2)]
    rows, tops = [], []
    for n, (groups, top) in results.items():
        total = sum(groups.values())
        share = groups.get("fsmchat", 0.0) / total
        lines.append(f"| {n} | " + " | ".join(f"{groups.get(c, 0.0) / total:.1%}" for c in cols) +
                     f" | {share:.1%} | {status(share <= GOAL)} |")
        tops.append(f"- N={n}, fsmchat's top functions (own time, share of the batch): " +
                    "; ".join(f"`{f}` {t / total:.1%}" for t, f in top[:8]) + ".")
        rows.append({"target": "fsmchat-own CPU share", "measure": f"fsmchat's own CPU, share of a fast-path "
                     f"GroupChat batch (cProfile), N={n}", "fsmchat": f"{share:.1%}", "floor": None,
                     "langgraph": None, "ratio": f"aiohttp {groups.get('aiohttp', 0) / total:.0%}, asyncio "
                     f"{groups.get('asyncio', 0) / total:.0%}, json {groups.get('json', 0) / total:.0%}",
                     "goal": "<= 5 %", "ok": share <= GOAL, "command": ".venv/bin/python bench/own_share.py --write"})
    text = "\n".join([
        "## fsmchat's own share of a model-backed turn (fast path)", "",
        "`.venv/bin/python bench/own_share.py [--write]`. The fast-path batch of `bench/compare.py`, profiled "
        "(cProfile on the process's CPU clock) after a warm-up batch; each function's own time is counted to the package its file belongs "
        "to, a builtin's to its callers' packages. cProfile weighs Python-heavy code more than C, so fsmchat's "
        "share is an upper bound.", "",
        head, "",
        *lines, "",
        *tops,
    ])
    finish("own_share", {"own_share": text}, rows, args.write)


if __name__ == "__main__":
    main()
