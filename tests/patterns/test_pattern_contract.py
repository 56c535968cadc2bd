"""What a pattern of one's own gets from ``Pattern`` without asking: the run's roster (so credentials
are checked before the first request), a refusal when it does not say its calls by speaker, a
refusal at construction when a required participant is missing; and ``FailedRuns``, the explicit
collector of failed runs that replaced a process-wide list."""
from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field

import pytest
from pydantic import Field
from support.credentials import no_keys  # noqa: F401 (a fixture: missing credentials, requests recorded)

from fsmchat import Agent, ChatContext, Pattern, RoundRobinSwarm, StateGraph
from fsmchat.errors import ConfigError, MissingCredentials
from fsmchat.patterns import FailedRuns, OneParticipant, Participants, PatternConfig
from fsmchat.patterns.runner import PatternRun, fingerprint
from fsmchat.speakers import check_roster


class HostedConfig(PatternConfig):
    agents: Participants = Field(None, title="agent")
    host: OneParticipant
    rounds: int = Field(1, ge=1)


@dataclass
class HostedContext(ChatContext):
    config: HostedConfig = field(kw_only=True)


async def everyone_speaks(ctx: HostedContext) -> None:
    for s in ctx.speakers:
        ctx.post(s.name, await ctx.ask(s, "Your view?"))


class Hosted(Pattern, config=HostedConfig):
    """A pattern whose ``_context`` leaves the roster alone, as the documented example does."""

    def _calls_by_speaker(self):
        return [(s, self.config.rounds) for s in [*(self.config.agents or []), self.config.host]]

    def _compile(self) -> StateGraph:
        g = StateGraph("hosted", context=HostedContext)
        g.state("seed", HostedContext.seed).state("speak", everyone_speaks).final("done", reason="rounds")
        return g.edge("seed", "speak").edge("speak", "done")

    def _context(self, task: str) -> HostedContext:
        speakers = check_roster([*(self.config.agents or []), self.config.host], "Hosted")
        return HostedContext(task, speakers, config=self.config)


def test_the_base_class_sets_the_roster_so_credentials_are_checked_before_the_first_request(no_keys):
    pro, host = Agent("Pro", model="gpt-4o-mini"), Agent("Host", model="gpt-4o-mini")
    chat = Hosted(agents=[pro], host=host)
    assert chat.new_context("Plan it.").stats.roster == [pro, host]  # every speaker of _calls_by_speaker
    result = chat.execute("Plan it.")
    assert isinstance(result.error, MissingCredentials)
    assert result.error.missing == [("Pro", "gpt-4o-mini", ["OPENAI_API_KEY"]),
                                    ("Host", "gpt-4o-mini", ["OPENAI_API_KEY"])]
    assert no_keys.sent == [] and result.calls == 0 and result.path == ["seed", "speak"]


def test_a_roster_the_context_sets_is_kept():
    class OnlyHost(Hosted):
        def _context(self, task: str) -> HostedContext:
            ctx = super()._context(task)
            ctx.stats.roster = [self.config.host]
            return ctx

    host = Agent("Host", model="gpt-4o-mini")
    assert OnlyHost(agents=[Agent("Pro", model="gpt-4o-mini")], host=host).new_context("x").stats.roster == [host]


def test_a_pattern_without_calls_by_speaker_cannot_be_built():
    class Uncounted(Pattern):
        def _compile(self):
            return StateGraph("u").state("a", lambda ctx: None).final("b").edge("a", "b")

        def _context(self, task):
            return ChatContext(task, [])

    with pytest.raises(TypeError, match="abstract method _calls_by_speaker"):
        Uncounted()


def test_a_missing_required_participant_is_refused_at_construction():
    with pytest.raises(ConfigError) as e:
        Hosted(agents=[lambda turn: "yes"])
    assert str(e.value) == "Hosted: host is missing: it is required"
    # the signature says so too: a required field after defaulted ones is keyword-only
    sig = inspect.signature(Hosted)
    assert [(p.name, p.kind.name, p.default is inspect.Parameter.empty) for p in sig.parameters.values()][:3] == [
        ("agents", "POSITIONAL_OR_KEYWORD", False), ("host", "KEYWORD_ONLY", True), ("rounds", "KEYWORD_ONLY", False)]


def crashing(turn):
    raise RuntimeError("the critic crashed")


def test_failed_runs_are_collected_only_while_watching():
    failed = FailedRuns()
    RoundRobinSwarm(agents=[crashing]).execute("Before.")
    with failed.watching():
        bad = RoundRobinSwarm(agents=[crashing]).execute("During.")
        RoundRobinSwarm(agents=[lambda turn: "fine"]).execute("During, fine.")
    RoundRobinSwarm(agents=[crashing]).execute("After.")
    assert failed.results == [bad]
    assert [m.content for m in bad.transcript] == ["During."]


def test_failed_runs_see_a_run_started_inside_a_running_loop():
    """Inside a running loop (Jupyter) ``run`` goes on a worker thread: the watch goes with it."""
    failed = FailedRuns()

    async def in_a_notebook():
        return RoundRobinSwarm(agents=[crashing]).execute("In a loop.")

    with failed.watching():
        result = asyncio.run(in_a_notebook())
    assert failed.results == [result] and result.stop_reason == "error"


def test_two_watches_nest_and_each_sees_its_own_runs():
    outer, inner = FailedRuns(), FailedRuns()
    with outer.watching():
        first = RoundRobinSwarm(agents=[crashing]).execute("Outer.")
        with inner.watching():
            second = RoundRobinSwarm(agents=[crashing]).execute("Inner.")
    assert outer.results == [first] and inner.results == [second]


def test_a_run_is_a_pattern_run_of_the_declaration():
    chat = Hosted(agents=[lambda turn: "yes"], host=lambda turn: "noted")
    assert PatternRun(chat).run_id is None
    assert PatternRun(chat.with_limits(max_message_chars=50)).max_message_chars == 50
    assert fingerprint(chat)["pattern"] == "Hosted"
