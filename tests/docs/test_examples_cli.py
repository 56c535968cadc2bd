"""Every example runs with `fsmchat run examples/X.py` as it is: a pattern example finds its task in
the module's TASK (or is a plain script, such as the hub channel), and each ends as the README says:
exit 0, or 3 for the examples that wait for a person (human_review, tools, support_triage: `--no-input` leaves them waiting)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.env import offline_env

ROOT = Path(__file__).resolve().parents[2]
WAITS = {"human_review.py": 3, "tools.py": 3, "support_triage.py": 3}  # wait for a person (a message, a tool call: the refund); `fsmchat resume` answers

RUNNER = '''
import contextlib, io, json, sys
from fsmchat.cli import main
out = {}
for path in json.loads(sys.argv[1]):
    buf, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
        rc = main(["run", path, "--no-input"])
    out[path] = [rc, buf.getvalue(), err.getvalue()[-2000:]]
print(json.dumps(out))
'''


def test_every_example_runs_with_fsmchat_run_as_it_is(tmp_path):
    files = sorted(str(p) for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))
    assert len(files) >= 19
    r = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(files)], cwd=tmp_path, capture_output=True,
                       text=True, env=offline_env(), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    for path, (rc, out, err) in got.items():
        name = Path(path).name
        assert rc == WAITS.get(name, 0), (name, rc, out[-1000:], err)
        assert "no task for" not in err, (name, err)
        assert "-- stopped: " in out or "-- waiting for a person" in out or "-- closed: " in out, (name, out[-1000:])
