"""``fsmchat runs``, ``fsmchat history`` and ``fsmchat fork``: time travel over a checkpoint store."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Protocol

from ..common.masking import redact_data
from ..models import shorten
from ..store.checkpoint import SqliteCheckpointer
from ..store.statelog import RunLog, history_of
from ..store.timetravel import fork
from ..ui.store import OpenedStore, is_dsn, open_checkpointer
from .run import parse_vars


class Subcommands(Protocol):
    """What ``ArgumentParser.add_subparsers()`` returns, as the commands here add theirs."""

    def add_parser(self, name: str, *, help: str | None = ...,
                   description: str | None = ...) -> argparse.ArgumentParser: ...


# ---- runs, history, fork: time travel over a checkpoint store ----
def _open_store(path: str, write: bool = False) -> OpenedStore:
    """The SQLite store at ``path`` (never created here: a missing file is an error), or the
    PostgreSQL store a ``postgresql://`` URI names."""
    if is_dsn(path):
        return open_checkpointer(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint store at {path} (`fsmchat run TARGET --checkpoint {path}` writes one)")
    return SqliteCheckpointer(path, read_only=None if write else True)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "?"


def runs_command(args: argparse.Namespace) -> int:
    runs = _open_store(args.db).list_runs()
    if args.json:
        print(json.dumps(redact_data([r.to_dict() for r in runs]), indent=2, ensure_ascii=False))
        return 0
    if not runs:
        print(f"{args.db}: no runs")
        return 0
    rows = [(r.run_id, r.pattern or "?", r.status + (f" ({r.stop_reason})" if r.status == "finished" else ""),
             str(r.messages), _when(r.created),
             shorten(r.task or "", 50) + (f"  [fork of {r.forked_from.get('run_id')} at step "
                                                f"{r.forked_from.get('step')}]" if r.forked_from else ""))
            for r in runs]
    head = ("RUN ID", "PATTERN", "STATUS", "MESSAGES", "STARTED", "TASK")
    widths = [max(len(x[i]) for x in [head, *rows]) for i in range(5)]
    for row in [head, *rows]:
        print("  ".join(c.ljust(w) if i != 3 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) +
              "  " + row[5])
    return 0


def _run_log(store: OpenedStore, run_id: str) -> RunLog:
    try:
        return store.log(run_id)
    except KeyError:
        known = [r.run_id for r in store.list_runs()][:5]
        where = store.path if isinstance(store, SqliteCheckpointer) else store.where
        raise ValueError(f"no run {run_id!r} in {where}" + (f"; newest runs: {', '.join(known)} (`fsmchat runs "
                                                               f"--db {where}` lists them)" if known else
                                                                    "; it has no runs")) from None


def history_command(args: argparse.Namespace) -> int:
    log = _run_log(_open_store(args.db), args.run_id)
    steps = history_of(log)
    if args.json:
        print(json.dumps([{"step": s.step, "state": s.state, "trigger": s.trigger, "dest": s.dest, "t": s.t,
                           "messages": s.message_count, "calls": s.calls, "usage": s.usage, "stored": s.stored}
                          for s in steps], indent=2, ensure_ascii=False, default=str))
        return 0
    origin = log.meta.get("forked_from")
    print(f"run {log.run_id}: {log.meta.get('pattern', '?')}, {len(steps)} steps, "
          f"{'stop reason ' + log.stop_reason if log.stop_reason else 'not ended'}" +
          (f", forked from {origin.get('run_id')} at step {origin.get('step')}" if isinstance(origin, dict) else ""))
    for s in steps:
        print(s.line())
    return 0


def fork_command(args: argparse.Namespace) -> int:
    store = _open_store(args.db, write=True)
    factory = _run_log(store, args.run_id).meta.get("factory")
    replace = {}
    for i, text in args.replace_message or []:
        if not i.lstrip("-").isdigit():
            raise ValueError(f"--replace-message {i!r}: I must be a message index (0 is the task), then the new text")
        replace[int(i)] = text
    edit = {"replace": replace,
            "drop": list(args.drop_message or []),
            "variables": parse_vars(args.set or []), "limits": parse_vars(args.limit or [], "--limit")}
    new_id = fork(args.run_id, args.at, store, {k: v for k, v in edit.items() if v})
    print(new_id)
    # the run's own pattern, named as `fsmchat run` stored it: a target the person gives is loaded as is
    target = ["--target", factory] if isinstance(factory, str) and factory else []
    print(f"forked {args.run_id} at step {args.at}; continue it with: "
          f"{shlex.join(['fsmchat', 'resume', new_id, '--db', args.db, *target])}" +
          ("" if target else " --target TARGET (the pattern that ran: it was checkpointed without a factory)"),
          file=sys.stderr)
    return 0


def _store_args(p: argparse.ArgumentParser, what: str, fn: Callable[[argparse.Namespace], int]) -> None:
    p.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store, or a PostgreSQL URI "
                   "(postgresql://...)")
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")
    p.set_defaults(fn=fn)


def add_time_travel(sub: Subcommands) -> None:
    """The ``runs``, ``history`` and ``fork`` subcommands."""
    ru = sub.add_parser("runs", help="list the runs in a checkpoint store, newest first",
                        description="List the runs of a SQLite checkpoint store (branch lanes left out), newest first: "
                        "run id, pattern, status (finished with its stop reason, waiting, failed, cancelled, "
                        "unfinished), messages, when it started, task.")
    _store_args(ru, "the list", runs_command)

    hi = sub.add_parser("history", help="list the steps of a checkpointed run (what `fork --at K` takes)",
                        description="One line per step of a checkpointed run: its number, the state, the transition "
                        "taken, the messages, model calls and tokens so far, and whether its working state is stored "
                        "on its own (a carried step's, e.g. GroupChat's bid or select with the default commit=\"turn\", is "
                        "committed with the next one; a fork there runs it again).")
    hi.add_argument("run_id", metavar="RUN", help="the run id (`fsmchat runs` lists them)")
    _store_args(hi, "the steps", history_command)

    fo = sub.add_parser("fork", help="start a new run from step K of a checkpointed run, optionally edited",
                        description="Write a new run that starts where RUN was after step K (its messages, state "
                        "and branch lanes up to there), edited as asked; print its run id. The original run is not "
                        "changed. Message indexes count from 0 (the task). Continue the new run with "
                        "`fsmchat resume NEW --db PATH`.")
    fo.add_argument("run_id", metavar="RUN", help="the run to fork (`fsmchat runs` lists them)")
    fo.add_argument("--at", type=int, required=True, metavar="K", help="the step to start from (`fsmchat history "
                    "RUN` numbers them)")
    fo.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store (the fork is written there)")
    fo.add_argument("--drop-message", type=int, action="append", metavar="I", help="leave message I out (repeatable)")
    fo.add_argument("--replace-message", nargs=2, action="append", metavar=("I", "TEXT"),
                    help="replace the text of message I (repeatable)")
    fo.add_argument("--set", action="append", metavar="VAR=VALUE", help="change a flow variable (VALUE as JSON, else "
                    "text; repeatable)")
    fo.add_argument("--limit", action="append", metavar="FIELD=VALUE", help="change a limit of the run, e.g. "
                    "max_model_calls=40 (repeatable); applied when it is resumed")
    fo.set_defaults(fn=fork_command)


