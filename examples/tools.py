"""A panel whose experts use tools: a calculator, a lookup in the team's notes, and a publishing
step a person approves.

Each agent carries plain Python functions (`Agent(tools=[fn])`); their JSON schemas come from the
signatures and docstrings. The panel is a `Discussion` of an Analyst (with `calculate`) and a
Researcher (with `find_study`), then a Chair whose `publish_decision` tool is
`Tool(fn, approval=True)`: the run stops at the drawn `approve_chair` state with the call's name and
arguments, and `resume(..., input=Approve())` runs it (`Edit(arguments={...})` changes the arguments,
`Reject(reason)` tells the chair why not). Each tool round is a state of the graph
(`turn -[tool_calls]-> tools_turn -> turn`), so every call's result is checkpointed before the next
model call. Offline by default: the built-in model calls a tool when its prompt asks for what the
tool's name or description offers.
"""
import ast
import operator
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import task  # noqa: E402

from fsmchat import Agent, AgentFlow, Approve, Discussion, MemoryCheckpointer, Reject, Task, Tool  # noqa: E402

TASK = ("Should our 120-person team try a four-day week? Calculate 120 * 8 * 4 hours against 120 * 8 * 5, "
        "and look up what the pilot study found.")

NOTES = {"pilot": "the 2024 pilot study found output held steady and sick days fell by a third",
         "study": "the 2024 pilot study found output held steady and sick days fell by a third"}
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
PUBLISHED: list[str] = []


def calculate(expression: str) -> float:
    """Calculate an arithmetic expression such as 120 * 8 * 4 (+, -, *, / and parentheses).

    Args:
        expression: The arithmetic to evaluate.
    """
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")
    return value(ast.parse(expression, mode="eval").body)


def find_study(topic: str) -> str:
    """What a study or pilot found, from the research notes.

    Args:
        topic: What to look up.
    """
    return NOTES.get(topic.lower(), NOTES["study"])


def publish_decision(summary: str) -> str:
    """Publish the panel's decision to the team channel.

    Args:
        summary: The decision, one or two sentences.
    """
    PUBLISHED.append(summary)
    return "published to #team"


def build() -> AgentFlow:
    analyst = Agent("Analyst", system_prompt="You analyze costs and numbers.", tools=[calculate])
    researcher = Agent("Researcher", system_prompt="You research what studies found.", tools=[find_study])
    chair = Agent("Chair", system_prompt="You chair the panel and decide.",
                  tools=[Tool(publish_decision, approval=True)])
    panel = Discussion([analyst, researcher], rounds=1, name="panel")
    decide = Task(agent=chair, name="chair",
                  action="{{input}}\n\nThe panel said:\n{{discussion_transcript}}\n\nPublish your decision.")
    return AgentFlow(name="tools_panel", steps=[panel, decide])


def main() -> None:
    flow = build()
    store = MemoryCheckpointer()  # a SqliteCheckpointer("runs.db") lets the approval come days later
    result = flow.execute(task(TASK), checkpoint=store)
    while result.waiting:  # the chair asked to publish: a person decides
        p = result.pending
        print(f"[approval] {p.prompt}")
        answer = Approve() if p.proposed["tool"] == "publish_decision" else Reject("not now")
        print(f"[approval] -> {answer!r}")
        result = flow.resume(result.run_id, store, input=answer)
    for m in result.transcript:
        print(f"{m.role}: {m.content}")
        for call in m.tool_calls:
            print(f"    tool {call.name}({call.arguments}) -> {call.result or call.error} [{call.status}]")
    print(f"\n-- stopped: {result.stop_reason}; published: {PUBLISHED}; {result.calls} model calls "
          f"(worst case {flow.max_calls()}); path: {' -> '.join(result.path)}")


if __name__ == "__main__":
    main()
