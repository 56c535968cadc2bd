/* fsmchat run viewer: renders the page's JSON data (runs list, one run, the evaluations list, one evaluation, one
   case of it) with textContent only, so every model-written text stays text. Live pages poll the server they came
   from; exported reports never connect. */
"use strict";
(function () {
  const settings = JSON.parse(document.getElementById("fsmchat-settings").textContent);
  let data = JSON.parse(document.getElementById("fsmchat-data").textContent);
  const app = document.getElementById("app");
  const POLL_MS = 1000;

  // ---- small DOM helpers: strings always become text nodes ----
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v; else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  function fill(node, ...children) { node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined)); }
  const dash = "—";
  function num(x) { return typeof x === "number" ? x.toLocaleString("en-US", {maximumFractionDigits: 3}) : dash; }
  function cost(x) { return typeof x === "number" ? "$" + (x === 0 ? "0" : x.toPrecision(3)) : dash; }
  function secs(x) {
    if (typeof x !== "number") return dash;
    if (x < 60) return x.toFixed(x < 10 ? 2 : 1) + " s";
    const m = Math.floor(x / 60), s = Math.round(x % 60);
    return m < 60 ? `${m} min ${s} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
  }
  function when(ts) {
    if (typeof ts !== "number") return dash;
    const d = new Date(ts * 1000), p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  function where(store) {  // the store's file name; its whole path on hover
    const w = document.getElementById("where");
    w.textContent = store.split(/[\\/]/).pop();
    w.title = store;
  }
  function badge(status) { return el("span", {class: "badge " + status, "data-status": status}, status); }
  function runLink(id) { return "/runs/" + encodeURIComponent(id); }
  function pretty(x) { return JSON.stringify(x, null, 2); }

  // ---- the runs list ----
  function renderRuns() {
    const params = new URLSearchParams(location.search);
    const wanted = params.get("status") || "";
    where(data.store);
    const counts = {};
    for (const r of data.runs) counts[r.status] = (counts[r.status] || 0) + 1;
    const filter = el("select", {id: "status-filter"},
      el("option", {value: ""}, `all (${data.runs.length})`),
      data.statuses.map((s) => el("option", {value: s, selected: s === wanted}, `${s} (${counts[s] || 0})`)));
    filter.addEventListener("change", () => {
      const q = filter.value ? "?status=" + encodeURIComponent(filter.value) : location.pathname;
      history.replaceState(null, "", q);
      renderRuns();
    });
    const shown = data.runs.filter((r) => !wanted || r.status === wanted);
    const head = ["run", "pattern", "task", "status", "stop reason", "messages", "model calls", "tokens", "cost",
                  "started", "duration"];
    const table = el("table", {id: "runs"},
      el("thead", {}, el("tr", {}, head.map((h, i) => el("th", {class: i >= 5 && i <= 8 ? "num" : null}, h)))),
      el("tbody", {}, shown.map((r) => el("tr", {"data-run-id": r.run_id, "data-status": r.status},
        el("td", {}, el("a", {href: runLink(r.run_id)}, r.run_id)),
        el("td", {}, r.pattern || dash, r.name ? el("div", {class: "muted"}, r.name) : null),
        el("td", {class: "task", title: r.task || ""}, r.task || dash),
        el("td", {}, badge(r.status)), el("td", {}, r.stop_reason || dash),
        el("td", {class: "num"}, num(r.messages)), el("td", {class: "num"}, num(r.calls)),
        el("td", {class: "num"}, num(r.tokens)), el("td", {class: "num"}, cost(r.cost_usd)),
        el("td", {class: "when"}, when(r.started)), el("td", {class: "num"}, secs(r.duration))))));
    fill(app, el("h1", {}, "Runs"),
      el("div", {class: "filter"}, el("label", {}, "status ", filter)),
      data.runs.length ? table : el("p", {id: "empty"}, "No runs in this store yet. Runs appear here as they start."),
      data.runs.length && !shown.length ? el("p", {id: "none-shown"}, `No ${wanted} runs.`) : null);
  }

  // ---- one run ----
  let current = -1;
  function sectionJSON(title, id, value, missing) {
    return [el("h2", {}, title), value === null || value === undefined || (Array.isArray(value) && !value.length)
      ? el("p", {id, class: "muted"}, missing) : el("pre", {id, class: "json"}, pretty(value))];
  }

  function renderRun() {
    const r = data.run;
    if (settings.report) document.getElementById("where").textContent = "exported report · fsmchat " + settings.version;
    else where(data.store);
    document.title = `${r.pattern || "run"} ${r.run_id}`;
    const summary = el("dl", {class: "summary", id: "summary"},
      [["status", badge(r.status)], ["stop reason", r.stop_reason || dash], ["steps", num(data.steps.length)],
       ["messages", num(r.messages)], ["model calls", num(r.calls)], ["attempts", num(r.attempts)],
       ["tokens", num(r.tokens)], ["cost", cost(r.cost_usd)], ["started", when(r.started)],
       ["duration", secs(r.duration)]].map(([k, v]) => el("div", {}, el("dt", {}, k), el("dd", {"data-field": k}, v))));
    const graph = el("div", {id: "graph"});
    if (data.svg) graph.innerHTML = data.svg;  // Graphviz's SVG of the run's graph (labels escaped by Graphviz)
    else graph.appendChild(el("p", {class: "muted", id: "no-graph"}, "No picture of the graph (see the notes above)."));
    const slider = el("input", {type: "range", id: "slider", min: 0, max: Math.max(0, data.steps.length - 1), value: 0,
                                "aria-label": "step", disabled: !data.steps.length});
    const prev = el("button", {id: "prev", type: "button", title: "previous step (←)"}, "◀");
    const next = el("button", {id: "next", type: "button", title: "next step (→)"}, "▶");
    slider.addEventListener("input", () => show(Number(slider.value)));
    prev.addEventListener("click", () => show(current - 1));
    next.addEventListener("click", () => show(current + 1));
    fill(app,
      el("h1", {}, `${r.pattern || "run"} `, el("span", {class: "muted"}, r.name || "")),
      el("div", {class: "muted"}, "run ", el("code", {id: "run-id"}, r.run_id)),
      el("p", {class: "task", id: "task"}, r.task || ""),
      el("div", {id: "live"}),
      data.notes.length ? el("ul", {class: "notes", id: "notes"}, data.notes.map((n) => el("li", {}, n))) : null,
      summary,
      el("div", {class: "columns"},
        el("section", {}, el("h2", {}, "Graph"), graph),
        el("section", {}, el("h2", {}, "Replay ", el("span", {class: "muted"}, "(← → or the slider)")),
          el("div", {class: "controls"}, prev, slider, next),
          el("div", {id: "step-label"}, data.steps.length ? "" : "No steps committed yet."),
          el("div", {id: "step-detail"}),
          el("div", {id: "bid-box", hidden: true}, el("h2", {}, "Bids of this turn"), el("p", {id: "why"}),
            el("table", {id: "bids"}, el("thead", {}, el("tr", {},
              ["agent", "raw score", "adjusted", "message", "invalid", "why"].map((h, i) =>
                el("th", {class: i === 1 || i === 2 ? "num" : null}, h)))), el("tbody", {}))),
          el("h2", {}, "Transcript ", el("span", {class: "muted", id: "transcript-count"})),
          el("ol", {id: "transcript"}, data.messages.map((m, i) => message(m, i))),
          el("div", {id: "lanes"}, Object.entries(data.lanes).map(([lane, ms]) =>
            el("div", {class: "lane", "data-lane": lane}, el("div", {class: "muted"}, "branch run " + lane),
              el("ol", {}, ms.map((m, i) => message(m, i)))))))),
      el("h2", {}, "Errors"), data.errors.length ? el("ul", {id: "errors"}, data.errors.map((e) =>
        el("li", {}, e.step === null ? "" : `step ${e.step + 1} (${e.state}): `, e.text))) :
        el("p", {id: "errors", class: "muted"}, "No errors."),
      sectionJSON("Events", "events", data.events, "No events recorded."),
      sectionJSON("Limits", "limits", data.limits, "No limits set."),
      sectionJSON("Usage", "usage", Object.keys(data.usage).length ? data.usage : null, "No usage recorded yet."),
      sectionJSON("Config (secrets masked)", "config", data.config, "No config stored for this run."));
    current = -1;
    show(data.steps.length - 1);
    liveBanner();
  }

  function message(m, i) {
    return el("li", {"data-i": i}, el("span", {class: "role"}, m.role),
      typeof m.score === "number" ? el("span", {class: "score"}, "bid " + num(m.score)) : null,
      el("div", {class: "content"}, m.content),
      m.tool_calls && m.tool_calls.length ? el("ul", {class: "calls"}, m.tool_calls.map(toolCall)) : null);
  }

  function toolCall(c) {  // a call the speaker made before its reply: name, arguments, result or error, duration
    const args = typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments);
    const outcome = c.status === "done" ? c.result : `${c.status}: ${c.error || c.result || ""}`;
    return el("li", {class: "call " + c.status}, el("code", {}, `${c.name}(${args})`), " → ", outcome,
      typeof c.duration_s === "number" ? el("span", {class: "muted"}, "  " + secs(c.duration_s)) : null);
  }

  function mark(id, on) {
    const node = id === null || id === undefined ? null : document.getElementById(id);
    if (node) node.classList.toggle("current", on);
  }

  function show(i) {
    if (!data.steps.length) return;
    i = Math.max(0, Math.min(data.steps.length - 1, i));
    const before = current >= 0 ? data.steps[current] : null, s = data.steps[i];
    if (before) { mark(before.node !== null ? "n" + before.node : null, false); mark(before.edge !== null ? "e" + before.edge : null, false); }
    mark(s.node !== null ? "n" + s.node : null, true);
    mark(s.edge !== null ? "e" + s.edge : null, true);
    current = i;
    document.getElementById("slider").value = String(i);
    document.getElementById("step-label").textContent = `Step ${i + 1} of ${data.steps.length}: ${s.state}` +
      (s.dest ? ` —${s.trigger}→ ${s.dest}` : s.trigger ? ` (${s.trigger})` : " (final)") +
      (s.lane ? `  · branch run ${s.lane}` : "") + (typeof s.t === "number" ? `  · at ${secs(s.t)}` : "");
    document.getElementById("step-detail").textContent = s.payload ? "returned: " + s.payload : "";
    showTranscript(i);
    showBids(s);
  }

  function showTranscript(i) {
    const s = data.steps[i], prevStep = i > 0 ? data.steps[i - 1] : null;
    const per = data.per_step_transcript;
    const upto = per ? s.upto : data.messages.length, was = per && prevStep ? prevStep.upto : upto;
    document.querySelectorAll("#transcript > li").forEach((li) => {
      const k = Number(li.dataset.i);
      li.hidden = k >= upto;
      li.classList.toggle("new", per && k >= was && k < upto);
    });
    const open = per ? (s.open || {}) : null, openBefore = per && prevStep ? (prevStep.open || {}) : {};
    document.querySelectorAll("#lanes > .lane").forEach((lane) => {
      const name = lane.dataset.lane, n = open ? open[name] : undefined;
      lane.hidden = n === undefined;  // a branch's messages show while it runs; after the join they are the run's
      lane.querySelectorAll("li").forEach((li) => {
        const k = Number(li.dataset.i);
        li.hidden = !(k < (n === undefined ? 0 : n));
        li.classList.toggle("new", open !== null && k >= (openBefore[name] || 0) && k < (n || 0));
      });
    });
    const shown = document.querySelectorAll("#transcript > li:not([hidden])").length;
    document.getElementById("transcript-count").textContent = per ? `(${shown} of ${data.messages.length} at this step)`
      : `(${data.messages.length})`;
  }

  function showBids(s) {
    const box = document.getElementById("bid-box");
    const turn = s.turn === undefined ? null : data.turns[s.turn];
    box.hidden = !turn;
    if (!turn) return;
    document.getElementById("why").textContent = turn.why;
    const body = document.querySelector("#bids tbody");
    body.replaceChildren(...turn.agents.map((a) => el("tr", {class: a.name === turn.winner ? "winner" : null, "data-agent": a.name},
      el("td", {}, a.name), el("td", {class: "num"}, num(a.raw)), el("td", {class: "num"}, num(a.adjusted)),
      el("td", {class: "message"}, a.message === null ? "(not recorded by this store)" : a.message || "(silent)",
        a.tools && a.tools.length ? el("ul", {class: "calls"}, a.tools.map(toolCall)) : null),
      el("td", {}, a.invalid || ""), el("td", {}, a.note))));
  }

  function liveBanner(finishedNow) {
    const box = document.getElementById("live"), r = data.run;
    if (finishedNow) {
      box.className = "done";
      box.textContent = `The run finished while you watched: status ${r.status}, stop reason ${r.stop_reason || dash}.`;
    } else if (settings.live && r.status === "running") {
      box.className = "";
      box.textContent = "Live: this run is still executing; new steps appear as they are committed.";
    }
  }

  // ---- live updates: poll the server this page came from ----
  async function poll() {
    const wasRunning = data.kind === "run" && data.run.status === "running";
    const url = data.kind === "runs" ? "/api/runs" :
      `/api/runs/${encodeURIComponent(data.run.run_id)}?steps=${data.steps.length}&status=${data.run.status}`;
    try {
      const res = await fetch(url, {cache: "no-store"});
      const got = await res.json();
      if (data.kind === "runs") {
        if (JSON.stringify(got.runs) !== JSON.stringify(data.runs)) { data = got; renderRuns(); }
      } else if (!got.unchanged) {
        const atEnd = current === data.steps.length - 1;
        const keep = current;
        data = got;
        renderRun();
        if (!atEnd) show(keep);
        if (wasRunning && data.run.status !== "running") liveBanner(true);
      }
    } catch (err) {
      document.getElementById("where").textContent = "(the viewer server did not answer: " + err + ")";
    }
    if (data.kind === "runs" || data.run.status === "running") setTimeout(poll, POLL_MS);
  }


  // ---- evaluations: the list, one evaluation (variants side by side), one case (two transcripts diffed) ----
  function evalLink(id) { return "/evals/" + encodeURIComponent(id); }
  function caseLink(id, name, a, b, repeat) {
    const q = new URLSearchParams({name});
    if (a) q.set("a", a);
    if (b) q.set("b", b);
    if (repeat) q.set("repeat", String(repeat));
    return evalLink(id) + "/case?" + q.toString();
  }
  function mean(x) { return typeof x === "number" ? x.toFixed(2) : dash; }
  function text(x) { return x === null || x === undefined ? "" : typeof x === "string" ? x : JSON.stringify(x); }
  function resultText(x) {  // an evaluator's result: an assertion passed or failed, a score, a label
    if (x.kind === "assertions") return x.value ? "passed" : "failed";
    return x.kind === "scores" ? mean(x.value) : String(x.value);
  }
  function delta(d) {  // a difference from the baseline: signed, coloured by its direction
    if (typeof d !== "number") return null;
    const text = Math.abs(d) < 5e-10 ? "±0" : (d > 0 ? "+" : "−") + Math.abs(d).toFixed(2);
    return el("span", {class: "delta " + (d > 5e-10 ? "up" : d < -5e-10 ? "down" : "flat")}, text);
  }
  function runMark(r) {  // a link to one run of a case, marked when it failed
    const label = "run " + (r.repeat || 1);
    if (!r.run_id) return el("span", {class: "run-link failed", title: r.error || ""}, label + " (not run)");
    return el("a", {href: runLink(r.run_id), class: "run-link" + (r.ok ? "" : " failed"), title: r.error || r.run_id,
                    "data-run-id": r.run_id}, label + (r.ok ? "" : " ✗"));
  }
  function navigate(params) {  // this page again, with these query parameters changed
    const q = new URLSearchParams(location.search);
    for (const [k, v] of Object.entries(params)) q.set(k, String(v));
    location.search = q.toString();
  }

  function renderEvals() {
    where(data.store);
    document.title = "fsmchat evaluations";
    const table = el("table", {id: "evals"},
      el("thead", {}, el("tr", {}, ["evaluation", "variants", "cases", "runs", "failed", "model calls", "means",
                                     "started"].map((h, i) => el("th", {class: i >= 2 && i <= 5 ? "num" : null}, h)))),
      el("tbody", {}, data.evals.map((e) => el("tr", {"data-eval-id": e.eval_id},
        el("td", {}, el("a", {href: evalLink(e.eval_id)}, e.name), el("div", {class: "muted"}, e.eval_id)),
        el("td", {}, e.variants.join(", ")),
        [e.cases, e.runs, e.failed, e.calls].map((n) => el("td", {class: "num"}, num(n))),
        el("td", {class: "means"}, Object.entries(e.means).map(([v, stats]) => el("div", {},
          el("b", {}, v + ": "), Object.entries(stats).map(([k, m]) => `${k} ${mean(m)}`).join(", ")))),
        el("td", {class: "when"}, when(e.created))))));
    fill(app, el("h1", {}, "Evaluations"),
      data.evals.length ? table : el("p", {id: "no-evals"}, "No evaluations in this store yet: " +
        "Eval(..., checkpoint=store) or fsmchat eval FILE.py --db STORE keeps one beside its runs."));
  }

  function renderEval() {
    const e = data.eval, base = data.baseline;
    where(data.store);
    document.title = `evaluation ${e.name} ${e.eval_id}`;
    const pick = el("select", {id: "baseline"},
      data.variants.map((v) => el("option", {value: v, selected: v === base}, v)));
    const baseMark = (v) => v === base ? el("span", {class: "muted"}, " (baseline)") : null;
    pick.addEventListener("change", () => navigate({baseline: pick.value}));
    const summary = el("table", {id: "eval-summary"}, el("thead", {}, el("tr", {}, el("th", {}, "evaluator"),
        data.variants.map((v) => el("th", {class: "num", "data-variant": v}, v, baseMark(v))))),
      el("tbody", {}, data.summary.map((row) => el("tr", {"data-evaluator": row.evaluator},
        el("td", {}, row.evaluator), data.variants.map((v) => {
          const st = row.cells[v];
          return el("td", {class: "num", "data-variant": v}, st ? mean(st.mean) : dash,
            st && st.n > 1 && st.low !== st.high ?
              el("span", {class: "muted"}, ` [${mean(st.low)}, ${mean(st.high)}]`) : null,
            st ? delta(st.delta) : null);
        }))),
        el("tr", {"data-evaluator": "failed runs"}, el("td", {}, "failed runs"),
          data.variants.map((v) => el("td", {class: "num", "data-variant": v}, num(data.failed[v]))))));
    const cases = el("table", {id: "eval-cases"}, el("thead", {}, el("tr", {}, el("th", {}, "case"),
        data.variants.map((v) => el("th", {"data-variant": v}, v, baseMark(v))),
        el("th", {}, "transcripts"))),
      el("tbody", {}, data.cases.map((c) => el("tr", {"data-case": c.case},
        el("td", {class: "case"}, el("b", {}, c.case), el("div", {class: "muted task"}, c.task || "")),
        data.variants.map((v) => caseCell(c.cells[v], v)),
        el("td", {class: "compare"}, data.variants.filter((v) => v !== base).map((v) =>
          el("div", {}, el("a", {href: caseLink(e.eval_id, c.case, base, v), class: "diff-link", "data-b": v},
            `diff ${base} vs ${v}`))))))));
    fill(app,
      el("h1", {}, "Evaluation ", e.name),
      el("div", {class: "muted"}, "evaluation ", el("code", {id: "eval-id"}, e.eval_id)),
      el("dl", {class: "summary", id: "summary"}, [["cases", num(e.cases)], ["variants", num(data.variants.length)],
        ["repeats", num(e.repeat)], ["runs", num(e.runs)], ["failed runs", num(e.failed)], ["model calls", num(e.calls)],
        ["from the cassette", num(e.recorded)], ["started", when(e.created)]].map(([k, v]) =>
          el("div", {}, el("dt", {}, k), el("dd", {"data-field": k}, v)))),
      el("div", {class: "filter"}, el("label", {}, "baseline ", pick),
        el("span", {class: "muted"}, " each variant's difference is from the baseline's mean")),
      el("h2", {}, "Summary ", el("span", {class: "muted"}, "(mean over cases × repeats, 95% interval)")), summary,
      el("h2", {}, "Cases ",
        el("span", {class: "muted"}, `(${data.cases.length}; each value the mean over the case's repeats)`)),
      cases);
  }

  function caseCell(cell, variant) {
    if (!cell || !cell.runs.length) return el("td", {"data-variant": variant, class: "muted"}, "not run");
    const values = data.evaluators.filter((ev) => cell.values[ev.name] !== null || cell.labels[ev.name]);
    return el("td", {"data-variant": variant},
      el("ul", {class: "values"}, values.map((ev) => el("li", {"data-evaluator": ev.name},
        el("span", {class: "muted"}, ev.name + " "),
        cell.labels[ev.name] ? cell.labels[ev.name].join(", ") : mean(cell.values[ev.name]),
        delta(cell.deltas[ev.name])))),
      el("div", {class: "output", title: "the first run's output"}, text(cell.runs[0].output)),
      cell.runs.filter((r) => !r.ok).slice(0, 1).map((r) => el("div", {class: "error"}, r.error || "failed")),
      el("div", {class: "runs"}, cell.runs.map(runMark)));
  }

  function renderEvalCase() {
    const e = data.eval;
    where(data.store);
    document.title = `case ${data.case} of evaluation ${e.name}`;
    const select = (id, values, chosen, key) => {
      const s = el("select", {id},
        values.map((v) => el("option", {value: v, selected: String(v) === String(chosen)}, String(v))));
      s.addEventListener("change", () => navigate({[key]: s.value}));
      return s;
    };
    const runs = el("table", {id: "case-runs"}, el("thead", {}, el("tr", {},
        ["variant", "repeat", "run", "status", "output", "evaluators"].map((h) =>
          el("th", {class: h === "repeat" ? "num" : null}, h)))),
      el("tbody", {}, data.runs.map((r) => el("tr", {"data-variant": r.variant, "data-repeat": r.repeat},
        el("td", {}, r.variant), el("td", {class: "num"}, num(r.repeat)), el("td", {}, runMark(r)),
        el("td", {}, r.ok ? el("span", {class: "badge finished"}, "ran") : el("span", {class: "badge failed"}, "failed"),
          r.error ? el("div", {class: "error"}, r.error) : null),
        el("td", {class: "output"}, text(r.output)),
        el("td", {}, el("ul", {class: "values"}, r.results.map((x) => el("li", {"data-evaluator": x.evaluator},
          el("b", {}, x.evaluator + " "), resultText(x),
          x.reason ? el("div", {class: "muted reason"}, x.reason) : null))))))));
    const side = (s) => el("th", {}, `${s.variant}, repeat ${s.repeat} `,
      s.run_id ? el("a", {href: runLink(s.run_id)}, s.run_id) : null);
    const cellOf = (side, cls) => side === null ? el("td", {class: cls + " empty"}) :
      el("td", {class: cls}, el("span", {class: "role"}, side.role),
        el("div", {class: "content"}, side.segments.map(([op, text]) => el("span", {class: op}, text))));
    const notes = [data.a, data.b].filter((s) => s.note).map((s) => el("li", {}, s.note));
    const diff = el("table", {id: "diff"}, el("thead", {}, el("tr", {}, side(data.a), side(data.b))),
      el("tbody", {}, data.diff.map((row) => el("tr", {class: "op-" + row.op, "data-op": row.op},
        cellOf(row.a, "a"), cellOf(row.b, "b")))));
    fill(app,
      el("div", {class: "muted"}, el("a", {href: evalLink(e.eval_id), id: "back"}, "evaluation " + e.name), " · case"),
      el("h1", {}, "Case ", data.case),
      el("p", {class: "task", id: "task"}, data.task || ""),
      el("h2", {}, "Runs"), runs,
      el("h2", {}, "Transcripts diffed"),
      el("div", {class: "filter"}, el("label", {}, "A ", select("diff-a", data.variants, data.a.variant, "a")), " ",
        el("label", {}, "B ", select("diff-b", data.variants, data.b.variant, "b")), " ",
        el("label", {}, "repeat ", select("diff-repeat", data.repeats, data.a.repeat, "repeat"))),
      notes.length ? el("ul", {class: "notes", id: "diff-notes"}, notes) : null,
      data.same ? el("p", {id: "diff-same", class: "muted"}, "The two transcripts are the same.") : null,
      data.diff.length ? diff : null);
  }

  document.addEventListener("keydown", (e) => {
    if (data.kind !== "run" || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.target && e.target.id === "slider") return;  // the slider moves itself on arrow keys
    if (e.target && ["INPUT", "SELECT", "TEXTAREA"].includes(e.target.tagName)) return;
    const to = {ArrowLeft: current - 1, ArrowRight: current + 1, Home: 0, End: data.steps.length - 1}[e.key];
    if (to !== undefined) { e.preventDefault(); show(to); }
  });

  ({runs: renderRuns, run: renderRun, evals: renderEvals, eval: renderEval, eval_case: renderEvalCase})[data.kind]();
  window.fsmchatViewer = {show: (i) => show(i), step: () => current};
  if (settings.live && (data.kind === "runs" || data.run.status === "running")) setTimeout(poll, POLL_MS);
})();
