"""Layer 19: ``fsmchat run | resume | render | graphs | plan | ui | serve | report | runs | history | fork``,
thin over the layers above.

Targets name code the way uvicorn and flask do: ``MODULE:ATTR`` (imported with the current
directory first on ``sys.path``), ``path/file.py:ATTR``, or ``path/file.py`` for the file's
top-level ``def build()`` (``fsmchat.targets``).
"""
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
from typing import Any, Callable, Iterator

from . import __version__, evals, gallery
from .checks import check_run_id
from .engine import run_sync
from .errors import FsmchatError
from .live import LiveRun, summary
from .masking import redact, redact_chain, redact_data
from .models import StopReason, shorten
from .patterns.base import FailedRuns, Pattern
from .patterns.group_chat import BIDS
from .speakers import llm
from .speakers.human import Approve, Edit, InputNotAllowed, Reject, check_input, waiting_for
from .store.checkpoint import Checkpointer, SqliteCheckpointer
from .store.statelog import history_of
from .store.timetravel import fork
from .targets import BUILD, defines_build, load_target_with_module, resolve_graph, split_target, use_cwd
from .trust import Trust, UntrustedReference, is_file_ref
from .ui import RunNotFound, write_report
from .ui import serve as serve_api
from .ui.server import serve
from .ui.store import is_dsn, open_checkpointer, open_view

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


def _run(args: argparse.Namespace) -> int:
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
        print(f"fsmchat run: no task for {args.target}: pass --task TEXT (or define TASK = \"...\" in "
              f"{Path(module.__file__).name if getattr(module, '__file__', None) else module.__name__})",
              file=sys.stderr)
        return 2
    return _run_pattern(pattern, task, args)


def _pattern_of(spec: str, where: str, attr: str | None) -> tuple[Any, Any]:
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
LIMIT_EXITS = {StopReason.DEADLINE: (EXIT_DEADLINE, "its deadline (deadline_s, --deadline)"),
               StopReason.BUDGET: (EXIT_BUDGET, "a budget (max_model_calls/--max-calls, max_tokens, max_cost_usd)")}
EXIT_CODES = (f"Exit codes: 0 finished ok, 1 failed, 2 bad input (nothing run), {EXIT_WAITING} waiting for a person, "
              f"{EXIT_DEADLINE} stopped by the deadline, {EXIT_BUDGET} stopped by a budget, 130 interrupted (Ctrl-C).")


def _run_pattern(pattern: Any, task: str, args: argparse.Namespace) -> int:
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


def _store(path: str, create: bool = False) -> Any:
    if is_dsn(path):
        return open_checkpointer(path)
    if create:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    elif not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint store at {path}")
    return SqliteCheckpointer(path)


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


def _follow(pattern: Any, start: Any, checkpoint: Checkpointer | None, store: str | None, args: argparse.Namespace,
            how: list[str], shown: bool = True) -> int:
    """Run ``start`` live; while the run waits for a person and stdin is a terminal (and not
    ``--no-input``), ask there and resume with the answer. Then report and pick the exit code."""
    started = time.monotonic()
    interactive = not args.no_input and sys.stdin.isatty()
    while True:
        view = LiveRun(messages=not (args.quiet or args.json), status=False if args.quiet else None,
                       label=getattr(pattern, "name", "") or type(pattern).__name__,
                       tokens=False if getattr(args, "no_stream", False) else None)
        hooks = {"observers": [view.on_event], "on_message": [view.on_message], "on_start": [view.on_start]}
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
    if getattr(args, "report", None) and store is not None:
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


def describe(pending: Any) -> list[str]:
    """What a waiting run asks, as lines for the terminal."""
    who = pending.person or "a person"
    lines = [f"-- waiting for {who} at {pending.state} ({pending.kind}): {pending.prompt}"]
    proposed = pending.proposed or {}
    if "content" in proposed:
        lines.append(f"   proposed by {proposed.get('speaker', '?')}: {proposed['content']}")
    elif "last" in proposed:
        lines.append(f"   latest message, {proposed['last']['role']}: {proposed['last']['content']}")
    return lines


def ask_terminal(pending: Any) -> Any:
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
                given: Any = Approve()
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


def parse_vars(items: list[str], flag: str = "--set") -> dict[str, Any]:
    """``NAME=VALUE`` pairs (VALUE as JSON when it parses, else as text); ``flag`` names the option."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"{flag} {item!r} is not NAME=VALUE")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def set_hint(pending: Any) -> str:
    """The ``--set`` of an answer that edits: the waiting tool call's own arguments with their
    proposed values (``--set summary='...'``: change what you want, the rest are kept), else
    ``--set NAME=VALUE`` (a flow's variables)."""
    proposed = pending.proposed if isinstance(pending.proposed, dict) else {}
    arguments = proposed.get("arguments") if pending.edit == "arguments" else None
    if not isinstance(arguments, dict) or not arguments:
        return "--set NAME=VALUE"
    return "--set " + " ".join(shlex.quote(f"{k}={v if isinstance(v, str) else json.dumps(v)}")
                               for k, v in arguments.items())


def waiting_note(pending: Any, run_id: str | None, store: str, how: list[str]) -> str:
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
def _stored_pattern(factory: str, args: argparse.Namespace) -> Any:
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


def _resume(args: argparse.Namespace) -> int:
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
        pattern = _stored_pattern(factory, args)
        how = [x for a in args.allow or () for x in ("--allow", a)] + (["--trusted"] if args.trusted else [])
    how += _model_flags(args)
    stored = (saved.meta.get("fingerprint") or {}).get("limits")
    if stored and (pattern.limits is None or pattern.limits.model_dump(mode="json") != stored):
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


# ---- ui, report: the run viewer (fsmchat.ui) ----
def _store_arg(cmd: str, db: str) -> Any:
    if is_dsn(db):
        return db
    path = Path(db)
    if not path.is_file():
        print(f"fsmchat {cmd}: no such checkpoint store: {db} (runs are stored with `fsmchat run ... --checkpoint "
              f"{db}` or checkpoint=SqliteCheckpointer({db!r}))", file=sys.stderr)
        return None
    return path


def _ui(args: argparse.Namespace) -> int:
    db = _store_arg("ui", args.db)
    if db is None:
        return 2

    serve(db, args.host, args.port, args.allow_host or ())
    return 0


def _serve(args: argparse.Namespace) -> int:
    patterns: dict[str, Any] = {}
    for spec in args.target or ():
        name, eq, target = spec.partition("=")
        if not eq:
            name, target = "", spec
        where, attr = split_target(target)
        name = name or attr or Path(where).stem
        if name in patterns:
            raise ValueError(f"two --target values are named {name!r}; name them NAME=TARGET")
        obj, _module = load_target_with_module(target)
        ref = f"{Path(where).resolve()}:{attr or BUILD}" if where.endswith(".py") else target
        patterns[name] = serve_api.Registered.of(name, obj, ref)
    for spec in args.config or ():
        name, eq, file = spec.partition("=")
        if not eq or not name or not file:
            raise ValueError(f"--config {spec!r} must look like NAME=FILE.json (a pattern's to_config() as JSON)")
        if name in patterns:
            raise ValueError(f"two patterns are named {name!r}; give each --target and --config its own NAME")
        patterns[name] = serve_api.Registered.config(name, Path(file).read_text(encoding="utf-8"),
                                                     allow=args.allow or (), trusted=args.trusted)
    if not patterns:
        raise ValueError("fsmchat serve needs a pattern to serve: --target NAME=TARGET or --config NAME=FILE.json")
    token = args.token or os.environ.get(serve_api.TOKEN_ENV) or None
    serve_api.serve(args.store, patterns, args.host, args.port, token, args.allow_host or (),
                    max_body_bytes=args.max_body_bytes, max_text_chars=args.max_text_chars)
    return 0


def _report(args: argparse.Namespace) -> int:
    db = _store_arg("report", args.db)
    if db is None:
        return 2

    try:
        path = write_report(db, args.run_id, args.output)
    except RunNotFound as exc:
        ids = open_view(db).summaries()
        listed = ", ".join(r["run_id"] for r in ids[:10]) + (f" (+{len(ids) - 10} more)" if len(ids) > 10 else "")
        print(f"fsmchat report: {exc}; " + (f"its runs, newest first: {listed}" if ids else "it holds no runs yet"),
              file=sys.stderr)
        return 2
    print(path)
    return 0


# ---- render, plan ----
def _render(args: argparse.Namespace) -> int:
    graph = resolve_graph(load_target_with_module(args.target)[0])
    print(graph.render(args.output))
    return 0


def _plan(args: argparse.Namespace) -> int:
    graph = resolve_graph(load_target_with_module(args.target)[0])
    flat = graph.flatten()
    print(f"{graph.name}: {len(flat.states)} states, {len(flat.transitions)} transitions, initial {flat.initial!r}")
    for s in flat.states.values():
        kind = "final" if s.final else "waits" if s.waits else "state"
        print(f"  {kind} {s.name}" + (f"  -- {s.description}" if s.description else ""))
        for t in s.out:
            guard = f" [{t.guard_name}]" if t.guard is not None else ""
            print(f"      -> {t.dest} ({t.label}){guard}")
    return 0


# ---- graphs ----
NO_GALLERY = """\
fsmchat graphs: nothing to draw here. No --target, --examples or --builtins was given, and {where}.
Name the graphs of your project, for example:
  fsmchat graphs --target mychat:chat --dir graphs      # MODULE:ATTR (from this folder) or path/file.py:ATTR
  fsmchat graphs --examples examples --dir graphs       # every examples/*.py with a top-level def build()
or once in pyproject.toml, then plain `fsmchat graphs` (and `fsmchat graphs --check` in CI):
  [tool.fsmchat.graphs]
  dir = "graphs"
  targets = ["mychat:chat"]      # a pattern, a StateGraph, or a zero-argument factory of one
  examples = "examples"          # optional
  builtins = false               # true adds fsmchat's own patterns
Nothing was written."""


def _gallery_of(args: argparse.Namespace) -> tuple[gallery.Gallery | None, str]:
    """The gallery the command line names, else the one pyproject.toml names (None: neither)."""
    if args.target or args.examples or args.builtins:
        g = gallery.Gallery(targets=dict(gallery.target_name(t) for t in args.target or []),
                            examples=Path(args.examples) if args.examples else None, builtins=args.builtins)
        if len(g.targets) != len(args.target or []):
            raise gallery.GalleryConfigError("two --target values share a file name; name them NAME=MODULE:ATTR")
        where = "the command line"
    else:
        found, pyproject = gallery.configured(Path.cwd())
        if found is None or pyproject is None:
            where = (f"{pyproject} has no [{gallery.CONFIG_TABLE}] table" if pyproject is not None
                     else "there is no pyproject.toml here or in a parent folder")
            return None, where
        g = found
        sys.path.insert(0, str(pyproject.parent))  # its targets import from the project's root
        where = f"{pyproject} [{gallery.CONFIG_TABLE}]"
    if args.dir:
        g.dir = Path(args.dir)
    return g, where


def _graphs(args: argparse.Namespace) -> int:
    g, where = _gallery_of(args)
    if g is None:
        print(NO_GALLERY.format(where=where), file=sys.stderr)
        return 2
    if args.check:
        return g.report_check("fsmchat graphs", where)
    written, orphans = g.write(prune=args.prune, force=args.force)
    rewritten = f"; {len(written)} rewritten" if written else ""
    print(f"{g.dir}/: {g.drawings} drawing{'s' if g.drawings != 1 else ''} up to date ({g.files} files{rewritten})")
    if args.verbose:
        for p in written:
            print(f"  wrote {p}")
    for p in g.skipped:
        print(f"skipped {p}: no top-level def {BUILD}() (not imported)", file=sys.stderr)
    for p in orphans:
        print(f"{'deleted' if args.prune else 'orphan (nothing draws it; --prune deletes it)'}: {p}", file=sys.stderr)
    return 0


# ---- runs, history, fork: time travel over a checkpoint store ----
def _open_store(path: str, write: bool = False) -> Any:
    """The SQLite store at ``path`` (never created here: a missing file is an error), or the
    PostgreSQL store a ``postgresql://`` URI names."""
    if is_dsn(path):
        return open_checkpointer(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"no checkpoint store at {path} (`fsmchat run TARGET --checkpoint {path}` writes one)")
    return SqliteCheckpointer(path, read_only=None if write else True)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "?"


def _runs(args: argparse.Namespace) -> int:
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


def _run_log(store: Any, run_id: str) -> Any:
    try:
        return store.log(run_id)
    except KeyError:
        known = [r.run_id for r in store.list_runs()][:5]
        where = store.where if is_dsn(str(getattr(store, "dsn", ""))) else store.path
        raise ValueError(f"no run {run_id!r} in {where}" + (f"; newest runs: {', '.join(known)} (`fsmchat runs "
                                                               f"--db {where}` lists them)" if known else
                                                                    "; it has no runs")) from None


def _history(args: argparse.Namespace) -> int:
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


def _fork(args: argparse.Namespace) -> int:
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


def _eval(args: argparse.Namespace) -> int:
    if args.model:
        os.environ["FSMCHAT_MODEL"] = args.model
    store = open_checkpointer(args.db) if args.db else None
    code: int = evals.run_eval_file(
        args.file, thresholds=args.threshold or [], variants=args.variant or [], checkpoint=store, verbose=args.verbose,
        repeat=args.repeat, max_concurrency=args.concurrency, max_calls=args.max_calls, max_cost_usd=args.max_cost,
        cassette=args.cassette, rescore=args.rescore or None, progress=sys.stderr.isatty())
    return code


def _store_args(p: argparse.ArgumentParser, what: str, fn: Any) -> None:
    p.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store, or a PostgreSQL URI "
                   "(postgresql://...)")
    p.add_argument("--json", action="store_true", help=f"print {what} as JSON")
    p.set_defaults(fn=fn)


def add_time_travel(sub: Any) -> None:
    """The ``runs``, ``history`` and ``fork`` subcommands."""
    ru = sub.add_parser("runs", help="list the runs in a checkpoint store, newest first",
                        description="List the runs of a SQLite checkpoint store (branch lanes left out), newest first: "
                        "run id, pattern, status (finished with its stop reason, waiting, failed, cancelled, "
                        "unfinished), messages, when it started, task.")
    _store_args(ru, "the list", _runs)

    hi = sub.add_parser("history", help="list the steps of a checkpointed run (what `fork --at K` takes)",
                        description="One line per step of a checkpointed run: its number, the state, the transition "
                        "taken, the messages, model calls and tokens so far, and whether its working state is stored "
                        "on its own (a carried step's, e.g. GroupChat's bid or select with the default commit=\"turn\", is "
                        "committed with the next one; a fork there runs it again).")
    hi.add_argument("run_id", metavar="RUN", help="the run id (`fsmchat runs` lists them)")
    _store_args(hi, "the steps", _history)

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
    fo.set_defaults(fn=_fork)


# ---- the parser ----
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fsmchat", description="Multi-agent conversations as state graphs: run them "
                                "live, render them, keep a gallery of their graphs.")
    p.add_argument("--version", action="version", version=f"fsmchat {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a pattern live: messages as they are posted, a status line while models think",
                       description="Run a pattern once, printing each message as it is posted and a status line "
                       "(state, turn, model calls, tokens, cost, elapsed) while models think. A file whose "
                       f"{BUILD}() does not return a pattern is run as a plain script. When the run waits for a "
                       "person, it asks on the terminal (/approve, /edit TEXT, /reject REASON, or your message). "
                       + EXIT_CODES)
    r.add_argument("target", metavar="TARGET", help=f"the pattern: {TARGET_HELP}; a factory is called with no arguments")
    r.add_argument("--task", help="the task to run (default: the module's TASK; also sets FSMCHAT_TASK for scripts)")
    r.add_argument("--model", help="litellm model for every agent without its own, e.g. gpt-4o-mini or "
                   "ollama_chat/llama3.1 (sets FSMCHAT_MODEL; default: the offline simulation)")
    r.add_argument("--api-base", metavar="URL", help=API_BASE_HELP)
    r.add_argument("-q", "--quiet", action="store_true", help="no live messages or status line; print only the output")
    r.add_argument("--no-stream", action="store_true", help="do not show replies as they are written (by default "
                   "they stream when stdout is a terminal); each message still prints when it is posted")
    r.add_argument("--json", action="store_true", help="print the RunResult as JSON on stdout (status line still on "
                   "a terminal's stderr)")
    r.add_argument("--checkpoint", metavar="PATH", help="commit the run to this SQLite file as it goes (resumable; the "
                   f"run id is printed on stderr); a pattern that may wait for a person uses {DEFAULT_STORE} by default")
    r.add_argument("--commit", choices=["turn", "step"], help="how the checkpointed run commits: 'turn' (the default: "
                   "the steps of a turn that post nothing, e.g. a GroupChat's bids, are committed with the post) or "
                   "'step' (every step its own commit)")
    r.add_argument("--no-input", action="store_true", help="when the run waits for a person, do not ask on the "
                   f"terminal: leave it waiting, print the resume command and exit {EXIT_WAITING} (the default "
                   "when stdin is not a terminal)")
    r.add_argument("--report", metavar="FILE", help="after the run, write it as one self-contained HTML page (the run "
                   "viewer's, offline); the run goes to --checkpoint's store, or a temporary one")
    r.add_argument("--max-calls", type=int, metavar="N", help="stop (stop reason 'budget') before request N+1 to a "
                   "model (sets max_model_calls)")
    r.add_argument("--deadline", type=float, metavar="SECONDS", help="stop (stop reason 'deadline') after this many "
                   "seconds, keeping the transcript so far (sets deadline_s)")
    r.set_defaults(fn=_run)

    rs = sub.add_parser("resume", help="continue a checkpointed run; a run waiting for a person with their answer",
                        description="Continue a checkpointed run (e.g. one `fsmchat run` left waiting for a person). "
                        "The pattern is --target, else the factory stored with the run, loaded under the trust rules "
                        "of fsmchat.resume (--allow PREFIX, --trusted). Give the answer with one of --input, "
                        "--approve, --edit, --reject, --set; without one it asks on the terminal. " + EXIT_CODES)
    rs.add_argument("run_id", metavar="RUN", help="the run id (`fsmchat run` prints it on stderr)")
    rs.add_argument("--db", "--checkpoint", dest="db", required=True, metavar="PATH",
                    help="the SQLite checkpoint store, or a PostgreSQL URI (postgresql://...)")
    rs.add_argument("--target", metavar="TARGET", help=f"the pattern that ran: {TARGET_HELP} (default: the run's "
                    "stored factory)")
    rs.add_argument("--allow", action="append", metavar="PREFIX", help="trust the stored factory's module prefix "
                    "(repeatable)")
    rs.add_argument("--trusted", action="store_true", help="load any stored factory, file paths included")
    rs.add_argument("--input", metavar="TEXT", help="the person's message (their turn, their answer, or their own "
                    "message instead of the proposal)")
    rs.add_argument("--approve", action="store_true", help="approve what the run proposes")
    rs.add_argument("--edit", metavar="TEXT", help="go on with the proposed message replaced by TEXT")
    rs.add_argument("--reject", metavar="REASON", nargs="?", const="", help="reject the proposal (its effect is "
                    "listed when the run stops)")
    rs.add_argument("--set", nargs="+", metavar="NAME=VALUE", help="edit flow variables, or a waiting tool call's "
                    "arguments (VALUE as JSON, else text)")
    rs.add_argument("--model", help="litellm model for every agent without its own, as `fsmchat run --model` "
                    "(sets FSMCHAT_MODEL; give the run's own again: a resumed run is rebuilt from its target)")
    rs.add_argument("--api-base", metavar="URL", help=API_BASE_HELP)
    rs.add_argument("--no-input", action="store_true", help="never ask on the terminal")
    rs.add_argument("-q", "--quiet", action="store_true", help="print only the output")
    rs.add_argument("--json", action="store_true", help="print the RunResult as JSON (with 'pending' when waiting)")
    rs.set_defaults(fn=_resume)

    d = sub.add_parser("render", help="render a graph to .svg/.png/.pdf/.dot/.mmd")
    d.add_argument("target", metavar="TARGET", help=f"a StateGraph, a pattern or a factory of one: {TARGET_HELP}")
    d.add_argument("-o", "--output", required=True, metavar="FILE", help="out.svg | .png | .pdf (need Graphviz's "
                   "dot) | .dot | .mmd; the suffix picks the format")
    d.set_defaults(fn=_render)

    g = sub.add_parser("graphs", help="regenerate (or --check) a gallery of graph files, e.g. graphs/",
                       description="Write one .dot, .svg and .mmd per graph of your project into a folder, or check "
                       "it is up to date. Name the graphs with --target/--examples/--builtins, or in pyproject.toml "
                       f"under [{gallery.CONFIG_TABLE}] (keys dir, targets, examples, builtins). Only files named "
                       f"as targets, and example files with a top-level def {BUILD}(), are imported.")
    g.add_argument("--target", action="append", metavar="[NAME=]TARGET", help=f"a graph to draw: {TARGET_HELP}; "
                   "files are named NAME.* (default: ATTR, or the file's stem for build). Repeatable")
    g.add_argument("--examples", metavar="DIR", help=f"also every DIR/*.py (not _*) with a top-level def {BUILD}(), "
                   "as example_<stem>.*; other files are skipped, never imported")
    g.add_argument("--builtins", action="store_true", help="also fsmchat's own patterns")
    g.add_argument("--dir", metavar="DIR", help="the gallery folder (default: the config's dir, else graphs)")
    g.add_argument("--check", action="store_true", help="write nothing; exit 1 naming missing, stale and orphan files")
    g.add_argument("--prune", action="store_true", help="delete orphan .dot/.svg/.mmd files (drawn by nothing)")
    g.add_argument("--force", action="store_true", help="rewrite every file, also those already up to date")
    g.add_argument("-v", "--verbose", action="store_true", help="list each file written")
    g.set_defaults(fn=_graphs)

    u = sub.add_parser("ui", help="watch and replay the runs of a checkpoint store in the browser (read-only)",
                       description="Serve a local web app over a checkpoint store: every run, and each run replayed step "
                       "by step on its graph (bids, transcript, usage, config). A run still executing in another process "
                       "updates live. The store is opened read-only. Needs the ui extra: pip install 'fsmchat[ui]'.")
    u.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store (e.g. runs.db), or a "
                   "PostgreSQL URI (postgresql://...)")
    u.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    u.add_argument("--port", type=int, default=8765, help="port (default 8765; 0 picks a free one)")
    u.add_argument("--allow-host", action="append", metavar="NAME", help="answer requests for this Host name too "
                   "(NAME or NAME:PORT; repeatable), e.g. behind a proxy; by default only the address served and "
                   "localhost, 127.0.0.1, [::1] with its port are answered, any other Host gets 421")
    u.set_defaults(fn=_ui)

    sv = sub.add_parser("serve", help="an HTTP API that starts, streams, answers, resumes and forks runs of named "
                        "patterns", description="Serve the patterns named with --target or --config over HTTP, every "
                        "run checkpointed to --store (an SQLite file or a postgresql:// URI): POST /api/runs starts "
                        "one, GET /api/runs/{id}/events streams it (server-sent events), POST .../answer, "
                        ".../resume, .../cancel, .../fork; the schema is at "
                        "/openapi.json and the run viewer's pages are on the same server. Requests name a pattern, "
                        "never code. Needs the ui extra: pip install 'fsmchat[ui]'.")
    sv.add_argument("--store", required=True, metavar="PATH", help="the SQLite checkpoint store (created if missing), "
                    "or a PostgreSQL URI (postgresql://USER@HOST:PORT/DBNAME)")
    sv.add_argument("--target", action="append", metavar="[NAME=]TARGET", help=f"a pattern to serve: "
                    f"{TARGET_HELP}; requests name it NAME (default: ATTR, or the file's stem). Repeatable")
    sv.add_argument("--config", action="append", metavar="NAME=FILE.json", help="a pattern or flow to serve from its "
                    "config (to_config() as JSON), rebuilt for each run by from_config: only fsmchat's modules and "
                    "--allow prefixes are imported. Repeatable")
    sv.add_argument("--allow", action="append", metavar="PREFIX", help="a module prefix the configs' references may "
                    "import (repeatable)")
    sv.add_argument("--trusted", action="store_true", help="the configs may import any reference, file paths included")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other address "
                    "needs a token)")
    sv.add_argument("--port", type=int, default=serve_api.DEFAULT_SERVE_PORT, help=f"port (default "
                    f"{serve_api.DEFAULT_SERVE_PORT}; 0 picks a free one)")
    sv.add_argument("--token", help=f"require Authorization: Bearer TOKEN on every request (default: "
                    f"${serve_api.TOKEN_ENV})")
    sv.add_argument("--allow-host", action="append", metavar="NAME", help="answer requests for this Host name too "
                    "(NAME or NAME:PORT; repeatable), e.g. behind a proxy")
    sv.add_argument("--max-body-bytes", type=int, default=serve_api.DEFAULT_MAX_BODY_BYTES, metavar="N",
                    help=f"the largest request body (default {serve_api.DEFAULT_MAX_BODY_BYTES:,}; 413 past it)")
    sv.add_argument("--max-text-chars", type=int, default=serve_api.DEFAULT_MAX_TEXT_CHARS, metavar="N",
                    help=f"the longest text in a request, a task or an answer (default "
                         f"{serve_api.DEFAULT_MAX_TEXT_CHARS:,}; 422 past it)")
    sv.set_defaults(fn=_serve)

    rp = sub.add_parser("report", help="write one run as a self-contained HTML file (offline, for a review)",
                        description="Write the run viewer's page of one run as a single HTML file: graph, step replay, "
                        "bids, transcript, usage and config inline; it opens from file:// with no network.")
    rp.add_argument("run_id", metavar="RUN_ID", help="the run's id (printed by fsmchat run --checkpoint)")
    rp.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store holding the run, or a PostgreSQL URI")
    rp.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write, e.g. run.html")
    rp.set_defaults(fn=_report)

    ev = sub.add_parser("eval", help="score conversations over a dataset, side by side across variants; exit 1 when a "
                        "threshold fails", description="Run the eval FILE.py defines (EVAL = fsmchat.evals.Eval(...) or "
                        "build_eval()): every case under every variant, each run scored by the dataset's evaluators; "
                        "print each variant's report (the first as the others' baseline) and a summary (mean and 95%% "
                        "interval per evaluator). Exit codes: 0 every case ran and every threshold holds (the file's "
                        "THRESHOLDS and --threshold), 1 a case failed or a threshold was missed, 2 bad input (nothing run).")
    ev.add_argument("file", metavar="FILE.py", help="the file defining EVAL or build_eval()")
    ev.add_argument("--threshold", action="append", metavar="NAME=VALUE", help="fail (exit 1) when an evaluator's mean "
                    "is under VALUE (0 to 1) in any variant, e.g. 'ToolCalled(refund)=0.9'; repeatable")
    ev.add_argument("--variant", action="append", metavar="NAME", help="run only this variant; repeatable")
    ev.add_argument("--repeat", type=int, metavar="N", help="runs per case and variant (the mean and interval are over them)")
    ev.add_argument("--concurrency", type=int, metavar="N", help="runs at once")
    ev.add_argument("--max-calls", type=int, metavar="N", help="the most model calls of the whole eval (a run starts "
                    "only when its worst case fits what is left)")
    ev.add_argument("--max-cost", type=float, metavar="USD", help="the most the eval may spend (no run starts once spent)")
    ev.add_argument("--cassette", metavar="PATH", help="a JSONL file of recorded runs: re-scored without a model call, "
                    "and appended as new runs end (a killed eval goes on from the runs it finished)")
    ev.add_argument("--rescore", action="store_true", help="only score the cassette's runs: no model call (a case "
                    "without a recording fails)")
    ev.add_argument("--db", metavar="PATH", help="keep every run in this checkpoint store (SQLite file or "
                    "postgresql://...), for fsmchat ui")
    ev.add_argument("--model", help="litellm model for every agent without its own (sets FSMCHAT_MODEL; default: "
                    "the offline simulation)")
    ev.add_argument("-v", "--verbose", action="store_true", help="show each case's output and the evaluators' reasons")
    ev.set_defaults(fn=_eval)

    pl = sub.add_parser("plan", help="print a graph's states and transitions")
    pl.add_argument("target", metavar="TARGET", help=f"a StateGraph, a pattern or a factory of one: {TARGET_HELP}")
    pl.set_defaults(fn=_plan)
    add_time_travel(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    use_cwd()
    try:
        command: Callable[[argparse.Namespace], int] = args.fn
        return command(args)
    except (FsmchatError, ValueError, TypeError, FileNotFoundError, ImportError, AttributeError) as exc:
        print(f"fsmchat {args.cmd}: {said(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
