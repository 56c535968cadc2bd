"""Kinds are declared once and registered by the module defining them: a pattern is one model (its
constructor's parameters, validation, attributes and config form), a flow step kind is one Block
class with its spec. A toy pattern and a toy step kind defined in this file travel through
to_config/from_config and run, without a line of fsmchat changed; configs written by the previous
version still load and run the same; stop reasons are one enum; a pattern's state is typed."""
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pytest
from pydantic import Field

from fsmchat import Agent, AgentFlow, Bid, GroupChat, MemoryCheckpointer, RoundRobinSwarm, SqliteCheckpointer, \
    StateGraph, from_config
from fsmchat.config import PATTERN_KINDS, STEP_KINDS, Participants
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.patterns.runner import PatternRun
from fsmchat.flow import STEPS, Block, BlockConfig
from fsmchat.flow.compile import Compiler, bound
from fsmchat.models import RunResult, StopReason
from fsmchat.patterns import ChatContext, GroupChatConfig, PanelState, Pattern, PatternConfig, PatternState
from fsmchat.patterns.base import OutputType
from fsmchat.patterns.group_chat import compile_group_chat
from fsmchat.speakers.agent import CallableSpeaker, Speaker, as_speaker, check_roster
from fsmchat.speakers.human import Human
from fsmchat.testing import FunctionModel, ScriptedModel, assert_trace_is_path
from fsmchat.trust import UntrustedReference
from test_config import bid_fn, echo, shout  # this folder's module: configs name them test_config:... (and the golden ones do)

GOLDEN = Path(__file__).parents[1] / "golden" / "configs_v1.json"


# ---- a toy pattern: its own model, its own state, its own graph; nothing in fsmchat names it ----
class EchoChainConfig(PatternConfig):
    """Every agent speaks in turn, ``passes`` times over."""

    name: str = "echo-chain"
    agents: Participants = Field(None, title="agent")
    passes: int = Field(1, ge=1)
    prefix: str = ""
    output_type: OutputType = "final"
    verbose: bool = False


@dataclass
class EchoChainState(PatternState):
    passes_done: int = 0


@dataclass
class EchoChainContext(ChatContext):
    config: EchoChainConfig = field(kw_only=True)
    state: EchoChainState = field(default_factory=EchoChainState)


def post_task(ctx: EchoChainContext) -> None:
    """post the task"""
    ctx.seed()


async def one_pass(ctx: EchoChainContext) -> int:
    """every agent speaks once"""
    for s in ctx.speakers:
        reply = await ctx.ask(s, "Go on.")
        ctx.post(s.name, ctx.config.prefix + reply)
    ctx.state.passes_done += 1
    return ctx.state.passes_done


def more_passes(ctx: EchoChainContext) -> bool:
    """passes remain"""
    return ctx.state.passes_done < ctx.config.passes


class EchoChain(Pattern, kind="echo_chain", config=EchoChainConfig):
    config: EchoChainConfig

    def _compile(self) -> StateGraph:
        g = StateGraph("echo_chain", context=EchoChainContext)
        g.state("seed", post_task).state("speak", one_pass).final("stop", reason=StopReason.ROUNDS)
        g.edge("seed", "speak").edge("speak", "speak", when=more_passes).edge("speak", "stop", label=StopReason.ROUNDS)
        return g

    def _context(self, task: str) -> EchoChainContext:
        return EchoChainContext(task, check_roster(self.config.agents or [], "EchoChain"), config=self.config)

    def _calls_by_speaker(self) -> list[tuple[Any, int]]:
        return [(a, self.config.passes) for a in self.config.agents or []]


def test_a_toy_pattern_is_declared_once_travels_and_runs():
    m = FunctionModel(bid_fn)
    chain = EchoChain(agents=[m.agent("a"), m.agent("b")], passes=1, prefix="> ")
    assert list(inspect.signature(EchoChain).parameters) == ["name", "agents", "passes", "prefix", "output_type",
                                                             "verbose", "interrupt_before", "interrupt_after"]
    assert (chain.name, chain.passes, chain.prefix) == ("echo-chain", 1, "> ")  # attributes are the model's fields
    chain.passes = 2
    assert chain.config.passes == 2
    with pytest.raises(ConfigError, match=r"^EchoChain: passes=0 is invalid: input should be greater than or equal "
                                          r"to 1$"):
        chain.passes = 0
    cfg = chain.to_config()
    assert isinstance(cfg, EchoChain.Spec) and EchoChain.Spec is PATTERN_KINDS.spec("echo_chain")
    text = cfg.model_dump_json()
    data = json.loads(text)
    assert list(data) == ["kind", "version", "limits", "factory", "pattern_class", "models", "interrupt_before",
                          "interrupt_after", "name", "agents", "passes", "prefix", "output_type", "verbose"]
    assert (data["kind"], data["passes"], [a["name"] for a in data["agents"]]) == ("echo_chain", 2, ["a", "b"])
    with pytest.raises(UntrustedReference) as refused:  # a kind registered outside fsmchat needs its module allowed
        from_config(data)
    assert str(refused.value) == ("kind 'echo_chain': refused 'test_kinds:EchoChain.Spec': it is registered by module "
                                  "'test_kinds', which is not allowed (allowed: ['fsmchat']); pass "
                                  "allow=['test_kinds'] if you trust its code")
    rebuilt = from_config(text, allow=["test_kinds", "test_config"])
    assert type(rebuilt) is EchoChain and rebuilt.to_config().model_dump_json() == text
    run = rebuilt.execute("go")
    assert run.path == ["seed", "speak", "speak", "stop"]
    assert run.stop_reason is StopReason.ROUNDS
    assert [(msg.role, msg.content[:2]) for msg in run.transcript] == [("User", "go"), ("a", "> "), ("b", "> "),
                                                                       ("a", "> "), ("b", "> ")]
    assert_trace_is_path(rebuilt.graph, run)


def test_a_toy_pattern_subclass_travels_as_pattern_class():
    class Louder(EchoChain):  # no kind=: the same kind, shipped as its class (here: unreachable, so refused)
        pass

    assert Louder.Spec is EchoChain.Spec and Louder.kind == "echo_chain"
    with pytest.raises(TypeError, match="is defined inside a function"):
        Louder(agents=[echo]).to_config()


# ---- a toy flow step kind: runs its steps twice, declared once by its model ----
class TwiceConfig(BlockConfig):
    steps: Annotated[Any, STEPS] = None  # live steps; in the config form, each validated by its kind
    name: str = "twice"


class Twice(Block, kind="twice", config=TwiceConfig):
    def compile(self, c: Compiler, g: StateGraph, state: str) -> None:
        g.subgraph(state, c.sequence(self.steps * 2, self.name), "its steps, twice")

    def calls(self, items: dict[str, int], requests: bool, known: dict[str, Any]) -> int:
        return 2 * bound(self.steps, items, requests, known)


def test_a_toy_step_kind_travels_bounds_and_runs():
    m = FunctionModel(bid_fn)
    flow = AgentFlow(steps=[Twice([shout, m.agent("a")])], name="t")
    assert flow.max_calls() == 2 and STEP_KINDS.spec("twice") is Twice.Spec
    data = flow.to_config().model_dump(mode="json")
    assert [(s["kind"], [x["kind"] for x in s["steps"]]) for s in data["steps"]] == [("twice", ["callable", "agent"])]
    with pytest.raises(UntrustedReference, match="kind 'twice': refused 'test_kinds:Twice.Spec'"):
        from_config(data)
    rebuilt = from_config(data, allow=["test_kinds", "test_config"])
    run = rebuilt.execute("go")
    assert run.path == ["twice.shout", "twice.a", "twice.shout_2", "twice.a_2", "twice.done", "end"]
    assert run.stop_reason is StopReason.DONE and [s["name"] for s in run.output["steps"]] == ["shout", "a"] * 2
    assert m.calls("a") == 2


def test_unknown_kinds_are_config_errors_naming_the_known_ones():
    with pytest.raises(ConfigError) as e:
        from_config({"kind": "nope"})
    assert "whose kind is one of ['echo_chain', 'expert_panel', 'factory', 'flow', 'group_chat', 'handoffs', " \
           "'one_on_one_debate', 'round_robin', 'selector_group_chat'] (kind='nope' is none of them)" in str(e.value)
    flow = AgentFlow(steps=[shout]).to_config().model_dump(mode="json")
    flow["steps"] = [{"kind": "loop", "steps": [{"kind": "sing"}]}]
    with pytest.raises(ConfigError) as e:
        from_config(flow)
    assert "steps.0.steps.0: Value error, flow step kind='sing' is invalid: one of ['agent', 'callable', " \
           "'discussion', 'human', 'if', 'loop', 'parallel', 'repeat', 'route', 'task', 'twice']" in str(e.value)


def test_a_kind_is_registered_once():
    with pytest.raises(ConfigError, match=r"pattern kind 'group_chat' is already registered by "
                                          r"fsmchat.patterns.group_chat \(GroupChat.Spec\); test_kinds must choose "
                                          r"another kind"):
        class Impostor(Pattern, kind="group_chat", config=EchoChainConfig):
            pass
    with pytest.raises(TypeError, match=r"kind='thrice' needs config=, the block's model \(a BlockConfig\)"):
        class Thrice(Block, kind="thrice"):
            pass
    assert "thrice" not in STEP_KINDS


# ---- configs written by the previous version ----
STORED = {k: v for k, v in json.loads(GOLDEN.read_text()).items() if not k.startswith("_")}


@pytest.mark.parametrize("kind", list(STORED))
def test_configs_stored_by_the_previous_version_load_and_run_the_same(kind):
    stored = STORED[kind]
    pattern = from_config(stored["config"], allow=["test_config"])
    assert pattern.kind == kind
    run = pattern.execute("topic")
    assert run.path == stored["path"] and run.stop_reason == stored["stop_reason"]
    assert [[m.role, m.content] for m in run.transcript] == stored["transcript"]
    again = json.loads(pattern.to_config().model_dump_json())
    assert {k: v for k, v in again.items()} == stored["config"]  # the same fields and values (the order may differ)


# ---- GroupChat's model refuses in the one style, like every other ----
def test_group_chat_config_errors_are_formatted_config_errors():
    a, b = Agent("a"), Agent("b")
    for make, message in [
        (lambda: GroupChatConfig(agents=[a, b], max_loops=0),
         "GroupChatConfig: max_loops=0 is invalid: an int >= 1 (cap on total messages, the task included)"),
        (lambda: GroupChatConfig(agents=[a, b], threshold="high"),  # strict: a string is not parsed (a ConfigTypeError)
         "GroupChatConfig: threshold='high' is invalid: a finite number >= 0 and < 1 (a bid must be strictly above "
         "it, so 1 or more would silence every bid), not a str"),
        (lambda: GroupChatConfig(agents=[a, b], colour="red"), "GroupChatConfig: unknown option 'colour'"),
        (lambda: GroupChatConfig(agents=[a]), "GroupChat requires at least 2 agents."),
        (lambda: GroupChat(agents=[a, b], recency_window=0),
         "GroupChat: recency_window=0 is invalid: an int >= 1 (how many of the latest speakers the penalty applies "
         "to; swarms treats 0 as 1)"),
        (lambda: setattr(GroupChat(agents=[a, b]), "threshold", 1.0),
         "GroupChat: threshold=1.0 is invalid: a finite number >= 0 and < 1 (a bid must be strictly above it, so 1 or "
         "more would silence every bid)"),
        (lambda: setattr(GroupChat(agents=[a, b]).config, "max_loops", -1),
         "GroupChatConfig: max_loops=-1 is invalid: an int >= 1 (cap on total messages, the task included)"),
    ]:
        with pytest.raises((ConfigError, ConfigTypeError)) as e:
            make()
        assert str(e.value) == message and not isinstance(e.value, pydantic.ValidationError)
    with pytest.raises(ConfigTypeError, match=r"^GroupChat\(\) got an unexpected keyword argument 'max_loop'; did you "
                                              r"mean max_loops\? \(its options: name, description, agents, max_loops,"):
        GroupChat(agents=[a, b], max_loop=3)


def test_a_pattern_takes_its_models_fields_in_order():
    a = Agent("a")
    rr = RoundRobinSwarm("crew", "desc", [a], True, 2, "all")
    assert (rr.name, rr.description, rr.verbose, rr.max_loops, rr.output_type) == ("crew", "desc", True, 2, "all")
    assert rr.agents == [a] and rr.config.agents == [a]
    with pytest.raises(TypeError, match=r"RoundRobinSwarm\(\) got multiple values for argument 'name'"):
        RoundRobinSwarm("crew", name="again", agents=[a])
    chat = GroupChat(agents=[a, Agent("b")])
    graph = chat.graph
    chat.agents = [a, Agent("b"), Human("Pat")]  # validated like the constructor's; the graph is compiled again
    assert chat.graph is not graph and "claim_Pat" in chat.graph.states


# ---- one list of stop reasons ----
def test_stop_reasons_are_one_enum_that_reads_as_plain_strings(tmp_path):
    assert [r.value for r in StopReason] == ["max_loops", "lull", "until", "rounds", "closed", "ttl", "budget",
                                             "deadline", "error", "cancelled", "stopped", "interrupted", "max_steps",
                                             "max_turns", "livelock", "answered", "done", "running"]
    assert StopReason.LULL == "lull" and isinstance(StopReason.LULL, str)
    assert (f"{StopReason.LULL}", str(StopReason.LULL), repr(StopReason.LULL)) == ("lull", "lull", "'lull'")
    assert json.dumps({"stop": StopReason.LULL}) == '{"stop": "lull"}' and {"lull": 1}[StopReason.LULL] == 1
    assert [t.label for t in compile_group_chat().transitions if t.dest == "stop"] == ["max_loops", "lull",
                                                                                      "max_loops"]
    assert all(type(t.label) is StopReason for t in compile_group_chat().transitions if t.dest == "stop")
    silent = ScriptedModel(fn=lambda req: Bid(0.1, "meh"))
    chat = GroupChat(agents=[silent.agent("a"), silent.agent("b")])
    store = SqliteCheckpointer(str(tmp_path / "runs.db"))
    run = chat.execute("t", checkpoint=store, run_id="r1")
    assert run.stop_reason is StopReason.LULL and run.path == ["seed", "bid", "select", "stop"]
    saved = store.load("r1")
    assert type(saved.stop_reason) is str and saved.stop_reason == "lull"  # the store keeps the plain string
    assert chat.resume("r1", store).stop_reason is StopReason.LULL  # read back as the member
    own = RunResult(["a"], [], "approved", None)  # a graph of your own stops for its own reasons
    assert type(own.stop_reason) is str and own.stop_reason == "approved"


# ---- typed pattern state, checkpointed in the same shape ----
def test_pattern_state_is_typed_and_checkpointed_as_scratch():
    m = FunctionModel(bid_fn)
    chat = GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=3)
    store = MemoryCheckpointer()
    run = chat.execute("t", checkpoint=store, run_id="g")
    assert run.path == ["seed", "bid", "select", "post", "penalize", "bid", "select", "stop"]  # a lull at turn 2
    scratch = store.load("g").state["scratch"]
    assert list(scratch) == ["recent", "bids", "winner", "dropped"]
    assert (scratch["recent"], scratch["winner"], scratch["dropped"]) == (["a"], None, 0)
    ctx = PatternRun(chat, store, "g").restored(store.load("g"))
    assert (ctx.state.recent, ctx.state.winner, ctx.state.dropped) == (["a"], None, 0)
    assert [(b.score, b.message) for b in ctx.state.bids] == [(0.189, "a: point 31"), (0.459, "b: point 2")]
    assert scratch["bids"][1]["__bid__"][:2] == [0.459, "b: point 2"]
    panel = PanelState()
    panel.restore({"topic": "t", "round": 2, "opener": "o", "answers": [["E1", "yes"]], "moderator": "gone"})
    assert (panel.topic, panel.round, panel.answers) == ("t", 2, [("E1", "yes")])
    assert panel.snapshot() == {"topic": "t", "round": 2, "opener": "o", "answers": [["E1", "yes"]]}


# ---- speakers: what the engine calls, as a Protocol ----
class Parrot:
    """A speaker of your own: a name, reply and bid."""

    name = "parrot"

    async def reply(self, turn):
        return "squawk"

    async def bid(self, turn):
        raise AssertionError("a round robin never asks for bids")


def test_a_speaker_is_anything_with_a_name_reply_and_bid():
    assert all(isinstance(s, Speaker) for s in (Agent("a"), CallableSpeaker(echo), Human("h"), Parrot()))
    assert not isinstance(echo, Speaker) and isinstance(as_speaker(echo), CallableSpeaker)
    parrot = Parrot()
    assert as_speaker(parrot) is parrot
    run = RoundRobinSwarm(agents=[parrot]).execute("hello")
    assert [m.content for m in run.transcript] == ["hello", "squawk"] and run.stop_reason is StopReason.MAX_LOOPS


class Unbounded(EchoChain):
    """EchoChain with its worst-case call bound taken away (``_calls_by_speaker`` is abstract)."""

    _calls_by_speaker = Pattern._calls_by_speaker


def test_a_pattern_without_a_call_bound_is_refused_when_built():
    """max_calls, budgets, the roster and a checkpoint's fingerprint all read the bound: a pattern
    that leaves it out cannot be built, rather than failing later in the one run that needs it."""
    m = FunctionModel(bid_fn)
    with pytest.raises(TypeError, match="Can't instantiate abstract class Unbounded .*_calls_by_speaker"):
        Unbounded(agents=[m.agent("a"), m.agent("b")], passes=1)
    assert m.calls() == 0
