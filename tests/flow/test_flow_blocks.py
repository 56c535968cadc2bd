"""Flow blocks declared once, as patterns are: each kind's model is its constructor, attributes,
checks and (derived) config form; each keeps its working state in a typed frame that a checkpoint
stores as the same dict as before, and reads back from it."""
import inspect

import pytest

from fsmchat import AgentFlow, MemoryCheckpointer
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.flow import Discussion, FlowContext, if_, loop, parallel, repeat, route
from fsmchat.flow.blocks import DiscussionFrame, If, Loop, LoopFrame, Parallel, Repeat, RepeatFrame, Route
from support.checkpoints import interrupt_after


def alice(turn):
    return "cats"


def bob(turn):
    return "dogs"


def step(ctx):
    return f"pass {ctx.variables.get('item', '')}"


def agreed(ctx):
    return len(ctx.variables["discussion_transcript"].splitlines()) >= 3


@pytest.mark.parametrize("block, fields", [
    (Discussion, ["kind", "agents", "rounds", "until", "select", "name", "context"]),  # context: written when set
    (Loop, ["kind", "steps", "over", "var_name", "parallel", "name", "max_items"]),
    (Parallel, ["kind", "steps", "name", "max_concurrency"]),
    (Route, ["kind", "routes", "default", "name", "on"]),
    (If, ["kind", "condition", "expression", "then_steps", "else_steps", "name"]),
    (Repeat, ["kind", "steps", "until", "until_expression", "max_iterations", "name"]),
])
def test_each_block_s_config_form_is_derived_from_its_model(block, fields):
    assert block.Spec.__qualname__ == f"{block.__name__}.Spec"
    assert list(block.Spec.model_fields) == fields  # the config form written before: same fields, same order
    params = [p for p in inspect.signature(block).parameters]
    assert params == [f for f in fields if f not in ("kind", "expression", "until_expression")]


def test_a_block_s_attributes_are_its_model_s_fields_and_it_refuses_unknown_keywords():
    d = Discussion([alice, bob], rounds=2, name="talk")
    assert (d.rounds, d.name, d.config.agents) == (2, "talk", [alice, bob])
    assert loop(step, over=[1, 2]).over == [1, 2]
    with pytest.raises(ConfigTypeError, match=r"^Discussion\(\) got an unexpected keyword argument 'round'; "
                                              r"did you mean rounds\?"):
        Discussion([alice, bob], round=2)


@pytest.mark.parametrize("make, error, message", [
    (lambda: Discussion([]), ValueError, "Discussion needs at least one speaker"),
    (lambda: Discussion([alice], rounds=0), ValueError, "Discussion 'discussion': rounds=0 is invalid: an int >= 1"),
    (lambda: Discussion([alice], until="soon"), TypeError, "Discussion until must be a callable"),
    (lambda: loop(step, over=5), ValueError, "loop over= must name a variable holding a list"),
    (lambda: parallel([]), ValueError, "parallel needs at least one step"),
    (lambda: route({}), ValueError, "route needs routes="),
    (lambda: if_(5, [step]), TypeError, "if_ condition must be a callable"),
    (lambda: repeat(step, max_iterations=0), ValueError, "repeat 'repeat': max_iterations=0 is invalid: an int >= 1"),
])
def test_a_block_s_checks_are_its_model_s_with_the_documented_errors(make, error, message):
    with pytest.raises(error) as info:
        make()
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ConfigError) or error is TypeError


def run_until(flow, task, state, k):
    """Run with a memory checkpoint; cancel once ``state`` has been left k times. Returns the store."""
    cp = MemoryCheckpointer()
    interrupt_after(flow, task, cp, "r", state, k)
    return cp


def test_frames_are_typed_and_stored_as_the_same_dicts():
    talk = AgentFlow(steps=[Discussion([alice, bob], rounds=2)])
    cp = run_until(talk, "pets?", "discussion.turn", 3)
    assert cp.load("r").state["frames"] == {"1": {"t": 3, "lines": ["alice: cats", "bob: dogs", "alice: cats"],
                                                  "topic": "pets?"}}
    with_until = AgentFlow(steps=[Discussion([alice, bob], rounds=3, until=agreed)])
    cp = run_until(with_until, "pets?", "discussion.turn", 2)  # check_until is committed with the next turn
    assert cp.load("r").state["frames"]["1"] == {"t": 2, "lines": ["alice: cats", "bob: dogs"], "topic": "pets?",
                                                 "met": False}
    items = AgentFlow(steps=[loop(step, over="xs")], variables={"xs": ["a", "b"]})
    cp = run_until(items, "go", "loop.next", 2)
    assert cp.load("r").state["frames"] == {"1": {"i": 1, "items": ["a", "b"]}}
    passes = AgentFlow(steps=[repeat(step, max_iterations=3)])
    cp = run_until(passes, "go", "repeat.check", 1)
    assert cp.load("r").state["frames"] == {"1": {"n": 1, "met": False}}
    assert [m.content for m in passes.resume("r", cp).transcript] == ["pass "] * 3


def test_a_stored_frame_is_read_back_as_its_dataclass_and_the_run_resumes():
    talk = AgentFlow(steps=[Discussion([alice, bob], rounds=2)])
    full = talk.execute("pets?")
    cp = run_until(talk, "pets?", "discussion.turn", 2)
    state = cp.load("r").state
    ctx = FlowContext("pets?", {})
    ctx.restore(state)
    assert ctx.frames[1] == {"t": 2, "lines": ["alice: cats", "bob: dogs"], "topic": "pets?"}  # as stored
    frame = ctx.frame(1, DiscussionFrame)
    assert frame == DiscussionFrame(t=2, lines=["alice: cats", "bob: dogs"], topic="pets?")
    assert ctx.frames[1] is frame and ctx.variables["discussion_transcript"] == "alice: cats\nbob: dogs"
    resumed = talk.resume("r", cp)
    assert resumed.output == full.output and resumed.transcript == full.transcript


def test_typed_frames_read_what_they_declare():
    assert LoopFrame.from_state({"i": 0, "items": [1]}) == LoopFrame(i=0, items=[1])
    assert RepeatFrame.from_state({"n": 2}) == RepeatFrame(n=2, met=False)  # a field it lacks: its default
    assert DiscussionFrame(t=1, topic="x").to_state() == {"t": 1, "lines": [], "topic": "x"}  # met only when set
