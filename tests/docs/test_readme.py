"""Everything the README shows is run: each python block (offline), the output printed under it, each
`fsmchat` command line, and every example in examples/. A block preceded by `<!-- not run: why -->`
is skipped, and the reasons are pinned here, so nothing is skipped silently."""
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.env import offline_env

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"(<!-- not run: ([^>]*?) -->\s*)?```(\w+)\n(.*?)```", re.S)

RUNNER = textwrap.dedent('''
    import ast, asyncio, contextlib, io, json, os, runpy, sys, traceback
    jobs = json.loads(sys.stdin.read())
    out = []
    for job in jobs:
        buf = io.StringIO()
        os.chdir(job["cwd"])
        try:
            with contextlib.redirect_stdout(buf):
                if job["kind"] == "file":
                    sys.argv = [job["path"]]
                    runpy.run_path(job["path"], run_name="__main__")
                else:
                    code = job["code"]
                    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
                    compiled = compile(code, "<README block>", "exec", flags=flags)
                    result = eval(compiled, {"__name__": "__main__"})
                    if asyncio.iscoroutine(result):
                        asyncio.run(result)
            out.append({"ok": True, "stdout": buf.getvalue()})
        except BaseException:
            out.append({"ok": False, "stdout": buf.getvalue(), "error": traceback.format_exc()[-3000:]})
    print(json.dumps(out))
''')


def run_jobs(jobs: list[dict]) -> list[dict]:
    """All jobs in one interpreter (litellm is imported once), each with its own stdout."""
    r = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(jobs), capture_output=True, text=True,
                       env=offline_env(), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def blocks() -> list[tuple[str | None, str, str]]:
    """(skip reason or None, language, code) of every fenced block, in order."""
    return [(m.group(2), m.group(3), m.group(4)) for m in FENCE.finditer(README)]


def test_every_python_block_runs_and_prints_what_the_readme_shows(tmp_path):
    bs = blocks()
    runnable = [(i, code) for i, (skip, lang, code) in enumerate(bs) if lang == "python" and skip is None]
    assert len(runnable) >= 2
    results = run_jobs([{"kind": "code", "code": code, "cwd": str(tmp_path)} for _, code in runnable])
    for (i, code), res in zip(runnable, results):
        assert res["ok"], f"README block {i} failed:\n{code}\n{res.get('error')}"
        nxt = bs[i + 1] if i + 1 < len(bs) else None
        if nxt is not None and nxt[1] == "text" and README.find("```text\n" + nxt[2]) > README.find(code):
            assert res["stdout"].strip() == nxt[2].strip(), f"README block {i} printed:\n{res['stdout']}"


def test_skipped_blocks_are_the_known_ones():
    """A block is skipped only for a stated reason: a real provider's key, or a long-running server."""
    reasons = [skip for skip, _, _ in blocks() if skip is not None]
    assert all(re.search(r"key|server|real model|network", r) for r in reasons), reasons


COMMAND = re.compile(r"^(fsmchat (?:run|plan|render)\b[^#\n]*)", re.M)


def test_readme_cli_lines_do_what_the_readme_says(tmp_path):
    """`fsmchat run|plan|render` lines run from the repository root; a line that names a real model
    must fail loudly without its key (exit 1, the missing variable named), never end quietly."""
    lines = [c.strip() for skip, lang, code in blocks() if lang == "bash" and skip is None for c in COMMAND.findall(code)]
    assert any(c.startswith("fsmchat run") for c in lines), lines
    cli = [sys.executable, "-m", "fsmchat.cli"]
    for line in lines:
        args = line.split()[1:]
        for flag in ("-o", "--report", "--checkpoint"):  # written files go to the temp folder, not the checkout
            if flag in args:
                k = args.index(flag) + 1
                args[k] = str(tmp_path / Path(args[k]).name)
        r = subprocess.run(cli + args, cwd=ROOT, capture_output=True, text=True, env=offline_env(), timeout=300)
        if "--model" in args and args[args.index("--model") + 1] != "offline":
            assert r.returncode == 1 and "missing credentials" in r.stdout + r.stderr, (line, r.stdout[-800:])
        else:
            assert r.returncode == 0, (line, r.stdout[-1500:], r.stderr[-1500:])


def examples() -> list[Path]:
    return sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def test_every_example_runs_offline_and_reports_what_it_ran():
    files = examples()
    assert len(files) >= 9
    results = run_jobs([{"kind": "file", "path": str(p), "cwd": str(ROOT)} for p in files])
    for p, res in zip(files, results):
        assert res["ok"], f"{p.name} failed:\n{res.get('error')}"
        out = res["stdout"]
        assert len(out.strip().splitlines()) >= 3, (p.name, out)
        assert "Traceback" not in out and "{{" not in out, (p.name, out[-500:])


def test_the_readmes_gallery_counts_are_what_fsmchat_graphs_prints():
    """Each "graphs/: N drawings up to date (M files" the README quotes is the gallery as it is: one
    .svg per drawing, and its .dot, .mmd and .svg files (graphs/ itself is checked up to date
    by tests/graph)."""
    quoted = re.findall(r"graphs/: (\d+) drawings up to date \((\d+) files", README)
    files = [p for p in (ROOT / "graphs").iterdir() if p.is_file()]
    assert len(quoted) == 2
    for drawings, total in quoted:
        assert (int(drawings), int(total)) == (sum(p.suffix == ".svg" for p in files), len(files))
