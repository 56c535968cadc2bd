"""The README's "Serving runs over HTTP" block, run: its ``fsmchat serve`` line starts the server (on a
free port instead of 8766), each ``curl`` line runs with the real curl against it, and every JSON the
block prints under a line (``# {...}``) is what that line got. The SSE lines read to the stream's end."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def serving_block():
    section = README[README.index("## Serving runs over HTTP"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1).splitlines()


def test_the_serving_block_is_run_line_by_line(tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    lines = serving_block()
    serve, banner = lines[0], lines[1]
    assert serve.startswith("fsmchat serve ") and banner.startswith("# fsmchat serve: ")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FSMCHAT_SERVE_TOKEN", None)
    args = [str(tmp_path / a) if a == "runs.db" else
            f"{a.split('=', 1)[0]}={ROOT / a.split('=', 1)[1]}" if a.endswith(".py") else a
            for a in shlex.split(serve)[2:]]
    proc = subprocess.Popen([sys.executable, "-m", "fsmchat.cli", "serve", *args, "--port", "0"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, text=True)
    try:
        got = proc.stdout.readline()
        port = re.search(r"http://127\.0\.0\.1:(\d+)/ ", got).group(1)
        shown = banner[2:].replace("over runs.db", f"over {tmp_path / 'runs.db'}").replace(":8766/", f":{port}/")
        assert got.strip() == shown
        outputs = {}
        for i, line in enumerate(lines[2:], start=2):
            if not line.startswith("curl "):
                continue
            command = line.split("  #", 1)[0].strip() if "  #" in line else line
            command = command.replace("localhost:8766", f"127.0.0.1:{port}")
            r = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, (line, r.stderr)
            outputs[i] = r.stdout
            below = lines[i + 1] if i + 1 < len(lines) else ""
            if below.startswith("# {"):
                shown_json, _ = json.JSONDecoder().raw_decode(below[2:])
                assert json.loads(r.stdout) == shown_json, line
            if "/events" in command:
                assert r.stdout.rstrip().splitlines()[-2] == "event: end", (line, r.stdout[-500:])
        streams = [out for i, out in outputs.items() if "/events" in lines[i]]
        first_end = json.loads(streams[0].rstrip().splitlines()[-1][len("data: "):])
        assert first_end == {"run_id": "r1", "stop_reason": "interrupted", "waiting": True,
                             "allowed": ["approve", "edit", "reject", "say"]}
        assert "Monday, with a rollback plan." in streams[1]
        run = json.loads(next(out for i, out in outputs.items() if lines[i].startswith("curl -s localhost:8766/api/runs/r1 ")))
        assert run["run"]["run_id"] == "r1"
        schema = json.loads(outputs[max(outputs)])
        assert schema["openapi"] == "3.1.0" and "/api/runs/{run_id}/fork" in schema["paths"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
