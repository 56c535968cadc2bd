"""Property-based tests (hypothesis) of the engine and of GroupChat's selection rules."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsmchat import Bid, GroupChat, StateGraph, run
from fsmchat.testing import assert_trace_is_path

SCORES = st.sampled_from([0.0, 0.2, 0.3, 0.49, 0.5, 0.51, 0.6, 0.8, 0.8, 0.9, 1.0])
MESSAGES = st.sampled_from(["", "  ", "x"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_agents=st.integers(2, 4), max_loops=st.integers(1, 7), threshold=st.sampled_from([0.0, 0.3, 0.5, 0.8]),
       penalty=st.sampled_from([0.0, 0.3, 0.5]), window=st.integers(1, 3), data=st.data())  # 0: refused
def test_group_chat_selection_matches_the_rules(n_agents, max_loops, threshold, penalty, window, data):
    names = [f"g{i}" for i in range(n_agents)]
    turns = max_loops  # at most max_loops - 1 bidding turns happen; one spare
    script = {n: [(data.draw(SCORES), data.draw(MESSAGES)) for _ in range(turns)] for n in names}
    calls = {n: 0 for n in names}

    def agent(name):
        def fn(turn):
            k = calls[name]
            calls[name] += 1
            score, msg = script[name][k]
            return Bid(score, msg if msg != "x" else f"{name} says {k}")
        fn.__name__ = name
        return fn

    chat = GroupChat(agents=[agent(n) for n in names], max_loops=max_loops, threshold=threshold,
                     recency_penalty=penalty, recency_window=window)
    r = chat.execute("topic")
    assert_trace_is_path(chat.graph, r)

    # an independent oracle of docs/semantics.md
    posts, recent, stop, t = [], [], None, 0
    while True:
        if 1 + len(posts) >= max_loops:
            stop = "max_loops"
            break
        best, best_name = threshold, None
        for n in names:
            score, msg = script[n][t]
            if msg != "x":
                continue
            adj = score - penalty if n in recent[-max(1, window):] else score
            if adj > best:
                best, best_name = adj, n
        if best_name is None:
            stop = "lull"
            break
        posts.append(f"{best_name} says {t}")
        recent.append(best_name)
        t += 1
    assert [m.content for m in r.transcript[1:]] == posts
    assert r.stop_reason == stop
    assert len(posts) <= max_loops - 1
    assert r.path.count("post") == len(posts) and r.path.count("select") == r.path.count("bid")
    assert sum(calls.values()) == n_agents * (len(posts) + (1 if stop == "lull" else 0))


@settings(max_examples=40, deadline=None)
@given(limits=st.lists(st.integers(0, 6), min_size=1, max_size=4))
def test_engine_nested_loops_run_exactly_their_bounds(limits):
    """A chain of counting loops: each runs `limit` times (at least once), the trace is a path."""
    g = StateGraph("chain")
    for i, lim in enumerate(limits):
        def work(ctx, i=i):
            ctx[i] = ctx.get(i, 0) + 1

        def more(ctx, i=i, lim=lim):
            return ctx[i] < lim

        g.state(f"s{i}", work)
    g.final("end")
    for i, lim in enumerate(limits):
        nxt = f"s{i + 1}" if i + 1 < len(limits) else "end"
        g.edge(f"s{i}", f"s{i}", when=lambda ctx, i=i, lim=lim: ctx[i] < lim, label="again")
        g.edge(f"s{i}", nxt)
    ctx: dict = {}
    r = run(g, ctx)
    assert_trace_is_path(g, r)
    assert [ctx[i] for i in range(len(limits))] == [max(1, lim) for lim in limits]
    assert len(r.path) == sum(max(1, lim) for lim in limits) + 1 and r.stop_reason == "next"
