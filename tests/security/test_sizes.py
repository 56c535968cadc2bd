"""Every input has a size and a character set, checked before any model call: run ids and
speakers' names (which become parts of run ids, branch lanes and state names)."""
import pytest

from fsmchat import RoundRobinSwarm
from fsmchat.errors import ConfigError
from fsmchat.testing import ScriptedModel


def test_a_run_id_has_at_most_200_characters():
    m = ScriptedModel({"a": ["x"]})
    rr = RoundRobinSwarm(agents=[m.agent("a")], max_loops=1)
    with pytest.raises(ConfigError, match=r"RoundRobinSwarm: run_id='rrrr.* is invalid: one line of printable "
                                          r"characters other than '/', ':' and '\|' .*at most 200 of them; it has 5,000"):
        rr.execute("t", run_id="r" * 5000)
    assert m.calls() == 0
    assert rr.execute("t", run_id="r" * 200).ok  # the limit itself is allowed


@pytest.mark.parametrize("name, problem", [
    ("n" * 65, "a name has at most 64 characters; it has 65"),
    ("Dev/Ops", "a name holds none of '/', ':' and '|' (they separate run ids, branch lanes and state names); "
                "it holds '/'"),
    ("a:b", "a name holds none of '/', ':' and '|' (they separate run ids, branch lanes and state names); it holds ':'"),
    ("x|y", "a name holds none of '/', ':' and '|' (they separate run ids, branch lanes and state names); it holds '|'"),
])
def test_a_speakers_name_is_short_and_holds_no_separator(name, problem):
    m = ScriptedModel({})
    with pytest.raises(ConfigError) as e:
        m.agent(name)
    assert str(e.value) == f"Agent: name={name!r} is invalid: {problem}"
    assert m.agent("n" * 64).name == "n" * 64
