"""How objects show themselves: short reprs, a bounded print(), and Jupyter's rich display (graphs as
SVG or Mermaid, a RunResult as an HTML report whose model text is escaped)."""
import shutil

import pytest

from fsmchat import Agent, AgentFlow, Discussion, GroupChat, StateGraph, Task, parallel, repeat, route
import importlib
from fsmchat.models import Message

render_mod = importlib.import_module("fsmchat.graph.render")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot (make test installs it)")

HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>'


def hostile(ctx):
    return HOSTILE


def chatty(ctx):
    return "word " * 20_000  # 100,000 characters


def long_run():
    flow = AgentFlow(steps=[Discussion([chatty, hostile], rounds=15)], name="long")
    return flow, flow.execute("go")


def test_run_result_repr_is_short_whatever_the_transcript():
    _, r = long_run()
    assert len(r.transcript) == 30 and sum(len(m.content) for m in r.transcript) > 1_500_000
    text = repr(r)
    assert text.startswith("RunResult(stop_reason='done', ok=True, steps=33, messages=30, calls=0, output=")
    assert len(text) < 300


def test_print_shows_a_bounded_summary():
    _, r = long_run()
    lines = str(r).splitlines()
    assert lines[0] == "RunResult: stopped by 'done' (ok), 33 steps, 0 model calls, 0 tokens"
    assert lines[1].startswith("path: discussion.begin -> discussion.turn -> ") and "... 22 more ->" in lines[1]
    assert lines[2] == "transcript (30 messages):"
    assert len(lines) == 3 + 20 + 1 and lines[-1] == "  ... 10 more"
    assert all(len(line) <= 400 for line in lines)


def test_message_repr_is_short():
    m = Message(role="a", content="x" * 10_000, metadata={"score": 0.5})
    assert repr(m) == "Message(role='a', content='" + "x" * 65 + "… (+9935 chars)', metadata={'score': 0.5})"


def test_the_html_report_escapes_model_text_and_bounds_it(monkeypatch):
    monkeypatch.setattr(render_mod.shutil, "which", lambda name: None)  # no Graphviz: the graph as Mermaid
    flow, r = long_run()
    page = r._repr_html_()
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(1)&gt;" in page
    assert '<table class="fsmchat-transcript">' in page and page.count("<tr><td ") == 30
    assert "… (96000 more characters)" in page  # a 100,000-character message shows its first 4,000
    assert len(page) < 200_000
    assert "<th " in page and ">stop reason<" in page and ">done<" in page and ">model calls<" in page
    assert ">0 prompt / 0 completion / 0 total<" in page and ">$0.000000<" in page
    assert '<pre class="mermaid">stateDiagram-v2' in page  # the graph, escaped, with the run overlaid
    assert "discussion_turn --&gt; discussion_turn : [turns_left] x29" in page


@needs_dot
def test_the_html_report_draws_the_graph_with_the_run():
    _, r = long_run()
    page = r._repr_html_()
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert "[turns_left] ×29" in svg and "<?xml" not in page


def test_many_messages_are_cut_in_the_report():
    flow = AgentFlow(steps=[Discussion([hostile], rounds=250)])
    page = flow.execute("go")._repr_html_()
    assert page.count("<tr><td ") == 200 and "<p>... 50 more messages</p>" in page


@needs_dot
def test_graphs_and_patterns_display_as_svg():
    g = StateGraph("tiny", description="a tiny graph").state("a").final("b").edge("a", "b")
    bundle = g._repr_mimebundle_()
    assert bundle["text/plain"] == "StateGraph('tiny', 2 states (1 final), 1 transitions, initial 'a')"
    assert "<!-- fsmchat-dot-sha256:" in bundle["image/svg+xml"] and "<svg" in bundle["image/svg+xml"]
    chat = GroupChat(agents=[Agent("a"), Agent("b")])
    bundle = chat._repr_mimebundle_()
    assert "has_winner" in bundle["image/svg+xml"]
    assert bundle["text/plain"] == "GroupChat(name='dynamic-groupchat', speakers=['a', 'b'], graph='group_chat': 6 states)"


def test_without_graphviz_a_graph_displays_as_mermaid(monkeypatch):
    monkeypatch.setattr(render_mod.shutil, "which", lambda name: None)
    g = StateGraph("tiny").state("a").final("b").edge("a", "b")
    bundle = g._repr_mimebundle_()
    assert "image/svg+xml" not in bundle
    assert bundle["text/markdown"] == ("```mermaid\nstateDiagram-v2\n    %% tiny\n"
                                       "    %% legend: X --> [*] a final state, where the run ends\n"
                                       '    state "a" as a\n    state "b" as b\n    [*] --> a\n    a --> b\n'
                                       "    b --> [*]\n```\n")


def agreed(ctx):
    return False


def test_patterns_and_steps_have_short_informative_reprs():
    s = Agent("s", instructions="Summarize")
    flow = AgentFlow(steps=[Discussion([Agent("a"), Agent("b")], rounds=2, until=agreed), s], name="review")
    assert repr(flow) == ("AgentFlow(name='review', steps=['discussion', 's'], speakers=['a', 'b', 's'], "
                          "graph='review': 6 states)")
    assert repr(flow.steps[0]) == "Discussion('discussion', speakers=['a', 'b'], rounds=2, until=agreed)"
    assert repr(Task(handler=hostile, on_error="retry", max_retries=2)) == \
        "Task('hostile', handler=hostile, on_error='retry', max_retries=2)"
    assert repr(Task(agent=s)) == "Task('s', agent='s')"
    assert repr(parallel([hostile, chatty])) == "Parallel('parallel', steps=['hostile', 'chatty'])"
    assert repr(route({"yes": [hostile]}, default=[chatty])) == "Route('route', routes=['yes'], default=['chatty'])"
    assert repr(repeat(hostile, until=agreed, max_iterations=3)) == \
        "Repeat('repeat', steps=['hostile'], max_iterations=3, until=agreed)"
    chat = GroupChat(agents=[Agent("a"), Agent("b")]).with_limits(max_tokens=500, deadline_s=30)
    assert repr(chat) == ("GroupChat(name='dynamic-groupchat', speakers=['a', 'b'], graph='group_chat': 8 states, "
                          "limits=max_tokens=500, deadline_s=30.0)")


def test_agent_repr_omits_defaults_cuts_prompts_and_masks_secrets():
    a = Agent("critic", system_prompt="Critique " * 40, temperature=0.2, api_key="sk-do-not-show")
    assert repr(a) == ("Agent(name='critic', system_prompt='" + ("Critique " * 8)[:66] + "… (+294 chars)', "
                       "temperature=0.2, api_key='***')")
    assert repr(Agent("b")) == "Agent(name='b')"
