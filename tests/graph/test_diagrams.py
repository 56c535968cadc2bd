"""What the diagrams say: a Discussion draws an until check only when it has an ``until``; edge kinds
(guarded, fallback, stop, fork/join) are styled and explained by a legend; a parallel join is drawn
from each branch's final state to a join bar; Mermaid groups nest exactly as DOT clusters do.

The Mermaid checks are structural (balanced groups, every edge between declared states and written
in the innermost group holding both ends, nesting equal to DOT's) and, where Node.js >= 18 and npm
are on PATH, Mermaid's own parser (``mermaid.parse`` under jsdom, installed from the npm registry
into the user's cache on first use)."""
import json
import re
import subprocess
from pathlib import Path

import pytest

from fsmchat import AgentFlow, Discussion, loop, parallel, repeat
from fsmchat.cli.gallery import entries
from support.mermaid import mermaid_parser

ROOT = Path(__file__).resolve().parents[2]


def a(ctx):
    return "a says AGREED"


def b(ctx):
    return "b"


def c(ctx):
    return "c"


def agreed(ctx):
    """someone said AGREED"""
    return "AGREED" in (ctx.previous_result or "")


def flat_edges(graph, prefix=""):
    return [(t.source, t.dest, t.label) for t in graph.flatten().transitions if t.source.startswith(prefix)]


# ---- Discussion: no until, no check ----
def test_a_discussion_without_until_has_no_until_check():
    flow = AgentFlow(steps=[Discussion([a, b], rounds=2)])
    assert flat_edges(flow.graph, "discussion.") == [
        ("discussion.begin", "discussion.turn", "next"),
        ("discussion.turn", "discussion.done", "halt"),
        ("discussion.turn", "discussion.turn", "turns_left"),
        ("discussion.turn", "discussion.done", "rounds"),
        ("discussion.done", "end", "next")]
    assert "check_until" not in flow.graph.to_dot() and "until" not in flow.graph.to_mermaid()
    r = flow.execute("go")
    assert r.path == ["discussion.begin", "discussion.turn", "discussion.turn", "discussion.turn",
                      "discussion.turn", "discussion.done", "end"]
    assert r.stop_reason == "done" and flow.max_calls() == 0


def test_a_discussion_with_until_checks_it_after_every_turn():
    flow = AgentFlow(steps=[Discussion([b, a], rounds=3, until=agreed)])
    assert flat_edges(flow.graph, "discussion.") == [
        ("discussion.begin", "discussion.turn", "next"),
        ("discussion.turn", "discussion.check_until", "next"),
        ("discussion.check_until", "discussion.done", "halt"),
        ("discussion.check_until", "discussion.done", "until"),
        ("discussion.check_until", "discussion.turn", "turns_left"),
        ("discussion.check_until", "discussion.done", "rounds"),
        ("discussion.done", "end", "next")]
    assert 'label="until [until_met]"' in flow.graph.to_dot()
    r = flow.execute("go")
    assert r.path == ["discussion.begin", "discussion.turn", "discussion.check_until", "discussion.turn",
                      "discussion.check_until", "discussion.done", "end"]


def test_repeat_draws_until_only_when_it_has_one():
    assert ("repeat.check", "repeat.done", "until") not in flat_edges(AgentFlow(steps=[repeat(b, max_iterations=2)]).graph)
    assert ("repeat.check", "repeat.done", "until") in flat_edges(AgentFlow(steps=[repeat(b, until=agreed)]).graph)


# ---- edge kinds and the legend ----
def test_edge_kinds_are_styled_and_explained():
    from fsmchat.patterns.group_chat import example_graph
    dot = example_graph().to_dot()
    assert '\tselect -> post [label="[has_winner]"]\n' in dot  # guarded: solid, [guard]
    assert "\tselect -> stop [label=lull color=firebrick fontcolor=firebrick style=dashed]\n" in dot  # fallback stop
    assert '\tbid -> select [label=""]\n' in dot  # the only way on: plain
    assert "[guard]: guarded edge, taken when guard(ctx) is true (tried in declared order)" in dot
    assert "dashed (plain label or none): fallback, taken when no guard passed" in dot
    assert "red: stop edge, enters a final state (double border) and ends the run" in dot
    assert "dotted: fork" not in dot  # the legend lists only the kinds a graph has
    mmd = example_graph().to_mermaid()
    assert "    %% legend: [guard] a guarded edge, taken when guard(ctx) is true (tried in declared order)\n" in mmd
    assert "fork state" not in mmd


# ---- parallel: fork -> branches -> join -> on ----
def parallel_flow():
    return AgentFlow(steps=[parallel([Discussion([a, b], rounds=1, name="left"), c]), b], name="fan")


def test_a_parallel_join_is_drawn_from_each_branch_final_state():
    dot = parallel_flow().graph.to_dot()
    edges = re.findall(r'^\t(\S+) -> (\S+) \[(.*)\]$', dot, re.M)
    by_ends = {(s.strip('"'), d.strip('"')): attrs for s, d, attrs in edges}
    assert ("parallel", "b") not in by_ends  # no shortcut from the fork past its branches
    assert by_ends[("parallel", "parallel|1.left.begin")] == "label=fork style=dotted"
    assert by_ends[("parallel", "parallel|2.c")] == "label=fork style=dotted"
    assert by_ends[("parallel|1.done", "parallel|join")] == "label=join style=dotted"
    assert by_ends[("parallel|2.done", "parallel|join")] == "label=join style=dotted"
    # the fork state's own transitions leave from its join bar
    assert by_ends[("parallel|join", "end")] == ('label="halt [halted] (any step)" arrowsize=0.5 color=gray60 '
                                                 'constraint=false fontcolor=gray45 fontsize=8 penwidth=0.6 '
                                                 'samehead=halt_end')
    assert by_ends[("parallel|join", "b")] == 'label="" style=dashed'
    assert '\t"parallel|join" [label="" color=black fillcolor=black fixedsize=true height=0.06 shape=box ' \
           'style=filled width=1.2]\n' in dot
    mmd = parallel_flow().graph.to_mermaid()
    assert "    state parallel_join <<join>>\n" in mmd
    assert "    parallel_1_done --> parallel_join : join\n" in mmd and "    parallel_join --> b\n" in mmd


def test_the_overlay_counts_branch_runs_at_fork_and_join():
    flow = AgentFlow(steps=[loop(steps=[parallel([c, b])], over="items", max_items=3)], variables={"items": [1, 2, 3]})
    r = flow.execute("go")
    assert r.ok
    dot = flow.graph.to_dot(trace=r)
    assert '\t"loop.body.parallel" -> "loop.body.parallel|1.c" [label="fork ×3" color=blue penwidth=2 ' \
           'style=dotted]\n' in dot
    assert '\t"loop.body.parallel|2.done" -> "loop.body.parallel|join" [label="join ×3" color=blue penwidth=2 ' \
           'style=dotted]\n' in dot
    assert '\t"loop.body.parallel|join" -> "loop.body.done" [label="×3" color=blue penwidth=2]\n' in dot
    assert "loop_body_parallel_join --> loop_body_done : x3" in flow.graph.to_mermaid(trace=r)


# ---- Mermaid groups nest as DOT clusters do ----
def dot_groups(dot):
    """node id -> tuple of enclosing cluster names (without ``cluster_``), from the DOT text."""
    where, stack = {}, []
    for line in dot.splitlines():
        body = line.strip()
        m = re.match(r"subgraph cluster_(\S+) \{$", body)
        if m:
            stack.append(m.group(1))
        elif body == "}" and stack:
            stack.pop()
        else:
            m = re.match(r'^("[^"]+"|\w+) \[label=', body)
            if m and "->" not in body and m.group(1) not in ("__start__", "graph", "node", "edge"):
                where[mermaid_id(m.group(1).strip('"'))] = tuple(stack)
    return where


def mermaid_id(name):
    """How a state is spelled in Mermaid: non-word characters as ``_``, a keyword with a ``_`` after it."""
    mid = re.sub(r"\W", "_", name)
    return mid + "_" if mid in ("end", "state", "note", "direction", "class", "style", "click", "default") else mid


def mermaid_structure(mmd):
    """(state id -> enclosing groups, [(edge source, dest, group it is written in)]), checking as it goes
    that groups balance and every line is one Mermaid understands here."""
    where, edges, stack = {}, [], []
    lines = mmd.splitlines()
    assert lines[0] == "stateDiagram-v2"
    for line in lines[1:]:
        body = line.strip()
        assert line.startswith("    " * (len(stack) + 1)) or body == "}", f"bad indent: {line!r}"
        if body.startswith("%%") or body.startswith("classDef ") or body.startswith("class "):
            continue
        if m := re.fullmatch(r"state (\w+) \{", body):
            stack.append(m.group(1))
        elif body == "}":
            stack.pop()
        elif m := re.fullmatch(r'state "[^"]*" as (\w+)', body) or re.fullmatch(r"state (\w+) <<join>>", body):
            assert m.group(1) not in where, f"{m.group(1)} declared twice"
            where[m.group(1)] = tuple(stack)
        elif m := re.fullmatch(r"(\w+|\[\*\]) --> (\w+|\[\*\])(?: : [^:;#]+)?", body):
            edges.append((m.group(1), m.group(2), tuple(stack)))
        else:
            raise AssertionError(f"unexpected Mermaid line {line!r}")
    assert stack == [], "unbalanced groups"
    return where, edges


def nested_parallel_flow():
    return AgentFlow(steps=[loop(steps=[parallel([Discussion([a, b], rounds=1, name="left", until=agreed),
                                                  loop(c, over="xs", max_items=1, parallel=True)])],
                                 over="items", max_items=2)], variables={"items": [1], "xs": [1]}, name="nest")


GRAPHS = {name: make for name, make in entries(ROOT / "examples")}
GRAPHS["nested_parallel"] = lambda: nested_parallel_flow().graph
GRAPHS["parallel"] = lambda: parallel_flow().graph


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_mermaid_groups_nest_as_dot_clusters(name):
    g = GRAPHS[name]()
    where, edges = mermaid_structure(g.to_mermaid())
    assert where == dot_groups(g.to_dot())  # the same states, in the same nested groups
    for src, dst, group in edges:
        if "[*]" in (src, dst):
            assert group == (), f"{src} --> {dst} is written inside a group"
            continue
        assert group == common(where[src], where[dst]), f"{src} --> {dst} is not in its states' innermost group"


def common(x, y):
    """The innermost group holding both paths."""
    n = 0
    while n < min(len(x), len(y)) and x[n] == y[n]:
        n += 1
    return x[:n]


def test_branch_groups_sit_inside_their_fork_states_group():
    where, _ = mermaid_structure(nested_parallel_flow().graph.to_mermaid())
    assert where["loop_body_parallel"] == ("loop", "loop_body")
    assert where["loop_body_parallel_join"] == ("loop", "loop_body")
    assert where["loop_body_parallel_1_left_check_until"] == ("loop", "loop_body", "loop_body_parallel_1",
                                                               "loop_body_parallel_1_left")
    # a fork inside a branch: its branch group nests inside that branch's group
    assert where["loop_body_parallel_2_loop_1_c"] == ("loop", "loop_body", "loop_body_parallel_2",
                                                      "loop_body_parallel_2_loop_1")


# ---- Mermaid's own parser, when Node is here to run it ----
def test_mermaid_parses_every_drawing(tmp_path):
    node, cache = mermaid_parser()
    files = []
    for name, make in sorted(GRAPHS.items()):
        p = tmp_path / f"{name}.mmd"
        p.write_text(make().to_mermaid())
        files.append(p)
    flow = nested_parallel_flow()
    (tmp_path / "overlay.mmd").write_text(flow.graph.to_mermaid(trace=flow.execute("go")))
    (tmp_path / "broken.mmd").write_text("stateDiagram-v2\n    state a {\n    a --> : x\n")  # the parser does check
    files += [tmp_path / "overlay.mmd", tmp_path / "broken.mmd"]
    r = subprocess.run([node, str(cache / "mermaid_parse.mjs"), *map(str, files)], capture_output=True, text=True,
                       cwd=cache, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    results = {Path(x["file"]).name: x for x in map(json.loads, r.stdout.splitlines())}
    assert len(results) == len(files)
    assert not results.pop("broken.mmd")["ok"]
    failed = {k: v["error"] for k, v in results.items() if not v["ok"]}
    assert failed == {}
