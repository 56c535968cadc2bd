"""The ``fsmchat`` command: its parser (one subcommand per command module) and ``main``."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from .. import __version__
from . import gallery
from ..errors import FsmchatError
from ..targets import BUILD, use_cwd
from ..ui import serve as serve_api
from ..ui.server import serve
from .graphs import graphs_command, plan_command, render_command
from .history import add_time_travel
from .live import summary
from .run import (API_BASE_HELP, DEFAULT_STORE, EXIT_CODES, EXIT_WAITING, TARGET_HELP, eval_command, resume_command,
                  run_command, said)
from .viewer import report_command, serve_command, ui_command


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
    r.add_argument("--no-stream", action="store_true", help="do not show replies and bids as they are written (by "
                   "default they stream when stdout is a terminal); each message still prints when it is posted")
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
    r.set_defaults(fn=run_command)

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
    rs.set_defaults(fn=resume_command)

    d = sub.add_parser("render", help="render a graph to .svg/.png/.pdf/.dot/.mmd")
    d.add_argument("target", metavar="TARGET", help=f"a StateGraph, a pattern or a factory of one: {TARGET_HELP}")
    d.add_argument("-o", "--output", required=True, metavar="FILE", help="out.svg | .png | .pdf (need Graphviz's "
                   "dot) | .dot | .mmd; the suffix picks the format")
    d.set_defaults(fn=render_command)

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
    g.set_defaults(fn=graphs_command)

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
    u.set_defaults(fn=ui_command)

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
    sv.set_defaults(fn=serve_command)

    rp = sub.add_parser("report", help="write one run as a self-contained HTML file (offline, for a review)",
                        description="Write the run viewer's page of one run as a single HTML file: graph, step replay, "
                        "bids, transcript, usage and config inline; it opens from file:// with no network.")
    rp.add_argument("run_id", metavar="RUN_ID", help="the run's id (printed by fsmchat run --checkpoint)")
    rp.add_argument("--db", required=True, metavar="PATH", help="the SQLite checkpoint store holding the run, or a PostgreSQL URI")
    rp.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write, e.g. run.html")
    rp.set_defaults(fn=report_command)

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
    ev.add_argument("--executor", choices=["local", "ray"], help="make the runs the cassette lacks first, as batches "
                    "through the batch runner (one per pattern config): 'local' in this process, 'ray' on Ray workers "
                    "(every variant's pattern must have a config: no lambda or closure); then score them (default: "
                    "each case run on its own)")
    ev.add_argument("--address", metavar="RAY", help="with --executor ray: the Ray cluster to join ('auto', "
                    "'ray://host:10001'; default: a local Ray)")
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
    ev.set_defaults(fn=eval_command)

    pl = sub.add_parser("plan", help="print a graph's states and transitions")
    pl.add_argument("target", metavar="TARGET", help=f"a StateGraph, a pattern or a factory of one: {TARGET_HELP}")
    pl.set_defaults(fn=plan_command)
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

