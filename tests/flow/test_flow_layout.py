"""Large flow drawings read in declaration order: the council meeting (examples/council_meeting.py)
drawn by Graphviz starts at the top with its introductions above the loop (not beside it, running
right to left), its fan-out branches side by side in order 1, 2, 3, and its halt edges drawn once
per group, quietly and without moving the steps. Positions are read from the rendered SVG."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from fsmchat.cli.gallery import example_graph
from fsmchat.graph.render import has_graphviz, render_svg

ROOT = Path(__file__).resolve().parents[2]
needs_dot = pytest.mark.skipif(not has_graphviz(), reason="Graphviz's dot is not installed (make test installs it)")


def council_dot():
    return example_graph(ROOT / "examples" / "council_meeting.py").to_dot()


def boxes(svg):
    """title -> (min x, min y, max x, max y) of every node and cluster in an SVG drawn by dot."""
    out = {}
    for title, body in re.findall(r'<g id="\w+" class="(?:node|cluster)">\s*<title>([^<]*)</title>(.*?)</g>', svg, re.S):
        nums = [float(v) for v in re.findall(r"-?\d+\.?\d*", " ".join(re.findall(r'(?:d|points)="([^"]*)"', body)))]
        if not nums:  # an ellipse (the start dot)
            continue
        xs, ys = nums[0::2], nums[1::2]
        out[title.replace("&#45;", "-").replace("&gt;", ">")] = (min(xs), min(ys), max(xs), max(ys))
    return out


@needs_dot
def test_the_council_meeting_reads_top_down_with_its_branches_in_order():
    b = boxes(render_svg(council_dot()))
    loop = b["cluster_rounds"]
    intro = b["Chairperson_intro"]
    assert intro[3] < loop[1], "the introductions come first, above the loop"
    assert loop[0] < (intro[0] + intro[2]) / 2 < loop[2], "the introductions start above the loop, not beside it"
    for sweep in ("discuss", "vote"):
        lefts = [b[f"cluster_rounds_body_{sweep}_{k}"][0] for k in (1, 2, 3)]
        assert lefts == sorted(lefts), f"{sweep} branches are drawn out of order: {lefts}"
    assert b["rounds.body.Chairperson"][3] < b["cluster_rounds_body_discuss_1"][1] < b["rounds.body.Chairperson_2"][1]


def test_halt_edges_are_drawn_once_per_group_and_leave_the_layout_alone():
    dot = council_dot()
    halts = [ln for ln in dot.splitlines() if re.search(r'label="halt \[halted\]|-> \S+ \[label="" .*samehead=halt_', ln)]
    seen = [ln for ln in halts if "style=invis" not in ln]
    # one visible halt edge per group: the top level (to end), the loop's body (to its done), the loop
    assert [re.match(r'\t(\S+) -> (\S+)', ln).groups() for ln in seen] == [
        ("Chairperson_intro", "end"), ('"rounds.body.Chairperson"', '"rounds.body.done"'),
        ('"rounds.body.done"', '"rounds.end"')]
    assert all('label="halt [halted] (any step)"' in ln for ln in seen)
    assert len(halts) == 10 and all("constraint=false" in ln for ln in halts)  # 5 top-level steps, 4 of the body, the body: each keeps its edge
    assert "firebrick" not in "".join(halts)
    assert "ordering=out" in dot.splitlines()[1]


def test_a_second_label_between_the_same_two_states_is_placed_apart():
    from fsmchat import Agent, AgentFlow, Discussion

    flow = AgentFlow(steps=[Discussion([Agent("a"), Agent("b")], rounds=2, until=lambda ctx: False)])
    lines = [ln.strip() for ln in flow.graph.to_dot().splitlines() if '"discussion.check_until" -> "discussion.done"' in ln]
    assert lines[1:] == ['"discussion.check_until" -> "discussion.done" [label="until [until_met]"]',
                         '"discussion.check_until" -> "discussion.done" [label="" style=dashed xlabel=rounds]']
