"""``fsmchat run`` and ``fsmchat resume``: a pattern live on the terminal, people answering on it, and
``fsmchat eval``."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import runpy
import shlex
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Coroutine, Iterator, TypedDict

from .. import evals
from ..checks import check_run_id
from ..engine import run_sync
from ..common.masking import redact, redact_chain, redact_data
from ..errors import bad_value
from ..models import BidDelta, Message, RunResult, StopReason, StreamRetry, TokenDelta, TraceEvent
from ..patterns.base import FailedRuns, Pattern
from ..patterns.group_chat import BIDS
from ..speakers import llm
from ..speakers.human import Approve, Edit, Input, InputNotAllowed, Pending, Reject, check_input, waiting_for
from ..store.checkpoint import Checkpointer, SqliteCheckpointer
from ..targets import BUILD, defines_build, load_target_with_module, split_target
from ..trust import Trust, UntrustedReference, is_file_ref
from ..ui import write_report
from ..ui.store import OpenedStore, is_dsn, open_checkpointer
from .live import LiveRun, summary


TARGET_HELP = ("MODULE:ATTR (e.g. mychat:chat, found from the current directory), path/file.py:ATTR, "
               f"or path/file.py (its top-level {BUILD}() function)")

API_BASE_HELP = ("send every model-backed agent without an endpoint of its own to this OpenAI-compatible server, "
                 "e.g. http://127.0.0.1:8000/v1 with --model openai/NAME (sets FSMCHAT_API_BASE; no API key needed)")


# ---- run ----
def _model_flags(args: argparse.Namespace) -> list[str]:
    """``--model``/``--api-base`` as given: a printed resume command rebuilds the run's agents the same way."""
    return [x for flag, value in (("--model", args.model), ("--api-base", args.api_base)) if value
            for x in (flag, value)]


def _use_api_base(args: argparse.Namespace) -> None:
    """``--api-base URL``: the endpoint of every model-backed agent without one of its own."""
    if args.api_base is None:
        return
    if not args.api_base.startswith(("http://", "https://")):
        raise ValueError(f"--api-base {args.api_base!r} is invalid: the URL of an OpenAI-compatible server, "
                         "e.g. http://127.0.0.1:8000/v1")
    os.environ[llm.API_BASE_ENV] = args.api_base


def run_command(args: argparse.Namespace) -> int:
    if args.model:
        os.environ["FSMCHAT_MODEL"] = args.model
    _use_api_base(args)
    if args.task:
        os.environ["FSMCHAT_TASK"] = args.task
    where, attr = split_target(args.target)
    if attr is None and not Path(where).is_file():
        print(f"fsmchat run: no such file: {where}", file=sys.stderr)
        return 2
    pattern, module = _pattern_of(args.target, where, attr)
    if pattern is None:  # a plain script (no build() returning a pattern): run it as __main__
        return _run_script(Path(where), args)
    task = args.task or getattr(module, "TASK", None)
    if not isinstance(task, str) or not task.strip():
        file = getattr(module, "__file__", None)
        print(f"fsmchat run: no task for {args.target}: pass --task TEXT (or define TASK = \"...\" in "
              f"{Path(file).name if file else getattr(module, '__name__', '')})", file=sys.stderr)
        return 2
    return _run_pattern(pattern, task, args)


def _pattern_of(spec: str, where: str, attr: str | None) -> tuple[Pattern | None, ModuleType | None]:
    """(the pattern ``spec`` names, its module), or (None, None) for a script to run as ``__main__``."""
    if attr is None and not defines_build(Path(where)):
        return None, None
    obj, module = load_target_with_module(spec)
    made = obj() if callable(obj) and not isinstance(obj, Pattern) else obj
    if isinstance(made, Pattern):
        return made, module
    if attr is None:  # build() drew a graph (e.g. a hub channel's): the script itself is the run
        return None, None
    raise TypeError(f"{spec} is a {type(made).__name__}, not a pattern (GroupChat, AgentFlow, ...) or a "
                    "zero-argument factory of one")


DEFAULT_STORE = ".fsmchat/runs.db"  # where `fsmchat run` checkpoints a run that may wait for a person
EXIT_WAITING = 3  # the run stopped for a person and waits (resume it with `fsmchat resume`)
EXIT_DEADLINE = 4  # the run was cut by its deadline (deadline_s, --deadline): it did not finish its job
EXIT_BUDGET = 5  # the run stopped at a budget (max_model_calls, max_tokens, max_cost_usd, --max-calls)
LIMIT_EXITS: dict[str, tuple[int, str]] = {StopReason.DEADLINE: (EXIT_DEADLINE, "its deadline (deadline_s, --deadline)"),
               StopReason.BUDGET: (EXIT_BUDGET, "a budget (max_model_calls/--max-calls, max_tokens, max_cost_usd)")}
EXIT_CODES = (f"Exit codes: 0 finished ok, 1 failed, 2 bad input (nothing run), {EXIT_WAITING} waiting for a person, "
              f"{EXIT_DEADLINE} stopped by the deadline, {EXIT_BUDGET} stopped by a budget, 130 interrupted (Ctrl-C).")


def _run_pattern(pattern: Pattern, task: str, args: argparse.Namespace) -> int:
    if args.report and not Path(args.report).resolve().parent.is_dir():
        print(f"fsmchat run: --report {args.report}: its folder does not exist (nothing was run)", file=sys.stderr)
        return 2
    limits = {k: v for k, v in (("max_model_calls", args.max_calls), ("deadline_s", args.deadline)) if v is not None}
    if limits:
        current = pattern.limits.model_dump(exclude_defaults=True) if pattern.limits is not None else {}
        pattern.with_limits(**{**current, **limits})
    if pattern.factory is None:  # so `fsmchat resume RUN` can rebuild it (under the trust rules)
        where, attr = split_target(args.target)
        pattern.factory = f"{Path(where).resolve()}:{attr or BUILD}" if where.endswith(".py") else args.target
    with contextlib.ExitStack() as stack:
        store = args.checkpoint or (DEFAULT_STORE if pattern.waits_for_people else None)
        shown = store is not None
        if args.report and not store:  # a report needs the run in a store: a temporary one, deleted afterwards
            store = str(Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fsmchat-run-"))) / "run.db")
        checkpoint = None
        if store:
            checkpoint = _store(store, create=True)
            stack.callback(checkpoint.close)
        if args.commit and checkpoint is None:
            print(f"fsmchat run: --commit {args.commit} says how a checkpointed run commits its steps; pass "
                  "--checkpoint PATH too (nothing was run)", file=sys.stderr)
            return 2
        mode = {"commit": args.commit} if args.commit else {}
        return _follow(pattern, lambda hooks: pattern.aexecute(task, checkpoint=checkpoint, **mode, **hooks), checkpoint,
                       store, args, ["--target", args.target, *_model_flags(args)], shown)


def _store(path: str, create: bool = False) -> OpenedStore:
    if is_dsn(path):
        return open_checkpointer(path)
    if create:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    elif not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint store at {path}")
    return SqliteCheckpointer(path)


class _Hooks(TypedDict):
    observers: list[Callable[[TraceEvent], None]]
    on_message: list[Callable[[Message], None]]
    on_start: list[Callable[[object], None]]


class RunHooks(_Hooks, total=False):
    """The run keywords ``fsmchat run`` and ``fsmchat resume`` feed their ``LiveRun`` by."""

    on_token: list[Callable[[TokenDelta | BidDelta | StreamRetry], None]]


@contextlib.contextmanager
def showing_bids(view: LiveRun) -> Iterator[LiveRun]:
    """While ``view`` streams, the GroupChat bids of the runs started in this block are handed to it
    as each bidder's call returns (``group_chat.BIDS`` = ``view.on_bid``), before the round closes."""
    token = BIDS.set(view.on_bid) if view.tokens and view.bids and view.messages else None
    try:
        yield view
    finally:
        if token is not None:
            BIDS.reset(token)


def _follow(pattern: Any, start: Callable[[RunHooks], Coroutine[object, object, RunResult]],
            checkpoint: Checkpointer | None, store: str | None, args: argparse.Namespace,
            how: list[str], shown: bool = True) -> int:
    """Run ``start`` live (``pattern``: a ``Pattern``, or what a stored factory built, which has a
    pattern's run API); while the run waits for a person and stdin is a terminal (and not
    ``--no-input``), ask there and resume with the answer. Then report and pick the exit code."""
    started = time.monotonic()
    interactive = not args.no_input and sys.stdin.isatty()
    while True:
        view = LiveRun(messages=not (args.quiet or args.json), status=False if args.quiet else None,
                       label=getattr(pattern, "name", "") or type(pattern).__name__,
                       tokens=False if getattr(args, "no_stream", False) else None)
        hooks: RunHooks = {"observers": [view.on_event], "on_message": [view.on_message], "on_start": [view.on_start]}
        if view.tokens:
            hooks["on_token"] = [view.on_token]
        try:
            with view, showing_bids(view):
                result = run_sync(lambda: start(hooks))
        except KeyboardInterrupt:
            print(f"fsmchat {args.cmd}: interrupted", file=sys.stderr)
            return 130
        answer = ask_terminal(result.pending) if result.waiting and interactive else None
        if answer is None:
            break
        start = (lambda run_id, given: lambda hooks: pattern.aresume(run_id, checkpoint, input=given, **hooks))(
            result.run_id, answer)
    elapsed = time.monotonic() - started
    if args.json:
        print(json.dumps(redact_data(result.to_dict()), indent=2, ensure_ascii=False))
    elif args.quiet:
        if result.ok and not result.waiting:
            out = result.output
            print(out if isinstance(out, str) else json.dumps(out, indent=2, ensure_ascii=False, default=str))
    else:
        try:
            worst = pattern.max_calls()
        except (ValueError, TypeError):  # a loop over a list only known at run time has no bound
            worst = None
        print(f"\n{summary(result, elapsed, worst)}", flush=True)
    if shown and checkpoint is not None:
        print(f"fsmchat {args.cmd}: run id {result.run_id} checkpointed in {store}", file=sys.stderr)
    if getattr(args, "report", None) and store is not None and result.run_id is not None:
        print(f"fsmchat {args.cmd}: report written to {write_report(store, result.run_id, args.report)}",
              file=sys.stderr)
    if result.waiting:
        print(waiting_note(result.pending, result.run_id, store or "", how), file=sys.stderr)
        return EXIT_WAITING
    if not result.ok:
        print(f"fsmchat {args.cmd}: {getattr(args, 'target', None) or result.run_id} failed (stop reason "
              f"{result.stop_reason!r}): {said(result.error)}", file=sys.stderr)
        return 1
    if result.stop_reason in LIMIT_EXITS:
        code, limit = LIMIT_EXITS[result.stop_reason]
        print(f"fsmchat {args.cmd}: the run stopped at {limit} before it finished (stop reason "
              f"{result.stop_reason!r}); exit code {code}", file=sys.stderr)
        return code
    return 0


# ---- people in the loop on the terminal ----
COMMANDS = {"approve": "/approve", "edit": "/edit TEXT", "reject": "/reject [REASON]", "say": "TEXT"}
FLAGS = {"approve": "--approve", "edit": "--edit TEXT", "reject": "--reject REASON", "say": "--input TEXT"}


def describe(pending: Pending) -> list[str]:
    """What a waiting run asks, as lines for the terminal."""
    who = pending.person or "a person"
    lines = [f"-- waiting for {who} at {pending.state} ({pending.kind}): {pending.prompt}"]
    proposed = pending.proposed or {}
    if "content" in proposed:
        lines.append(f"   proposed by {proposed.get('speaker', '?')}: {proposed['content']}")
    elif "last" in proposed:
        lines.append(f"   latest message, {proposed['last']['role']}: {proposed['last']['content']}")
    return lines


def ask_terminal(pending: Pending) -> Input | None:
    """Ask on the terminal until a valid answer comes (None on end of input: the run stays waiting)."""
    err = sys.stderr
    print("\n".join(describe(pending)), file=err)
    edit = "/edit NAME=VALUE ..." if pending.edit in ("vars", "arguments") else COMMANDS["edit"]
    for kind, effect in pending.allowed.items():
        print(f"   {edit if kind == 'edit' else COMMANDS[kind]:<18} {effect}", file=err)
    while True:
        err.write("> ")
        err.flush()
        raw = sys.stdin.readline()
        if not raw:  # end of input
            return None
        line = raw.strip()
        if not line:
            continue
        head, _, rest = line.partition(" ")
        try:
            if head in ("/approve", "/a"):
                given: Input | str = Approve()
            elif head in ("/reject", "/r"):
                given = Reject(rest.strip())
            elif head in ("/edit", "/e"):
                given = Edit(vars=parse_vars(rest.split())) if pending.edit == "vars" else \
                    Edit(arguments=parse_vars(rest.split(), "/edit")) if pending.edit == "arguments" else Edit(rest.strip())
            elif line.startswith("/"):
                print(f"   unknown command {head!r}; one of: " + ", ".join(COMMANDS[k] for k in pending.allowed),
                      file=err)
                continue
            else:
                given = line
            return check_input(pending, given)
        except (InputNotAllowed, ValueError) as exc:
            print(f"   {exc}", file=err)


def parse_vars(items: list[str], flag: str = "--set") -> dict[str, object]:
    """``NAME=VALUE`` pairs (VALUE as JSON when it parses, else as text); ``flag`` names the option."""
    out: dict[str, object] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"{flag} {item!r} is not NAME=VALUE")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def set_hint(pending: Pending) -> str:
    """The ``--set`` of an answer that edits: the waiting tool call's own arguments with their
    proposed values (``--set summary='...'``: change what you want, the rest are kept), else
    ``--set NAME=VALUE`` (a flow's variables)."""
    proposed = pending.proposed if isinstance(pending.proposed, dict) else {}
    arguments = proposed.get("arguments") if pending.edit == "arguments" else None
    if not isinstance(arguments, dict) or not arguments:
        return "--set NAME=VALUE"
    return "--set " + " ".join(shlex.quote(f"{k}={v if isinstance(v, str) else json.dumps(v)}")
                               for k, v in arguments.items())


def waiting_note(pending: Pending, run_id: str | None, store: str, how: list[str]) -> str:
    """Why the run stopped and the exact command that answers it."""
    base = ["fsmchat", "resume", str(run_id), "--db", store, *how]
    lines = describe(pending) + [f"fsmchat: the run waits (exit code {EXIT_WAITING}); answer it with one of:"]
    for kind, effect in pending.allowed.items():
        flag = set_hint(pending) if kind == "edit" and pending.edit in ("vars", "arguments") else FLAGS[kind]
        lines.append("  " + " ".join(shlex.quote(x) for x in base) + f" {flag}    # {effect}")
    return "\n".join(lines)


def said(exc: BaseException | None) -> str:
    """An error as the CLI prints it: its type and message, secrets masked (in its chain too)."""
    if exc is None:
        return "no error recorded"
    redact_chain(exc)
    return redact(f"{type(exc).__name__}: {exc}")


def _run_script(path: Path, args: argparse.Namespace) -> int:
    needs = [flag for flag, on in (("--json", args.json), ("--quiet", args.quiet), ("--checkpoint", args.checkpoint),
                                   ("--report", args.report), ("--commit", args.commit),
                                   ("--max-calls", args.max_calls), ("--deadline", args.deadline)) if on]
    if needs:
        print(f"fsmchat run: {', '.join(needs)} need(s) a pattern, and {path} is a plain script (no top-level "
              f"{BUILD}() returning a pattern); add one, or name the pattern as {path}:ATTR", file=sys.stderr)
        return 2
    sys.argv = [str(path)]
    watch = FailedRuns()
    failed = watch.results
    try:
        with watch.watching():
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    except BaseException as exc:  # the script's own error, or a run's error it re-raised
        if isinstance(exc, KeyboardInterrupt):
            raise
        seen = [r for r in failed if r.error is exc]
        print(f"fsmchat run: {path.name} failed: {said(exc)}" +
              (f" (stop reason {seen[0].stop_reason!r})" if seen else ""), file=sys.stderr)
        return 1
    for r in failed:  # runs that failed although the script went on (it ignored result.error)
        print(f"fsmchat run: a run failed (stop reason {r.stop_reason!r}): {said(r.error)}",
              file=sys.stderr)
    return 1 if failed else 0


# ---- resume ----
def _stored_pattern(factory: str, args: argparse.Namespace) -> object:
    """The pattern the run's stored ``factory`` builds, under the trust the flags give; a refusal
    names the flags that allow it (not the Python keywords of ``fsmchat.resume``)."""
    what = f"run {args.run_id!r} factory"
    try:
        return Trust.of(args.allow or (), args.trusted, owner="fsmchat resume").pattern(factory, what)
    except UntrustedReference as exc:
        module = factory.rpartition(":")[0]
        kind = "a file path" if is_file_ref(factory) else f"module {module!r}"
        allow = "--trusted" if is_file_ref(factory) else f"--allow {shlex.quote(module)} or --trusted"
        raise UntrustedReference(factory, what, f"fsmchat resume loads a stored factory only from code you name: "
                                 f"it is {kind}; name the pattern with --target {shlex.quote(factory)}, or pass "
                                 f"{allow} if you trust the stored reference") from exc


def resume_command(args: argparse.Namespace) -> int:
    if args.model:
        os.environ["FSMCHAT_MODEL"] = args.model
    _use_api_base(args)
    given = [(flag, value) for flag, value in (("--input", args.input), ("--approve", Approve() if args.approve else None),
                                               ("--edit", Edit(args.edit) if args.edit is not None else None),
                                               ("--reject", Reject(args.reject) if args.reject is not None else None),
                                               ("--set", Edit(vars=parse_vars(args.set)) if args.set else None))
             if value is not None]
    if len(given) > 1:
        raise ValueError(f"give one answer, not {len(given)} ({', '.join(f for f, _ in given)})")
    check_run_id(args.run_id, "fsmchat resume", required=True)
    store = args.db
    checkpoint = _store(store)
    try:
        saved = checkpoint.load(args.run_id)
    except KeyError as exc:
        raise ValueError(exc.args[0]) from None
    how: list[str] = []
    pattern: Any  # a Pattern, or what the stored factory built (a pattern's run API, checked by its shape)
    if args.target:
        where, attr = split_target(args.target)
        pattern, _module = _pattern_of(args.target, where, attr)
        if pattern is None:
            raise TypeError(f"{args.target} does not build a pattern (a file's {BUILD}() must return one)")
        how = ["--target", args.target]
    else:
        factory = saved.meta.get("factory")
        if not factory:
            raise ValueError(f"run {args.run_id!r} was checkpointed without a factory; name its pattern with "
                             "--target MODULE:ATTR or path/file.py")
        if not isinstance(factory, str):  # (what Trust says of a reference that is not one)
            raise bad_value(f"run {args.run_id!r} factory", "reference", factory, "a 'module:attr' string",
                            type_error=True)
        pattern = _stored_pattern(factory, args)
        how = [x for a in args.allow or () for x in ("--allow", a)] + (["--trusted"] if args.trusted else [])
    how += _model_flags(args)
    fingerprint = saved.meta.get("fingerprint")
    stored = fingerprint.get("limits") if isinstance(fingerprint, dict) else None
    if isinstance(stored, dict) and stored and (pattern.limits is None or pattern.limits.model_dump(mode="json") != stored):
        pattern.with_limits(**stored)  # the limits the run was started with (fsmchat run --max-calls ...)
    answer = given[0][1] if given else None
    pending = waiting_for(saved)
    if isinstance(answer, Edit) and answer.vars and pending is not None and pending.edit == "arguments":
        # --set NAME=VALUE at a tool call: those arguments changed, the others kept as proposed
        proposed = pending.proposed.get("arguments") if isinstance(pending.proposed, dict) else None
        answer = Edit(arguments={**(proposed if isinstance(proposed, dict) else {}), **answer.vars})
    if answer is None and pending is not None and not args.no_input and sys.stdin.isatty():
        answer = ask_terminal(pending)
    return _follow(pattern, lambda hooks: pattern.aresume(args.run_id, checkpoint, input=answer, **hooks),
                   checkpoint, store, args, how)




def eval_command(args: argparse.Namespace) -> int:
    if args.model:
        os.environ["FSMCHAT_MODEL"] = args.model
    store = open_checkpointer(args.db) if args.db else None
    code: int = evals.run_eval_file(
        args.file, thresholds=args.threshold or [], variants=args.variant or [], checkpoint=store, verbose=args.verbose,
        repeat=args.repeat, max_concurrency=args.concurrency, max_calls=args.max_calls, max_cost_usd=args.max_cost,
        cassette=args.cassette, rescore=args.rescore or None, progress=sys.stderr.isatty(), executor=args.executor,
        address=args.address)
    if args.db:
        print(f"-- every run is kept in {args.db} (run ids eval-<dataset>-<variant>-<case>-<id>); review them with: "
              f"{shlex.join(['fsmchat', 'ui', '--db', args.db])}")
    return code


