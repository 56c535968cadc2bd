"""A deadline in a fresh process: ``deadline_s=3`` on a RoundRobinSwarm of offline agents (0.2 s
per reply), each run in a new interpreter, where litellm is not yet imported. fsmchat imports it
before the run's clock starts, so the run should end within the deadline plus 1 s of that clock,
whatever the import costs; the import's own time is reported beside it.

    .venv/bin/python bench/cold_deadline.py [--runs N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

from common import PY, machine_line, median

DEADLINE = 3.0
CHILD = textwrap.dedent('''
    import json, sys, time
    t0 = time.monotonic()
    from fsmchat import Agent, RoundRobinSwarm
    marks = {}
    chat = RoundRobinSwarm(agents=[Agent("A", system_prompt="You plan."), Agent("B", system_prompt="You build.")],
                           max_loops=1000).with_limits(deadline_s=float(sys.argv[1]))
    called = time.monotonic()
    r = chat.execute("Ship it?", on_start=[lambda ctx: marks.setdefault("clock", time.monotonic())])
    done = time.monotonic()
    print(json.dumps({"import_s": marks["clock"] - called, "run_s": done - marks["clock"], "call_s": done - called,
                      "stop": r.stop_reason, "posts": len(r.transcript) - 1}))
''')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    env = {**os.environ, "FSMCHAT_OFFLINE_DELAY": "0.2"}
    rows = []
    for _ in range(args.runs):
        out = subprocess.run([PY, "-c", CHILD, str(DEADLINE)], capture_output=True, text=True, env=env, check=True)
        rows.append(json.loads(out.stdout.splitlines()[-1]))
    print(machine_line(args.runs))
    print(f"deadline_s={DEADLINE:g}, fresh process each run")
    for key, what in (("import_s", "litellm import, before the clock"), ("run_s", "the run, on its clock"),
                      ("call_s", "execute() as the caller sees it")):
        xs = [r[key] for r in rows]
        print(f"  {what:36s} median {median(xs):6.2f} s, max {max(xs):6.2f} s")
    print(f"  stop reasons {sorted({r['stop'] for r in rows})}, posts {sorted(r['posts'] for r in rows)}")
    worst = max(r["run_s"] for r in rows)
    print(f"  within deadline + 1 s on every run: {worst <= DEADLINE + 1} (worst {worst:.2f} s)")


if __name__ == "__main__":
    sys.exit(main())
