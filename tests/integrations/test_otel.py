"""OpenTelemetry, opt-in: the span tree of a run (run > steps > model calls), GenAI names and
attributes, no message content unless asked, error status on a failing model call, a resumed run in
the first run's trace, one export over OTLP/HTTP to a receiver on 127.0.0.1, and nothing imported
from OpenTelemetry by ``import fsmchat``."""
import http.server
import subprocess
import sys
import threading

import pytest

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fsmchat import Approve, Bid, GroupChat, RoundRobinSwarm, fork
from fsmchat.store.checkpoint import MemoryCheckpointer
from fsmchat.otel import TRACE_META, Tracing
from fsmchat.testing import Fail, ScriptedModel

TASK = "Should we ship on Friday?"


def memory_tracing(**kw):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, Tracing(provider, **kw)


def swarm(scripts, **kw):
    m = ScriptedModel(scripts)
    return m, RoundRobinSwarm(agents=[m.agent(n) for n in scripts], max_loops=1, **kw)


def by_name(spans):
    return {s.name: s for s in spans}


def test_a_run_is_a_tree_of_run_steps_and_model_calls():
    exporter, tracing = memory_tracing()
    m, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    r = tracing.execute(rr, TASK)
    assert r.path == ["seed", "a", "b", "stop"]
    spans = exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert names == sorted(["invoke_agent RoundRobinSwarm", "step seed", "step a", "step b", "step stop",
                            f"chat {m.model}", f"chat {m.model}"])
    run = by_name(spans)["invoke_agent RoundRobinSwarm"]
    assert run.parent is None
    steps = [s for s in spans if s.name.startswith("step ")]
    assert all(s.parent.span_id == run.context.span_id for s in steps)
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    chats = [s for s in spans if s.name.startswith("chat ")]
    parent_of = {c.attributes["gen_ai.agent.name"]: c.parent.span_id for c in chats}
    assert parent_of == {"a": by_name(spans)["step a"].context.span_id, "b": by_name(spans)["step b"].context.span_id}


def test_spans_carry_the_genai_and_fsmchat_attributes():
    exporter, tracing = memory_tracing()
    m, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    tracing.execute(rr, TASK, checkpoint=MemoryCheckpointer(), run_id="run-1")
    spans = by_name(exporter.get_finished_spans())
    run = spans["invoke_agent RoundRobinSwarm"]
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "RoundRobinSwarm",
        "gen_ai.provider.name": "fsmchat", "fsmchat.pattern": "RoundRobinSwarm", "fsmchat.run_id": "run-1",
        "fsmchat.stop_reason": "max_loops", "fsmchat.steps": 4, "fsmchat.model_calls": 2,
        "gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 10}
    assert run.status.status_code == StatusCode.UNSET
    step = spans["step a"]
    assert dict(step.attributes) == {"fsmchat.state": "a", "fsmchat.step": 1, "fsmchat.trigger": "next",
                                     "fsmchat.dest": "b"}
    assert dict(spans["step stop"].attributes) == {"fsmchat.state": "stop", "fsmchat.step": 3}
    chat = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")][0]
    assert chat.kind.name == "CLIENT"
    assert dict(chat.attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": m.model, "gen_ai.provider.name": "fsmchat-scripted",
        "gen_ai.system": "fsmchat-scripted", "gen_ai.agent.name": "a", "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 5, "gen_ai.response.finish_reasons": ("stop",)}


def content_of(spans):
    """Every attribute value of every span, as one text."""
    return " ".join(str(v) for s in spans for v in s.attributes.values())


def test_no_message_content_by_default():
    exporter, tracing = memory_tracing()
    _, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    tracing.execute(rr, TASK)
    text = content_of(exporter.get_finished_spans())
    assert "ship" not in text and "agrees" not in text and "Friday" not in text
    assert not any(k in s.attributes for s in exporter.get_finished_spans()
                   for k in ("gen_ai.input.messages", "gen_ai.output.messages", "fsmchat.task"))


def test_content_is_recorded_when_asked():
    exporter, tracing = memory_tracing(capture_content=True)
    _, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    tracing.execute(rr, TASK)
    spans = exporter.get_finished_spans()
    assert by_name(spans)["invoke_agent RoundRobinSwarm"].attributes["fsmchat.task"] == TASK
    chat_b = [s for s in spans if s.name.startswith("chat ") and s.attributes["gen_ai.agent.name"] == "b"][0]
    assert "A says ship." in chat_b.attributes["gen_ai.input.messages"]  # b was shown a's message
    assert chat_b.attributes["gen_ai.output.messages"] == '[{"role": "assistant", "content": "B agrees."}]'


def test_capture_content_must_be_a_bool():
    with pytest.raises(TypeError, match=r"capture_content='yes': expected True or False"):
        Tracing(TracerProvider(), capture_content="yes")


def test_a_failing_model_call_has_error_status_and_so_has_the_run():
    exporter, tracing = memory_tracing()
    _, rr = swarm({"a": ["A says ship."], "b": [Fail(400)]})
    r = tracing.execute(rr, TASK)
    assert r.stop_reason == "error" and not r.ok
    spans = exporter.get_finished_spans()
    chats = {s.attributes["gen_ai.agent.name"]: s for s in spans if s.name.startswith("chat ")}
    assert chats["a"].status.status_code == StatusCode.UNSET
    assert chats["b"].status.status_code == StatusCode.ERROR
    assert chats["b"].attributes["error.type"] == "BadRequestError"
    run = by_name(spans)["invoke_agent RoundRobinSwarm"]
    assert run.status.status_code == StatusCode.ERROR
    assert "model call for agent 'b'" in run.status.description
    assert run.attributes["error.type"] == "ModelCallError" and run.attributes["fsmchat.stop_reason"] == "error"


def test_a_resumed_run_continues_the_first_runs_trace():
    exporter, tracing = memory_tracing()
    m = ScriptedModel({"a": [Bid(0.9, "a says ship")], "b": [Bid(0.6, "b says wait")]})
    chat = GroupChat(agents=[m.agent("a"), m.agent("b")], interrupt_before=["post"], max_loops=2)
    cp = MemoryCheckpointer()
    first = tracing.execute(chat, TASK, checkpoint=cp, run_id="r")
    assert first.stop_reason == "interrupted"
    run1 = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")][0]
    stored = cp.load("r").meta[TRACE_META]["traceparent"]
    assert stored == f"00-{run1.context.trace_id:032x}-{run1.context.span_id:016x}-{int(run1.context.trace_flags):02x}"
    exporter.clear()
    second = tracing.resume(chat, "r", cp, input=Approve())
    assert second.stop_reason == "max_loops"
    spans = exporter.get_finished_spans()
    run2 = [s for s in spans if s.name.startswith("invoke_agent")][0]
    assert {s.context.trace_id for s in spans} == {run1.context.trace_id}
    assert run2.parent.span_id == run1.context.span_id
    assert run2.attributes["fsmchat.run_id"] == "r" and run2.attributes["fsmchat.resumed"] is True
    assert [s.attributes["fsmchat.state"] for s in spans if s.name.startswith("step ")] == \
        ["before_post", "post", "penalize", "stop"]


def say_a(turn):
    return "A."


def say_b(turn):
    return "B."


def test_a_fork_continues_the_trace_of_the_run_it_was_forked_from():
    exporter, tracing = memory_tracing()
    rr = RoundRobinSwarm(agents=[say_a, say_b], max_loops=2)
    cp = MemoryCheckpointer()
    tracing.execute(rr, TASK, checkpoint=cp, run_id="orig")
    orig = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")][0]
    exporter.clear()
    fork("orig", at=1, checkpoint=cp, edit={"replace": {1: "A, edited"}}, fork_id="edited")
    tracing.resume(rr, "edited", cp)
    spans = exporter.get_finished_spans()
    run = [s for s in spans if s.name.startswith("invoke_agent")][0]
    assert {s.context.trace_id for s in spans} == {orig.context.trace_id}
    assert run.parent.span_id == orig.context.span_id
    assert (run.attributes["fsmchat.run_id"], run.attributes["fsmchat.forked_from"]) == ("edited", "orig")


def test_a_run_without_tracing_stores_no_trace_context():
    _, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    cp = MemoryCheckpointer()
    rr.execute(TASK, checkpoint=cp, run_id="plain")
    assert TRACE_META not in cp.load("plain").meta


class Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP trace receiver: records each POST to /v1/traces, decoded."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.received.append((self.path, self.headers["Content-Type"], request))
        out = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.received = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


def test_spans_reach_an_otlp_http_receiver(receiver):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    _, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    Tracing(provider).execute(rr, TASK)
    assert provider.force_flush()
    provider.shutdown()
    assert {(path, ctype) for path, ctype, _ in receiver.received} == {("/v1/traces", "application/x-protobuf")}
    spans = [s for _, _, req in receiver.received for rs in req.resource_spans for ss in rs.scope_spans
             for s in ss.spans]
    assert sorted(s.name for s in spans) == sorted(["invoke_agent RoundRobinSwarm", "step seed", "step a", "step b",
                                                    "step stop", "chat " + rr.agents[0].model,
                                                    "chat " + rr.agents[0].model])
    scopes = {ss.scope.name for _, _, req in receiver.received for rs in req.resource_spans for ss in rs.scope_spans}
    assert scopes == {"fsmchat"}
    run = [s for s in spans if s.name.startswith("invoke_agent")][0]
    attrs = {a.key: a.value for a in run.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "invoke_agent"
    assert attrs["fsmchat.stop_reason"].string_value == "max_loops"
    assert attrs["gen_ai.usage.input_tokens"].int_value == 20
    assert len({s.trace_id for s in spans}) == 1


def test_import_fsmchat_imports_no_opentelemetry():
    code = ("import sys, fsmchat, fsmchat.otel; from fsmchat import RoundRobinSwarm; "
            "RoundRobinSwarm(agents=[lambda turn: 'ok'], max_loops=1).execute('hi'); "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_concurrent_runs_keep_their_own_spans():
    import asyncio

    exporter, tracing = memory_tracing()
    m1, rr1 = swarm({"a": ["A1."], "b": ["B1."]})
    m2, rr2 = swarm({"c": ["C2."], "d": ["D2."]})

    async def both():
        return await asyncio.gather(tracing.aexecute(rr1, TASK), tracing.aexecute(rr2, TASK))

    assert [r.stop_reason for r in asyncio.run(both())] == ["max_loops", "max_loops"]
    spans = exporter.get_finished_spans()
    runs = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(runs) == 2 and len({r.context.trace_id for r in runs}) == 2
    agents_by_trace = {}
    for s in spans:
        if s.name.startswith("chat "):
            agents_by_trace.setdefault(s.context.trace_id, set()).add(s.attributes["gen_ai.agent.name"])
    assert sorted(map(sorted, agents_by_trace.values())) == [["a", "b"], ["c", "d"]]


def test_a_cassette_around_a_traced_run_still_records_and_replays(tmp_path):
    from fsmchat.testing import cassette

    exporter, tracing = memory_tracing()
    m, rr = swarm({"a": ["A says ship."], "b": ["B agrees."]})
    path = tmp_path / "run.json"
    for _ in range(2):  # the first run records, the second replays: the chat spans wrap the cassette's hook
        with cassette(path):
            assert tracing.execute(rr, TASK).transcript[-1].content == "B agrees."
    assert m.calls() == 2
    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert [c.attributes["gen_ai.agent.name"] for c in chats] == ["a", "b", "a", "b"]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in chats] == [5, 5, 5, 5]


def test_a_parallel_steps_branches_are_spans_under_its_step():
    from fsmchat import AgentFlow, parallel

    exporter, tracing = memory_tracing()
    m = ScriptedModel({"a": ["A."], "b": ["B."], "c": ["C."]})
    a, b, c = m.agent("a"), m.agent("b"), m.agent("c")
    r = tracing.execute(AgentFlow(agents=[a, b, c], steps=[parallel([a, b]), c]), TASK)
    assert r.path == ["parallel", "c", "end"]
    spans = exporter.get_finished_spans()
    name_of = {s.context.span_id: s.name for s in spans}
    tree = sorted((s.name if not s.name.startswith("chat ") else f"chat by {s.attributes['gen_ai.agent.name']}",
                   name_of.get(s.parent.span_id) if s.parent else None) for s in spans)
    assert tree == sorted([
        ("invoke_agent flow", None), ("step parallel", "invoke_agent flow"), ("step c", "invoke_agent flow"),
        ("step end", "invoke_agent flow"), ("step parallel|1.a", "step parallel"),
        ("step parallel|1.done", "step parallel"), ("step parallel|2.b", "step parallel"),
        ("step parallel|2.done", "step parallel"), ("chat by a", "step parallel"), ("chat by b", "step parallel"),
        ("chat by c", "step c")])


def test_without_the_extra_tracing_says_what_to_install():
    code = ("import sys; sys.modules['opentelemetry'] = None\n"  # as if it were not installed
            "from fsmchat.otel import Tracing\n"
            "try:\n    Tracing()\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "fsmchat.otel.Tracing needs OpenTelemetry: pip install 'fsmchat[otel]'"


def test_the_run_s_events_are_span_events_of_the_run_span_without_content_unless_asked():
    """A task with a lone surrogate and a reply over the transcript's limit: ``text_repaired`` and
    ``message_truncated`` become span events ``fsmchat.<kind>`` with their numbers and names."""
    for capture in (False, True):
        exporter, tracing = memory_tracing(capture_content=capture)
        rr = RoundRobinSwarm(agents=[lambda turn: "ok"], max_loops=1)
        r = tracing.execute(rr, "Ship it\ud800?")
        assert r.events == [{"event": "text_repaired", "role": "task", "replaced": 1}]
        run = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")][0]
        assert [(e.name, dict(e.attributes)) for e in run.events] == [
            ("fsmchat.text_repaired", {"fsmchat.role": "task", "fsmchat.replaced": 1})]
    from fsmchat.otel import event_attributes
    tool_error = {"event": "tool_error", "agent": "a", "tool": "add", "call_id": "c1", "error": "key sk-abc123def456ghi789"}
    assert event_attributes(tool_error, capture_content=False) == {
        "fsmchat.agent": "a", "fsmchat.tool": "add", "fsmchat.call_id": "c1"}
    assert "sk-abc123def456ghi789" not in event_attributes(tool_error, capture_content=True)["fsmchat.error"]
    selected = {"event": "selected", "turn": 2, "speaker": "b", "by": "selector", "candidates": ["a", "b"]}
    assert event_attributes(selected, capture_content=False) == {
        "fsmchat.turn": 2, "fsmchat.speaker": "b", "fsmchat.by": "selector", "fsmchat.candidates": ["a", "b"]}
