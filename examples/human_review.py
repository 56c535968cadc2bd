"""A GroupChat whose winning messages a person reviews before they are posted.

`interrupt_before=["post"]` draws a `before_post` wait state between `select` and `post`: each
turn the run stops there (checkpointed) with the winner's message in `result.pending`, and
`chat.resume(run_id, checkpoint, input=...)` goes on with the reviewer's answer: `Approve()`
posts it, `Edit("...")` posts the reviewer's version, `Reject("why")` drops the turn (the winner
is penalized), a plain str posts the reviewer's own message instead.

On a terminal, `python examples/human_review.py` asks you at each turn; run any other way (the
tests, `make demo`) a scripted reviewer answers: it approves, edits the second message and
rejects the third. `fsmchat run examples/human_review.py` asks on the terminal too, or with
`--no-input` leaves the run waiting and prints the `fsmchat resume` command that answers it.
Offline by default, like every example.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import task  # noqa: E402

from fsmchat import Agent, Approve, Edit, GroupChat, MemoryCheckpointer, Reject  # noqa: E402

TASK = "Draft the three rules our team should follow when shipping AI features."


def build() -> GroupChat:
    return GroupChat(name="Reviewed-Rules", description="Agents propose rules; a person reviews every message",
                     agents=[Agent("Engineer", system_prompt="You care about shipping reliable software."),
                             Agent("Ethicist", system_prompt="You care about fairness and consent."),
                             Agent("Lawyer", system_prompt="You care about regulation and liability.")],
                     max_loops=6, interrupt_before=["post"])


def scripted_reviewer(n: int, pending) -> object:
    """The reviewer when nobody is at a terminal: approve, edit the 2nd message, reject the 3rd."""
    if n == 2:
        return Edit(pending.proposed["content"] + " (Reviewer: and we log every decision.)")
    if n == 3:
        return Reject("repeats an earlier point")
    return Approve()


def main() -> None:
    chat = build()
    checkpoint = MemoryCheckpointer()  # a SqliteCheckpointer("runs.db") lets the answer come days later
    result = chat.execute(task(TASK), checkpoint=checkpoint)
    asked = 0
    while result.waiting:  # the run stopped at before_post: a person answers, the run goes on
        asked += 1
        if sys.stdin.isatty():
            from fsmchat.cli import ask_terminal

            answer = ask_terminal(result.pending)
            if answer is None:  # end of input: the run stays waiting
                break
        else:
            answer = scripted_reviewer(asked, result.pending)
        print(f"[review {asked}] {result.pending.proposed['speaker']}: {answer!r}")
        result = chat.resume(result.run_id, checkpoint, input=answer)
    print()
    for m in result.transcript[1:]:
        print(f"{m.role}: {m.content}")
    print(f"\n-- stopped: {result.stop_reason} after {len(result.transcript)} messages, {asked} reviews, "
          f"{result.calls} model calls; path: {' -> '.join(result.path)}")


if __name__ == "__main__":
    main()
