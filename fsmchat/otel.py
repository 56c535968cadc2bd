"""Layer 14: OpenTelemetry spans of runs, opt-in (the ``otel`` extra: ``pip install fsmchat[otel]``).

``Tracing(tracer_provider)`` runs a pattern (``aexecute``/``execute``, ``aresume``/``resume``) and
reports it as spans named and attributed by the OpenTelemetry GenAI semantic conventions: one
``invoke_agent`` span for the run, a child span per engine step, and a ``chat`` span per model
request under the step that made it (``gen_ai.request.model``, ``gen_ai.provider.name``,
``gen_ai.usage.input_tokens``/``output_tokens``, error status when the request fails), and an
``execute_tool`` span per tool call under the step that ran it (``gen_ai.tool.name``,
``gen_ai.tool.call.id``). fsmchat's own facts are ``fsmchat.*`` attributes (run id, pattern, state,
stop reason). Message content, tool arguments and tool results are recorded only with
``capture_content=True``.

Nothing is imported from OpenTelemetry, and nothing is sent anywhere, until a ``Tracing`` is made;
the spans go to the given provider (else the global one, a no-op unless configured). A
checkpointed run stores its W3C ``traceparent`` in its checkpoint metadata; resuming it (or a
fork of it) parents the new run span to it, so the whole life of a run is one trace.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

from .engine import run_sync
from .errors import result_of
from .common.masking import redact
from .models import RunResult, TraceEvent
from .speakers.llm import INTERCEPTOR
from .speakers.tool_loop import TOOL_HOOK
from .store.checkpoint import RUN_META

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

TRACE_META = "trace_context"
"""The checkpoint metadata key of a run's trace context: ``{"traceparent": "00-<trace>-<span>-<flags>"}``.

Examples:
    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> from fsmchat import MemoryCheckpointer, RoundRobinSwarm
    >>> from fsmchat.otel import TRACE_META, Tracing
    >>> store = MemoryCheckpointer()
    >>> _ = Tracing(TracerProvider()).execute(RoundRobinSwarm(agents=[lambda turn: "Done."], max_loops=1), "Go?",
    ...                                       checkpoint=store, run_id="traced")
    >>> list(store.load("traced").meta[TRACE_META])
    ['traceparent']
"""


def _provider_of(model: str) -> str:
    """The provider part of a litellm model id (``openai/gpt-4o`` -> ``openai``; no prefix: ``openai``)."""
    return model.split("/", 1)[0] if "/" in model else "openai"


def _content(value: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


NAMING_KEYS = frozenset({"agent", "tool", "step", "state", "call_id", "model", "limit", "policy", "decision",
                         "speaker", "by", "from", "to", "route", "role", "where", "on"})
"""The keys of a run event that name things; its other texts are content (``capture_content=True``)."""


def event_attributes(event: Mapping[str, object], capture_content: bool) -> dict[str, AttributeValue]:
    """A run event (``fsmchat.events``) as the attributes of its span event on the run span.

    Numbers, flags, the names (``NAMING_KEYS``) and lists of names are kept; other texts (a reason,
    a summary, a reply's text) and nested data only with ``capture_content``, masked, nested data
    as JSON. The ``event`` key is the span event's name (``fsmchat.<kind>``).

    Args:
        event: The event as stored.
        capture_content: Whether content is recorded.

    Returns:
        The attributes.

    Examples:
        >>> from fsmchat.otel import event_attributes
        >>> ev = {"event": "tool_error", "agent": "a", "tool": "add", "call_id": "c1", "error": "boom"}
        >>> event_attributes(ev, capture_content=False)
        {'fsmchat.agent': 'a', 'fsmchat.tool': 'add', 'fsmchat.call_id': 'c1'}
        >>> event_attributes(ev, capture_content=True)["fsmchat.error"]
        'boom'
    """
    out: dict[str, AttributeValue] = {}
    for key, value in event.items():
        name = f"fsmchat.{key}"
        if key == "event" or value is None:
            continue
        if isinstance(value, (bool, int, float)):
            out[name] = value
        elif isinstance(value, str):
            if key in NAMING_KEYS:
                out[name] = value
            elif capture_content:
                out[name] = redact(value)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            out[name] = [str(v) for v in value]  # a list of names (tools, candidates, variables)
        elif capture_content:
            out[name] = redact(_content(value))
    return out


class _RunSpans:
    """The spans of one run: the run span, the step now running, and the model-call hook."""

    def __init__(self, tracing: Tracing, run: Span):
        self.tracing = tracing
        self.run = run
        self.step: Span | None = None
        self.ended = False
        self.prev_send = INTERCEPTOR.get()
        self._open_step()

    def _open_step(self) -> None:
        from opentelemetry import trace

        self.step = self.tracing.tracer.start_span("step", context=trace.set_span_in_context(self.run))

    def on_event(self, event: TraceEvent) -> None:
        """An observer: each ``TraceEvent`` ends the step span it closes (a branch's event is a span of
        its own under the fork's step) and opens the next one."""
        from opentelemetry import trace

        if "|" in event.state:  # a branch run's step: the fork state's step is still running
            parent = self.step or self.run
            span = self.tracing.tracer.start_span(f"step {event.state}", context=trace.set_span_in_context(parent))
            self._step_attributes(span, event)
            span.end()
            return
        if self.step is None:
            return
        self.step.update_name(f"step {event.state}")
        self._step_attributes(self.step, event)
        self.step.end()
        self.step = None
        if event.dest is not None:
            self._open_step()

    def _step_attributes(self, span: Span, event: TraceEvent) -> None:
        span.set_attribute("fsmchat.state", event.state)
        span.set_attribute("fsmchat.step", event.step)
        if event.trigger is not None:
            span.set_attribute("fsmchat.trigger", event.trigger)
        if event.dest is not None:
            span.set_attribute("fsmchat.dest", event.dest)

    async def send(self, acompletion: Callable[..., Awaitable[object]], agent: str, model: str,
                   messages: list[dict[str, object]], meta: dict[str, object], params: dict[str, object]) -> object:
        """The model-request hook: one ``chat`` span (kind CLIENT) around each request."""
        from opentelemetry import trace

        tracer = self.tracing.tracer
        parent = trace.set_span_in_context(self.step or self.run)
        with tracer.start_as_current_span(f"chat {model}", context=parent, kind=trace.SpanKind.CLIENT) as span:
            provider = _provider_of(model)
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", model)
            span.set_attribute("gen_ai.provider.name", provider)
            span.set_attribute("gen_ai.system", provider)
            span.set_attribute("gen_ai.agent.name", agent)
            if self.tracing.capture_content:
                span.set_attribute("gen_ai.input.messages", _content(messages))
            try:
                if self.prev_send is not None:
                    response = await self.prev_send(acompletion, agent, model, messages, meta, params)
                else:
                    response = await acompletion(model=model, messages=messages, metadata=meta, **params)
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__name__)
                raise
            self._response_attributes(span, response)
            return response

    async def tool(self, run: Callable[[], Awaitable[str]], agent: str, name: str, call_id: str,
                   arguments: dict[str, object]) -> str:
        """The tool-call hook: one ``execute_tool`` span (kind INTERNAL) around each call."""
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        parent = trace.set_span_in_context(self.step or self.run)
        with self.tracing.tracer.start_as_current_span(f"execute_tool {name}", context=parent,
                                                       kind=trace.SpanKind.INTERNAL) as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", name)
            span.set_attribute("gen_ai.tool.call.id", call_id)
            span.set_attribute("gen_ai.tool.type", "function")
            span.set_attribute("gen_ai.agent.name", agent)
            if self.tracing.capture_content:
                span.set_attribute("gen_ai.tool.call.arguments", _content(arguments))
            try:
                result = await run()
            except Exception as exc:
                span.set_attribute("error.type", type(exc).__name__)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {str(exc)[:500]}"))
                raise
            if self.tracing.capture_content:
                span.set_attribute("gen_ai.tool.call.result", result)
            return result

    def _response_attributes(self, span: Span, response: object) -> None:
        name = getattr(response, "model", None)
        if isinstance(name, str) and name:
            span.set_attribute("gen_ai.response.model", name)
        usage = getattr(response, "usage", None)
        for ours, theirs in (("prompt_tokens", "gen_ai.usage.input_tokens"),
                             ("completion_tokens", "gen_ai.usage.output_tokens")):
            v = getattr(usage, ours, None)
            if isinstance(v, int):
                span.set_attribute(theirs, v)
        choices = getattr(response, "choices", None) or []
        reasons = [str(getattr(c, "finish_reason", None)) for c in choices if getattr(c, "finish_reason", None)]
        if reasons:
            span.set_attribute("gen_ai.response.finish_reasons", reasons)
        if self.tracing.capture_content:
            out = []
            for c in choices:
                message = getattr(c, "message", None)
                out.append({"role": getattr(message, "role", None), "content": getattr(message, "content", None)})
            span.set_attribute("gen_ai.output.messages", _content(out))

    def finish(self, result: RunResult | None, error: BaseException | None) -> None:
        """End the step left open (the run stopped inside it) and the run span, with the outcome."""
        from opentelemetry.trace import Status, StatusCode

        if self.step is not None:
            if error is not None or (result is not None and result.error is not None):
                self.step.set_status(Status(StatusCode.ERROR))
            self.step.end()
            self.step = None
        run = self.run
        if result is not None:
            if result.run_id is not None:
                run.set_attribute("fsmchat.run_id", result.run_id)
            run.set_attribute("fsmchat.stop_reason", str(result.stop_reason))
            run.set_attribute("fsmchat.steps", len(result.trace))
            run.set_attribute("fsmchat.model_calls", result.calls)
            usage = result.usage or {}
            run.set_attribute("gen_ai.usage.input_tokens", int(usage.get("prompt_tokens", 0)))
            run.set_attribute("gen_ai.usage.output_tokens", int(usage.get("completion_tokens", 0)))
            if result.error is not None:
                run.set_attribute("error.type", type(result.error).__name__)
                run.set_status(Status(StatusCode.ERROR, str(result.error)[:500]))
            for event in result.typed_events():
                run.add_event(f"fsmchat.{event.event}", event_attributes(event.to_dict(), self.tracing.capture_content))
        run.end()


class Tracing:
    """Runs patterns with OpenTelemetry spans (GenAI semantic conventions).

    Args:
        tracer_provider: Where the spans go (an ``opentelemetry.sdk.trace.TracerProvider`` with an
            exporter, e.g. OTLP); None: the global provider (sends nothing unless one is configured).
        capture_content: Record the task and every model request's messages and replies as span
            attributes (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``fsmchat.task``).
            Off by default: spans then hold names, counts and ids only.

    Raises:
        ImportError: OpenTelemetry is not installed (``pip install fsmchat[otel]``).
        TypeError: ``capture_content`` is not a bool.

    Examples:
        >>> from opentelemetry.sdk.trace import TracerProvider
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.otel import Tracing
        >>> tracing = Tracing(TracerProvider())
        >>> tracing.execute(RoundRobinSwarm(agents=[lambda turn: "Done."], max_loops=1), "Ship it?").stop_reason
        'max_loops'
    """

    def __init__(self, tracer_provider: TracerProvider | None = None, *, capture_content: bool = False):
        if not isinstance(capture_content, bool):
            raise TypeError(f"Tracing capture_content={capture_content!r}: expected True or False")
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError("fsmchat.otel.Tracing needs OpenTelemetry: pip install 'fsmchat[otel]'") from exc
        self.tracer: Tracer = trace.get_tracer("fsmchat", tracer_provider=tracer_provider)
        self.capture_content = capture_content

    async def aexecute(self, pattern: Any, task: str, **kw: Any) -> RunResult:
        """``pattern.aexecute(task, **kw)`` inside a run span; a checkpointed run stores its trace context."""
        return await self._traced(pattern, None, task, lambda hooks: pattern.aexecute(task, **hooks, **kw), kw)

    async def aresume(self, pattern: Any, run_id: str, checkpoint: Any, **kw: Any) -> RunResult:
        """``pattern.aresume(run_id, checkpoint, **kw)`` in a run span parented to the trace context
        stored with the run (its first run's span, or the run it was forked from)."""
        parent = None
        meta = checkpoint.load(run_id).meta
        stored = meta.get(TRACE_META)
        if isinstance(stored, dict):
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            parent = TraceContextTextMapPropagator().extract({k: v for k, v in stored.items() if isinstance(v, str)})
        origin = meta.get("forked_from")
        forked_from = origin.get("run_id") if isinstance(origin, dict) else None
        return await self._traced(pattern, parent, None,
                                  lambda hooks: pattern.aresume(run_id, checkpoint, **hooks, **kw), kw, run_id,
                                  forked_from if isinstance(forked_from, str) else None)

    def execute(self, pattern: object, task: str, **kw: object) -> RunResult:
        """``aexecute`` from synchronous code (inside a running loop too, as ``pattern.execute``)."""
        return run_sync(lambda: self.aexecute(pattern, task, **kw))

    def resume(self, pattern: object, run_id: str, checkpoint: object, **kw: object) -> RunResult:
        """``aresume`` from synchronous code (inside a running loop too, as ``pattern.resume``)."""
        return run_sync(lambda: self.aresume(pattern, run_id, checkpoint, **kw))

    async def _traced(self, pattern: object, parent: Context | None, task: str | None,
                      call: Callable[[dict[str, list[object]]], Awaitable[RunResult]], kw: dict[str, object],
                      run_id: str | None = None, forked_from: str | None = None) -> RunResult:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        name = str(getattr(pattern, "name", None) or type(pattern).__name__)
        run = self.tracer.start_span(f"invoke_agent {name}", context=parent, kind=trace.SpanKind.INTERNAL)
        run.set_attribute("gen_ai.operation.name", "invoke_agent")
        run.set_attribute("gen_ai.agent.name", name)
        run.set_attribute("gen_ai.provider.name", "fsmchat")
        run.set_attribute("fsmchat.pattern", type(pattern).__name__)
        if run_id is not None:
            run.set_attribute("fsmchat.run_id", run_id)
            run.set_attribute("fsmchat.resumed", True)
        if forked_from is not None:
            run.set_attribute("fsmchat.forked_from", forked_from)
        if task is not None and self.capture_content:
            run.set_attribute("fsmchat.task", task)
        spans = _RunSpans(self, run)
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(run))
        observers = kw.pop("observers", ())
        if not isinstance(observers, Iterable):
            raise TypeError(f"Value after * must be an iterable, not {type(observers).__name__}")  # as [*observers]
        hooks: dict[str, list[object]] = {"observers": [*observers, spans.on_event]}
        meta_token = RUN_META.set({**(RUN_META.get() or {}), TRACE_META: carrier})
        send_token = INTERCEPTOR.set(spans.send)
        tool_token = TOOL_HOOK.set(spans.tool)
        result = None
        try:
            result = await call(hooks)
        except BaseException as exc:
            run.record_exception(exc)
            from opentelemetry.trace import Status, StatusCode

            run.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {str(exc)[:500]}"))
            spans.finish(result_of_partial(exc), exc)
            raise
        finally:
            TOOL_HOOK.reset(tool_token)
            INTERCEPTOR.reset(send_token)
            RUN_META.reset(meta_token)
        spans.finish(result, None)
        return result


def result_of_partial(exc: BaseException) -> RunResult | None:
    """The partial ``RunResult`` an exception carries (a cancelled or refused run), else None."""
    partial = result_of(exc)
    return partial if isinstance(partial, RunResult) else None
