"""Tool calls as OpenTelemetry spans (``execute_tool``, GenAI semantic conventions), in memory: under
the step that ran them, named and attributed, arguments and results only when content capture is on,
and in the run's one trace across a resume and a fork."""
import json

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from fsmchat import Agent, MemoryCheckpointer, RoundRobinSwarm  # noqa: E402
from fsmchat.otel import Tracing  # noqa: E402
from fsmchat.speakers.human import Approve  # noqa: E402
from fsmchat.store.timetravel import fork  # noqa: E402

TASK = "Calculate 12 * 40 for the budget."


def calculate(expression: str) -> str:
    """Calculate an arithmetic expression.

    Args:
        expression: The arithmetic.
    """
    a, op, b = expression.split()[:3]
    if op != "*":
        raise ValueError(f"cannot calculate {expression!r}")
    return str(int(a) * int(b))


def swarm(**kw):
    return RoundRobinSwarm(agents=[Agent("Analyst", system_prompt="You analyze costs.", tools=[calculate]),
                                   Agent("Critic", system_prompt="You question assumptions.")], **kw)


def memory_tracing(**kw):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, Tracing(provider, **kw)


def tools_of(spans):
    return [s for s in spans if s.name.startswith("execute_tool")]


def test_a_tool_call_is_an_execute_tool_span_under_the_step_that_ran_it():
    exporter, tracing = memory_tracing()
    r = tracing.execute(swarm(), TASK)
    assert r.ok and r.path == ["seed", "Analyst", "tools_Analyst", "Analyst", "Critic", "stop"]
    spans = exporter.get_finished_spans()
    (tool,) = tools_of(spans)
    (call,) = r.transcript[1].tool_calls
    assert tool.name == "execute_tool calculate"
    assert dict(tool.attributes) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculate",
                                     "gen_ai.tool.call.id": call.id, "gen_ai.tool.type": "function",
                                     "gen_ai.agent.name": "Analyst"}  # no arguments, no result by default
    step = next(s for s in spans if s.context.span_id == tool.parent.span_id)
    assert step.name == "step tools_Analyst"
    assert "480" not in json.dumps([dict(s.attributes) for s in spans])


def test_arguments_and_results_are_recorded_when_content_capture_is_on():
    exporter, tracing = memory_tracing(capture_content=True)
    tracing.execute(swarm(), TASK)
    (tool,) = tools_of(exporter.get_finished_spans())
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"expression": "12 * 40"}
    assert tool.attributes["gen_ai.tool.call.result"] == "480"


def test_a_failing_tool_call_has_error_status():
    exporter, tracing = memory_tracing()
    r = tracing.execute(swarm(), "Calculate 12 + 40 for the budget.")
    (tool,) = tools_of(exporter.get_finished_spans())
    assert r.transcript[1].tool_calls[0].error.startswith("ValueError")
    assert tool.attributes["error.type"] == "ValueError" and tool.status.status_code.name == "ERROR"


def test_a_tool_call_after_a_resume_is_in_the_first_runs_trace():
    exporter, tracing = memory_tracing()
    chat, cp = swarm(interrupt_before=["tools"]), MemoryCheckpointer()
    first = tracing.execute(chat, TASK, checkpoint=cp, run_id="r")
    assert first.stop_reason == "interrupted" and tools_of(exporter.get_finished_spans()) == []
    run1 = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    exporter.clear()
    second = tracing.resume(chat, "r", cp, input=Approve())
    assert second.ok
    spans = exporter.get_finished_spans()
    (tool,) = tools_of(spans)
    run2 = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert {s.context.trace_id for s in spans} == {run1.context.trace_id}
    assert run2.parent.span_id == run1.context.span_id
    by_id = {s.context.span_id: s for s in spans}
    assert by_id[tool.parent.span_id].parent.span_id == run2.context.span_id  # tool -> step -> resumed run


def test_a_tool_call_in_a_fork_is_in_the_trace_of_the_run_it_was_forked_from():
    exporter, tracing = memory_tracing()
    cp = MemoryCheckpointer()
    tracing.execute(swarm(), TASK, checkpoint=cp, run_id="base")
    base = next(s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent"))
    exporter.clear()
    fork("base", 0, cp, fork_id="again")  # after the seed: the Analyst speaks and calls its tool again
    tracing.resume(swarm(), "again", cp)
    spans = exporter.get_finished_spans()
    (tool,) = tools_of(spans)
    assert tool.context.trace_id == base.context.trace_id
    run = next(s for s in spans if s.name.startswith("invoke_agent"))
    assert run.attributes["fsmchat.forked_from"] == "base"


KEY = "sk-live-9Ux3Wq7Rb2Zp5Kt8"


def test_a_secret_a_tool_raises_with_is_masked_in_spans_and_in_the_next_request_at_a_local_server():
    from support.openai_server import OpenAIServer, text, tool_call

    def lookup(city: str) -> str:
        """Look up a city.

        Args:
            city: Which.
        """
        raise RuntimeError(f"upstream refused {city} for key {KEY}")

    exporter, tracing = memory_tracing(capture_content=True)
    with OpenAIServer([tool_call("lookup", {"city": "Oslo"}), text("Sorry."), text("ok")], max_lifetime=60) as srv:
        agents = [Agent(n, model="openai/test-model", api_base=srv.url + "/v1", api_key=KEY,
                        **({"tools": [lookup]} if n == "a" else {})) for n in ("a", "b")]
        r = tracing.execute(RoundRobinSwarm(agents=agents, max_loops=1), "Weather?")
        bodies = json.dumps(srv.requests)  # what the server received, as JSON bodies
    assert r.ok and len(srv.requests) == 3
    assert "RuntimeError: upstream refused Oslo for key ***" in bodies and KEY not in bodies
    spans = exporter.get_finished_spans()
    (tool,) = tools_of(spans)
    assert tool.status.description == "RuntimeError: upstream refused Oslo for key ***"
    seen = json.dumps([[dict(s.attributes), s.status.description, [dict(e.attributes) for e in s.events]]
                       for s in spans], default=str)
    assert KEY not in seen and "upstream refused Oslo" in seen
