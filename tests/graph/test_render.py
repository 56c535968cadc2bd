"""Rendering: DOT and Mermaid golden files, SVG via Graphviz, trace overlay, the gallery check, CLI."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsmchat import RenderError, StateGraph, run
from fsmchat.cli import main as cli
import importlib

render_mod = importlib.import_module("fsmchat.graph.render")

GOLDEN = Path(__file__).parents[1] / "golden"
ROOT = Path(__file__).resolve().parents[2]
UPDATE = False  # flip locally to rewrite the golden files after an intended change


def more(ctx):
    """turns left"""
    return ctx["n"] < 2


def speak(ctx):
    """one turn"""
    ctx["n"] += 1


def nested_graph():
    inner = StateGraph("discussion", description="round robin").state("turn", speak).final("done")
    inner.edge("turn", "turn", when=more).edge("turn", "done", label="rounds")
    g = StateGraph("flow", description="a flow with a nested discussion")
    g.state("start").subgraph("discussion", inner).final("end")
    g.edge("start", "discussion").edge("discussion", "end")
    return g


def golden(name, text):
    p = GOLDEN / name
    if UPDATE or not p.exists():
        p.write_text(text)
    assert text == p.read_text(), f"{name} changed; inspect and set UPDATE=True to accept"


def test_dot_and_mermaid_golden():
    g = nested_graph()
    golden("nested.dot", g.to_dot())
    golden("nested.mmd", g.to_mermaid())
    assert "subgraph cluster_discussion" in g.to_dot()
    assert 'label="[more]"' in g.to_dot()
    assert "state discussion {" in g.to_mermaid()
    assert g.to_dot() == nested_graph().to_dot()  # deterministic


def test_trace_overlay_counts_edges():
    g = nested_graph()
    r = run(g, {"n": 0})
    dot = g.to_dot(trace=r)
    assert 'label="[more] ×1"' in dot and "fillcolor=lightblue" in dot
    mmd = g.to_mermaid(trace=r)
    assert "discussion_turn --> discussion_turn : [more] x1" in mmd
    assert "class start,discussion_turn,discussion_done,end_ visited" in mmd


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_render_real_svg_png(tmp_path):
    g = nested_graph()
    svg = Path(g.render(tmp_path / "g.svg")).read_text()
    assert "<svg" in svg and render_mod.svg_dot_hash(svg) == render_mod.dot_hash(g.to_dot())
    assert (tmp_path / "g.png").exists() is False
    g.render(tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    g.render(tmp_path / "g.mmd")
    assert (tmp_path / "g.mmd").read_text().startswith("stateDiagram-v2")


def test_missing_dot_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(render_mod.shutil, "which", lambda name: None)
    with pytest.raises(RenderError, match=r"'dot' program is not on PATH.*apt-get install graphviz"):
        nested_graph().render(tmp_path / "g.svg")
    nested_graph().render(tmp_path / "g.dot")  # still works
    assert (tmp_path / "g.dot").read_text().startswith("digraph flow")
    with pytest.raises(RenderError, match="unknown suffix '.bmp'"):
        nested_graph().render(tmp_path / "g.bmp")


def test_gallery_is_up_to_date():
    from fsmchat import gallery
    stale = gallery.check(ROOT / "graphs", ROOT / "examples")
    assert stale == [], f"graphs/ is stale; run `fsmchat graphs`: {stale}"


def test_gallery_check_names_stale_files(tmp_path, capsys):
    assert cli(["graphs", "--builtins", "--dir", str(tmp_path), "--examples", str(ROOT / "examples")]) == 0
    assert cli(["graphs", "--check", "--builtins", "--dir", str(tmp_path), "--examples", str(ROOT / "examples")]) == 0
    (tmp_path / "group_chat.mmd").write_text("stateDiagram-v2\n")
    svg = tmp_path / "group_chat.svg"
    svg.write_text(svg.read_text().replace("fsmchat-dot-sha256:", "fsmchat-dot-sha256:0"))
    assert cli(["graphs", "--check", "--builtins", "--dir", str(tmp_path), "--examples", str(ROOT / "examples")]) == 1
    err = capsys.readouterr().err
    assert "group_chat.mmd" in err and "group_chat.svg" in err and "group_chat.dot" not in err


def test_cli_render_and_plan(tmp_path, capsys):
    out = tmp_path / "gc.dot"
    assert cli(["render", "fsmchat.patterns.group_chat:example_graph", "-o", str(out)]) == 0
    assert "seed -> bid" in out.read_text()
    assert cli(["render", f"{ROOT / 'examples' / 'group_chat.py'}:build", "-o", str(tmp_path / "x.mmd")]) == 0
    assert cli(["plan", "fsmchat.patterns.group_chat:example_graph"]) == 0
    assert "-> stop (lull)" in capsys.readouterr().out
    assert cli(["render", "fsmchat:__version__", "-o", str(out)]) == 2
    assert "expected a StateGraph" in capsys.readouterr().err


def test_cli_runs_the_offline_example():
    r = subprocess.run([sys.executable, "-m", "fsmchat.cli", "run", str(ROOT / "examples" / "group_chat.py")],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("User: Should we prioritize AI development or AI regulation?")
    assert "-- stopped: " in r.stdout and ("lull" in r.stdout or "max_loops" in r.stdout)
