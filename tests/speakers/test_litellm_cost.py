"""litellm's per-call cost: the per-call work fsmchat switches off in litellm
(``fsmchat.speakers.llm.lean``, written against litellm 1.110.2), pinned so that an upgrade that
moves what it relies on fails here; cost reporting and users' litellm callbacks keep working; and
the Python calls per litellm call, counted in every thread, grow by a bounded number per message.

No network and no key: a local OpenAI-compatible server (tests/support/openai_server.py) and litellm
custom providers. No timing assertions: counts only.
"""
from __future__ import annotations

import asyncio
import gc
import sys
import threading
import time
import weakref
from typing import Any

import pytest

from support.openai_server import DEFAULT_USAGE, OpenAIServer, per_agent, respond

from fsmchat import Agent, GroupChat
from fsmchat.speakers import llm
from fsmchat.speakers.respond import RESPOND_TOOL, RESPOND_TOOL_CHOICE

PRICED = "openai/gpt-4o-mini"  # in litellm's local cost map: litellm prices its responses
UNPRICED = "openai/test-model"  # not in it (a local server's model)
OWN = "fsmchat-costtest"  # a provider registered the way fsmchat registers its own (offline, scripted)
USERS = "costtest-user"  # a provider a user registers with litellm directly


@pytest.fixture(scope="module")
def lm() -> Any:
    lm = llm.get_litellm()

    class Bid(lm.CustomLLM):  # answers at once: what is left is litellm's own work
        async def acompletion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
            msg = {"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "respond", "arguments": '{"score": 0.0, "message": ""}'}}]}
            return lm.ModelResponse(choices=[{"message": msg, "finish_reason": "tool_calls"}],
                                    usage=dict(DEFAULT_USAGE))

    llm.register_provider(OWN, Bid())
    if not any(p.get("provider") == USERS for p in lm.custom_provider_map):
        lm.custom_provider_map.append({"provider": USERS, "custom_handler": Bid()})
    return lm


@pytest.fixture
def server():
    with OpenAIServer(per_agent({}, default=respond(0.0, "")), max_requests=200, max_lifetime=60) as srv:
        yield srv
        srv.assert_clean()


@pytest.fixture
def no_callbacks(lm):
    """litellm's global callback lists emptied for the test (and restored): what other tests
    registered must not be counted or fire here."""
    names = ("callbacks", "success_callback", "_async_success_callback", "failure_callback",
             "_async_failure_callback", "input_callback")
    saved = {n: list(getattr(lm, n)) for n in names}
    for n in names:
        getattr(lm, n).clear()
    yield
    for n in names:
        getattr(lm, n)[:] = saved[n]


def http_agent(srv: OpenAIServer, name: str, model: str = PRICED, **kw: Any) -> Agent:
    return Agent(name, system_prompt=f"You are {name}, a terse planner.", model=model, api_base=srv.api_base,
                 api_key="sk-test", tool_mode="native", num_retries=0, timeout=120, **kw)


def price_of(lm: Any, model: str) -> float:
    """What litellm's cost map says DEFAULT_USAGE costs on ``model``."""
    info = lm.get_model_info(model)
    return (DEFAULT_USAGE["prompt_tokens"] * info["input_cost_per_token"]
            + DEFAULT_USAGE["completion_tokens"] * info["output_cost_per_token"])


# --------------------------------------------------------------------------- the knobs, pinned
def test_litellms_import_is_left_out_of_later_collections_and_new_garbage_is_still_collected(lm):
    # litellm's module namespace (made by its import) is in the collector's permanent generation:
    # no collection walks it again
    assert gc.get_freeze_count() > 100_000
    assert not any(o is vars(lm) for o in gc.get_objects())

    class Node:
        me: Any = None

    made = Node()
    made.me = made  # a reference cycle made after the import
    gone = weakref.ref(made)
    del made
    gc.collect()
    assert gone() is None


def test_fsmchat_gc_freeze_0_freezes_nothing(monkeypatch):
    monkeypatch.setenv(llm.GC_FREEZE_ENV, "0")
    before = gc.get_freeze_count()
    llm.keep_out_of_collections()
    assert gc.get_freeze_count() == before


def test_base64_log_scan_is_off_through_the_module_global_litellm_reads(lm, monkeypatch):
    """litellm shortens long base64 images in the payload it logs by walking and copying every
    request (``truncate_base64_in_messages``, 18% of a call at 1,000 messages) unless
    ``logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING`` is 0, a module global read at call time."""
    from litellm.litellm_core_utils import litellm_logging, logging_utils

    if llm.BASE64_LOG_ENV in __import__("os").environ:
        pytest.skip(f"{llm.BASE64_LOG_ENV} is set in this environment: the user's value wins")
    assert logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING == 0
    image = "data:image/png;base64," + "A" * 5000
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}]
    assert logging_utils.truncate_base64_in_messages(msgs) is msgs  # no walk, no copy
    assert asyncio.run(logging_utils.truncate_base64_in_messages_async(msgs)) is msgs
    # the success handler calls that very function, which reads the global per call
    assert litellm_logging.truncate_base64_in_messages_async is logging_utils.truncate_base64_in_messages_async

    monkeypatch.setattr(logging_utils, "MAX_BASE64_LENGTH_FOR_LOGGING", 64)  # litellm's default
    shortened = logging_utils.truncate_base64_in_messages(msgs)
    assert shortened is not msgs and "truncated" in shortened[0]["content"][0]["image_url"]["url"]
    assert msgs[0]["content"][0]["image_url"]["url"] == image  # a copy: the request itself is untouched


def test_a_users_own_base64_setting_wins(lm, monkeypatch):
    from litellm.litellm_core_utils import logging_utils

    monkeypatch.setenv(llm.BASE64_LOG_ENV, "64")
    monkeypatch.setattr(logging_utils, "MAX_BASE64_LENGTH_FOR_LOGGING", 64)
    llm.lean(lm)
    assert logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING == 64
    monkeypatch.delenv(llm.BASE64_LOG_ENV)
    llm.lean(lm)
    assert logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING == 0


def counting(monkeypatch: Any, owner: Any, name: str) -> list[int]:
    calls = [0]
    inner = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return inner(*args, **kwargs)
    monkeypatch.setattr(owner, name, counted)
    return calls


def test_own_providers_are_priced_free_so_litellm_does_not_search_its_cost_map(lm, monkeypatch, no_callbacks):
    """A response whose ``_hidden_params`` carry ``response_cost`` is not priced again by litellm
    (``Logging.response_cost_calculator`` returns it); fsmchat's own providers cost nothing and
    say so. A user's provider is priced by litellm as before (which also proves the counter sees
    litellm's pricing: an upgrade that renames it fails the second assertion)."""
    priced = counting(monkeypatch, lm, "response_cost_calculator")

    async def one(model: str) -> Any:
        return await llm.acomplete(model, [{"role": "user", "content": "hi"}], agent="Alice", kwargs={},
                                   timeout=10, num_retries=0, stats=llm.CallStats(),
                                   tools=[RESPOND_TOOL], tool_choice=RESPOND_TOOL_CHOICE)
    response = asyncio.run(one(f"{OWN}/x"))
    assert priced[0] == 0
    assert response._hidden_params["response_cost"] == 0.0
    asyncio.run(one(f"{USERS}/x"))
    assert priced[0] >= 1


def test_fsmchat_reports_the_cost_litellm_computed_and_does_not_price_again(lm, server, monkeypatch):
    """fsmchat's ``cost_usd`` is litellm's own per-call price (``_hidden_params["response_cost"]``,
    the figure litellm's callbacks get), not a second ``completion_cost`` per response."""
    server.set_script(per_agent({"Alice": [respond(0.9, "Bring sandwiches."), respond(0.0, "")]},
                                default=respond(0.0, "")))
    again = counting(monkeypatch, lm, "completion_cost")
    result = GroupChat(agents=[http_agent(server, "Alice"), http_agent(server, "Bob")], max_loops=5,
                       threshold=0.5).execute("Plan a picnic.")
    assert result.error is None and result.calls == 4
    assert result.cost_usd == pytest.approx(4 * price_of(lm, PRICED))
    assert result.cost_usd > 0
    assert again[0] == 0


def test_per_agent_litellm_prices_are_what_fsmchat_reports_and_budgets(lm, server):
    """``input_cost_per_token`` / ``output_cost_per_token`` on an Agent price its calls for litellm;
    fsmchat now reports (and budgets) that same figure (it used to price the response again from
    the cost map, which knows nothing of an unlisted model)."""
    per_call = DEFAULT_USAGE["prompt_tokens"] * 1e-3 + DEFAULT_USAGE["completion_tokens"] * 2e-3  # 0.02
    server.set_script(per_agent({}, default=respond(0.9, "More sandwiches.")))
    agents = [http_agent(server, n, UNPRICED, input_cost_per_token=1e-3, output_cost_per_token=2e-3)
              for n in ("Alice", "Bob")]
    result = GroupChat(agents=agents, max_loops=3, threshold=0.5).execute("Plan a picnic.")
    assert result.error is None and result.stop_reason == "max_loops"
    assert result.cost_usd == pytest.approx(result.calls * per_call)

    budget = GroupChat(agents=agents, max_loops=50, threshold=0.5).with_limits(max_cost_usd=0.1)
    capped = budget.execute("Plan a picnic.")
    assert capped.stop_reason == "budget"
    assert {"event": "budget", "limit": "max_cost_usd"} in capped.events
    assert 0.1 <= capped.cost_usd <= 0.1 + 2 * per_call  # a bid round of 2 calls may cross it


def test_a_users_price_still_applies_where_litellm_has_none(lm, server):
    server.set_script(per_agent({}, default=respond(0.0, "")))
    chat = GroupChat(agents=[http_agent(server, "Alice", UNPRICED), http_agent(server, "Bob", UNPRICED)],
                     max_loops=3).with_limits(price_per_1k_tokens=(1.0, 2.0))
    result = chat.execute("Plan a picnic.")
    assert result.error is None and result.calls == 2
    assert result.cost_usd == pytest.approx(2 * (10 * 1.0 + 5 * 2.0) / 1000)


# --------------------------------------------------------------------------- users' callbacks
def test_users_litellm_callbacks_still_fire_with_cost_and_messages(lm, server, no_callbacks):
    """A user's litellm callbacks see every call, over HTTP and through fsmchat's own provider,
    with the request's messages and the cost fsmchat reports: ``litellm.callbacks`` holding a
    ``CustomLogger`` with the async hook, one with only the sync hook (litellm runs it in a worker
    thread) and a plain function, and an ``async def`` added as a success callback. (In litellm
    1.110 a plain function put straight into ``litellm.success_callback`` is called for sync
    ``completion`` only, with or without fsmchat.)"""
    from litellm.integrations.custom_logger import CustomLogger

    seen: dict[str, list[Any]] = {"async logger": [], "sync logger": [], "function": [], "async function": []}

    class AsyncLogger(CustomLogger):
        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            seen["async logger"].append(kwargs)

    class SyncLogger(CustomLogger):
        def log_success_event(self, kwargs, response_obj, start_time, end_time):
            # litellm's sync logging worker may still carry an earlier test's calls (to the
            # unpriced local model) when this test registers: only this test's calls count
            if UNPRICED.split("/")[1] not in str(kwargs.get("model")):
                seen["sync logger"].append(kwargs)

    def function(kwargs, completion_response, start_time, end_time):
        seen["function"].append(kwargs)

    async def async_function(kwargs, completion_response, start_time, end_time):
        seen["async function"].append(kwargs)

    lm.callbacks[:] = [AsyncLogger(), SyncLogger(), function]
    lm.logging_callback_manager.add_litellm_success_callback(async_function)
    server.set_script(per_agent({"Alice": [respond(0.9, "Bring sandwiches."), respond(0.0, "")]},
                                default=respond(0.0, "")))

    async def run(chat: GroupChat) -> Any:
        result = await chat.aexecute("Plan a picnic.")
        hung = time.monotonic() + 300  # a hang guard: the loop ends when the callbacks have all fired
        while min(len(v) for v in seen.values()) < result.calls and time.monotonic() < hung:
            await asyncio.sleep(0.01)  # litellm logs after the call, on its own worker
        return result

    result = asyncio.run(run(GroupChat(agents=[http_agent(server, "Alice"), http_agent(server, "Bob")],
                                       max_loops=5, threshold=0.5)))
    assert result.calls == 4
    assert {k: len(v) for k, v in seen.items()} == {k: 4 for k in seen}
    for kwargs in seen["async logger"]:
        assert kwargs["messages"][0]["role"] == "system"
        assert kwargs["messages"][1] == {"role": "user", "content": "Plan a picnic."}
        assert kwargs["standard_logging_object"]["response_cost"] == pytest.approx(price_of(lm, PRICED))
    logged = sum(k["standard_logging_object"]["response_cost"] for k in seen["async logger"])
    assert logged == pytest.approx(result.cost_usd)

    for v in seen.values():
        v.clear()
    offline = GroupChat(agents=[Agent("Alice", model="offline"), Agent("Bob", model="offline")], max_loops=2)
    result = asyncio.run(run(offline))
    assert result.error is None and result.calls >= 2
    assert {k: len(v) for k, v in seen.items()} == {k: result.calls for k in seen}
    assert all(k["standard_logging_object"]["response_cost"] == 0.0 for k in seen["async logger"])


# --------------------------------------------------------------------------- counted, not timed
class _Counter:
    """Python calls in the event-loop thread and its executor's threads (litellm runs part of
    every call there); the test server's threads are left out."""

    def __init__(self) -> None:
        self.n = 0
        self.on = False
        self.lock = threading.Lock()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and self.on:
            self.n += 1  # += under the GIL; a lost count would only lower the figure

    def thread_hook(self, frame: Any, event: str, arg: Any) -> Any:
        if threading.current_thread().name.startswith("asyncio_"):
            sys.setprofile(self)
            self(frame, event, arg)
        else:
            sys.setprofile(None)


def calls_per_litellm_call(model: str, kwargs: dict[str, Any], n_messages: int, k: int = 3) -> float:
    msgs = [{"role": "system", "content": "You are Alice, a terse planner."},
            {"role": "user", "content": "Plan a picnic for Saturday."}]
    for i in range(n_messages - 1):
        msgs.append({"role": "assistant", "content": f"My point {i}: bring a blanket."} if i % 3 == 0
                    else {"role": "user", "content": f"Bob: message {i}, on where to meet."})
    msgs.append({"role": "user", "content": "You are Alice. Call respond(score, message)."})
    counter = _Counter()

    async def bids(times: int) -> None:
        stats = llm.CallStats()
        for _ in range(times):
            await llm.acomplete(model, msgs, agent="Alice", kwargs=kwargs, timeout=30, num_retries=0, stats=stats,
                                tools=[RESPOND_TOOL], tool_choice=RESPOND_TOOL_CHOICE)

    async def go() -> None:
        await bids(2)  # warm-up: clients, caches
        await asyncio.sleep(0.02)
        counter.on = True
        sys.setprofile(counter)
        try:
            await bids(k)
            await asyncio.sleep(0.02)  # and litellm's logging of those calls
        finally:
            sys.setprofile(None)
            counter.on = False

    threading.setprofile(counter.thread_hook)
    try:
        asyncio.run(go())
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    return counter.n / k


# Measured with litellm 1.110.2 (Python calls per litellm call, lean -> litellm's defaults):
#   HTTP   100 msgs 10,530 -> 12,160; 1,000 msgs 44,130 -> 54,770; +37 -> +47 per message
#   custom 100 msgs  4,420 ->  5,840; 1,000 msgs 14,320 -> 24,740; +11 -> +21 per message
# The growth left is litellm's own request validation and OpenAI transformation, which no setting
# switches off (validate_and_fix_openai_messages, the PDF-part check, thought-signature removal,
# the OpenAI message transform); the base64 scan alone adds 10 calls per message.
PER_MESSAGE = {"http": 42, "custom": 14}
AT_100 = {"http": 12_000, "custom": 5_000}


@pytest.mark.parametrize("path", ["http", "custom"])
def test_python_calls_per_litellm_call_grow_by_a_bounded_amount_per_message(lm, server, no_callbacks, path):
    model, kwargs = ((PRICED, {"api_base": server.api_base, "api_key": "sk-test"}) if path == "http"
                     else (f"{OWN}/x", {}))
    at_100 = calls_per_litellm_call(model, kwargs, 100)
    at_1000 = calls_per_litellm_call(model, kwargs, 1000)
    per_message = (at_1000 - at_100) / 900
    assert per_message <= PER_MESSAGE[path], (
        f"{path}: {at_100:,.0f} Python calls per litellm call at 100 messages, {at_1000:,.0f} at 1,000: "
        f"{per_message:.1f} more per message (bound {PER_MESSAGE[path]}). Is litellm's base64 log scan back "
        "on (fsmchat.speakers.llm.lean), or did a litellm upgrade add per-message work?")
    assert at_100 <= AT_100[path], (f"{path}: {at_100:,.0f} Python calls per litellm call at 100 messages "
                                    f"(bound {AT_100[path]:,})")
