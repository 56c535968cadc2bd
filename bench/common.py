"""What every benchmark script shares: the doc sections they rewrite, the results they leave for
``run_all.py``'s summary, the machine line, medians, child processes and memory probes.

Each ``bench/*.py`` script prints its sections, and with ``--write`` replaces the
``<!-- name:start -->`` ... ``<!-- name:end -->`` blocks of ``docs/benchmarks.md`` (appending a
block that is missing) and saves its summary rows to ``bench/results/<script>.json``.
"""
from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"
PY = sys.executable


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def machine_line(reps: int | None = None, extra: str = "") -> str:
    """``Measured <date> on 2 cores (load ...), x86_64, Python 3.11.7[, extra]; median of N runs.``"""
    load = os.getloadavg()[0]
    reps_txt = f"; median of {reps} runs" if reps else ""
    return (f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores (`nproc` = "
            f"{len(os.sched_getaffinity(0))}, load average {load:.2f} at start), {platform.machine()}, "
            f"Python {platform.python_version()}{', ' + extra if extra else ''}{reps_txt}.")


def version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version as v

    try:
        return v(dist)
    except PackageNotFoundError:
        return "not installed"


def venv_versions(venv: Path, dists: tuple[str, ...]) -> str:
    """``dist version, ...`` of the given distributions as installed in another venv (a benchmark's peers)."""
    code = (f"from importlib.metadata import version as v; print(', '.join(f'{{d}} {{v(d)}}' for d in {dists!r}))")
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True).stdout.strip()


def write_doc(sections: dict[str, str]) -> None:
    """Replace (or append) each marked section of docs/benchmarks.md."""
    doc = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    for key, body in sections.items():
        block = f"<!-- {key}:start -->\n{body.strip()}\n<!-- {key}:end -->"
        marked = re.compile(f"<!-- {re.escape(key)}:start -->.*?<!-- {re.escape(key)}:end -->", re.S)
        doc = marked.sub(lambda _: block, doc) if marked.search(doc) else f"{doc.rstrip()}\n\n{block}\n"
    DOC.write_text(doc)
    print(f"\nwrote {DOC}")


def save_results(name: str, rows: list[dict[str, Any]]) -> None:
    """Summary rows for run_all's table: ``{"target", "measure", "fsmchat", "baseline", "ratio",
    "goal", "status", "command"}``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "rows": rows},
                                                     indent=1, ensure_ascii=False) + "\n")


def finish(name: str, sections: dict[str, str], rows: list[dict[str, Any]], write: bool) -> None:
    print("\n\n".join(sections.values()))
    if write:
        write_doc(sections)
        save_results(name, rows)


def child(script: str, *args: Any, timeout: float = 1800) -> dict[str, Any]:
    """Run ``bench/<script> --child args...`` in a fresh interpreter; it prints one JSON line last."""
    cmd = [PY, str(ROOT / "bench" / script), "--child", *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def trees_against(ref: str) -> Iterator[dict[str, str]]:
    """``{"`ref`": a temp dir holding ref's fsmchat/ (``git archive``), "this tree": ROOT}``, for
    measuring another ref's fsmchat beside this tree's in the same run (``child_in``)."""
    with tempfile.TemporaryDirectory(prefix="fsmchat-ref-") as other:
        archive = subprocess.run(["git", "archive", ref, "fsmchat"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", other], input=archive.stdout, check=True)
        yield {f"`{ref}`": other, "this tree": str(ROOT)}


def child_in(tree: str, script: str, *args: Any, timeout: float = 1800) -> dict[str, Any]:
    """``child(script, *args)`` importing fsmchat from ``tree`` (its ``PYTHONPATH``)."""
    cmd = [PY, str(ROOT / "bench" / script), "--child", *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": tree})
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_traced(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` under tracemalloc: (its result, peak traced bytes above the start)."""
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return out, peak


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes held by ``obj`` and everything it reaches through containers and ``__dict__``/slots
    (strings, tuples, lists, dicts, pydantic models); shared objects are counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return size
    if isinstance(obj, dict):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return size + sum(deep_size(x, seen) for x in obj)
    d = getattr(obj, "__dict__", None)
    if d is not None:
        size += deep_size(d, seen)
    for slot in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, slot):
            size += deep_size(getattr(obj, slot), seen)
    return size


def rss_kib() -> int:
    """Current resident set size of this process (KiB), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def peak_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def shorten(text: str) -> str:
    """Profile paths without site-packages / stdlib / repository prefixes."""
    text = re.sub(r"\S*/(site-packages|python3\.\d+)/", "", text)
    return text.replace(f"{ROOT}/", "")


def status(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "**missed**")


def cli_args(doc: str | None, quick_help: str, against: bool = False) -> Any:
    """The two flags every bench script takes: ``--quick`` and ``--write`` (and ``--against REF``
    for the scripts that can measure another git ref beside this tree)."""
    import argparse

    ap = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--write", action="store_true", help="rewrite the marked section of docs/benchmarks.md")
    if against:
        ap.add_argument("--against", metavar="REF", help="also measure REF's fsmchat beside this tree's (git ref)")
    return ap.parse_args()


def instant_agents(names: Any, post: Callable[[Any, str, str], None]) -> list[Callable[[Any], Any]]:
    """Target 1's instant agents: each calls ``post(ctx, name, text)`` and counts a turn."""
    def make_agent(agent_name: str) -> Callable[[Any], Any]:
        async def agent(ctx: Any) -> str:
            """an instant agent: posts one message"""
            text = f"{agent_name} says {ctx.t}"
            post(ctx, agent_name, text)
            ctx.t += 1
            return text
        return agent
    return [make_agent(n) for n in names]


def more(ctx: Any) -> bool:
    return ctx.t < ctx.T


def round_robin_graph(name: str, names: Any, agents: list[Callable[[Any], Any]]) -> Any:
    """Target 1's workload as a StateGraph: one state per agent, ``[more]`` to the next, ``turns`` to stop."""
    from fsmchat.graph import StateGraph

    g = StateGraph(name)
    for n, agent in zip(names, agents):
        g.state(n, agent)
    g.final("stop")
    for i, n in enumerate(names):
        g.edge(n, names[(i + 1) % len(names)], when=more, label="more")
        g.edge(n, "stop", label="turns")
    return g


class Clock:
    """This process's CPU and wall clocks over a ``with`` block (under cProfile when ``profile``
    names a file to write the stats to)."""

    def __init__(self, profile: str | None = None):
        self.profile = profile
        self.prof: Any = None

    def __enter__(self) -> "Clock":
        if self.profile:
            import cProfile
            self.prof = cProfile.Profile(time.process_time)
            self.prof.enable()
        self.c0, self.t0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cpu, self.wall = time.process_time() - self.c0, time.perf_counter() - self.t0
        if self.prof is not None:
            self.prof.disable()
            self.prof.dump_stats(self.profile)
