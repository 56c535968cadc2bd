"""An agent's function tools travel in a config by import path (``"module:qualname"``) and load back
under the trust rules; a lambda, a closure or a bound method is refused with what is allowed."""
import pytest

from fsmchat import RoundRobinSwarm, Tool, UntrustedReference, from_config
from fsmchat.testing import ScriptedModel

ORDERS: list[str] = []


def place_order(item: str, quantity: int = 1) -> str:
    """Place an order.

    Args:
        item: What to order.
        quantity: How many.
    """
    ORDERS.append(f"{quantity} x {item}")
    return "ordered"


class Shop:
    def sell(self, item: str) -> str:
        """Sell an item."""
        return item


def swarm(*tools):
    m = ScriptedModel({"a": [], "b": []})
    return RoundRobinSwarm(agents=[m.agent("a", tools=list(tools)), m.agent("b")])


def test_a_function_tool_is_written_by_import_path_with_only_its_set_options_and_loads_back():
    cfg = swarm(place_order, Tool(place_order, name="order", approval=True, timeout_s=5)).to_config()
    entries = cfg.model_dump()["agents"][0]["tools"]
    assert entries == [{"type": "tool", "ref": "test_tools_config:place_order"},
                       {"type": "tool", "ref": "test_tools_config:place_order", "name": "order", "approval": True,
                        "timeout_s": 5}]
    with pytest.raises(UntrustedReference, match="module 'test_tools_config' is not allowed"):
        from_config(cfg.model_dump())
    built = from_config(cfg.model_dump(), allow=["test_tools_config"])
    plain, named = built.agents[0].tools
    assert (plain.fn, plain.name, plain.approval) == (place_order, "place_order", False)
    assert (named.fn, named.name, named.approval, named.idempotent, named.timeout_s) == \
        (place_order, "order", True, False, 5)
    assert named.spec()["function"]["parameters"] == plain.spec()["function"]["parameters"]
    assert built.to_config().model_dump() == cfg.model_dump()


def test_a_tool_without_a_function_travels_as_its_schema():
    schema = Tool(None, name="lookup", description="Look up.", parameters={"type": "object", "properties": {}})
    [entry] = swarm(schema).to_config().model_dump()["agents"][0]["tools"]
    assert entry == {"type": "function", "function": {"name": "lookup", "description": "Look up.",
                                                      "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("fn, says", [
    (lambda item: item, "is a lambda, which cannot be shipped in a config (it has no import path); define it as a "
                        "function at module level"),
    (Shop().sell, "cannot be shipped in a config: only module-level functions travel, by import path"),
])
def test_a_lambda_or_a_bound_method_tool_is_refused_saying_what_is_allowed(fn, says):
    with pytest.raises(TypeError, match="agent 'a' tool ") as err:
        swarm(Tool(fn, name="t")).to_config()
    assert says in str(err.value)


def test_a_closure_tool_is_refused_saying_what_is_allowed():
    def local(item: str) -> str:
        """Local."""
        return item

    with pytest.raises(TypeError, match=r"agent 'a' tool 'local': .*local is defined inside a function \(a closure\)"):
        swarm(local).to_config()


def test_a_tool_entry_with_an_unknown_option_is_refused():
    cfg = swarm(place_order).to_config().model_dump()
    cfg["agents"][0]["tools"][0]["retries"] = 3
    with pytest.raises(ValueError, match="unknown \\['retries'\\]"):
        from_config(cfg, allow=["test_tools_config"])


def log_all(*args: str) -> str:
    """Log every argument."""
    return " ".join(args)


def test_a_function_whose_schema_was_given_travels_with_its_name_description_and_schema():
    params = {"type": "object", "properties": {"line": {"type": "string"}}, "required": ["line"]}
    tool = Tool(log_all, parameters=params)
    [entry] = swarm(tool).to_config().model_dump()["agents"][0]["tools"]
    assert entry == {"type": "tool", "ref": "test_tools_config:log_all", "name": "log_all",
                     "description": "Log every argument.", "parameters": params}
    [built] = from_config(swarm(tool).to_config(), allow=["test_tools_config"]).agents[0].tools
    assert (built.fn, built.parameters) == (log_all, params)
