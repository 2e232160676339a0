// Group cards of the error browser (window.SQGroups): per group its count, first and last failure, when it was last
// retried (by whom, through which run) and how many of its messages failed again after a retry; and the whole-group
// actions (return, batched retry, archive, delete), each behind a confirmation that names how many messages it takes.
// The server refuses a group action when the group no longer holds the confirmed count (nothing changed).
"use strict";
(() => {
  const { el, api, post, formatTime } = window.SQ;

  function words(g, by) {
    const value = g[by];
    return value === null || value === undefined ? `without a ${by.replace("_", " ")}` : `"${value}"`;
  }

  function body(g, extra = {}) {  // the group's own filter (the "(none)" group: missing), never "every message"
    return { ...g.filter, ...extra };
  }

  async function action(kind, g, ctx) {
    const conn = encodeURIComponent(ctx.state.conn);
    const name = words(g, ctx.state.groupBy);
    const n = g.count;
    const say = (text, isError = false) => {
      const out = document.getElementById("action-result");
      out.className = isError ? "error" : "";
      out.textContent = text;
    };
    try {
      if (kind === "retry") {
        if (!window.confirm(`Return all ${n} message(s) of the group ${name} to their queues?`)) return;
        const data = await post(`connections/${conn}/failed/group/retry`, body(g, { expected: n }));
        say(`returned ${data.total_returned} of ${n}` + (data.left.length ? `; ${data.left.length} stayed: ` +
          data.left.slice(0, 3).map((x) => x.reason).join("; ") : ""));
      } else if (kind === "batch") {
        if (!window.confirm(`Start a batched retry (an Airflow DAG run, batches of 500) of the ${n} message(s) ` +
          `of the group ${name}?`)) return;
        const request = { ...body(g), batch_size: 500, max_messages: n };
        delete request.expected;
        const data = await post(`connections/${conn}/batch-retries`, request);
        say(`started batched retry ${data.run_id}` + (data.hint ? ` (${data.hint})` : ""));
        document.getElementById("batch").open = true;
      } else if (kind === "archive") {
        if (!window.confirm(`Archive the ${n} message(s) of the group ${name} (moved out of the error queue ` +
          "into the error archive, where they can be restored)?")) return;
        const { missing, ...fields } = g.filter;
        const data = await post(`connections/${conn}/archives`, { ...fields, missing: missing || [], max_messages: n });
        say(`archived ${data.deleted ?? data.rows ?? n} into ${data.archive_id}`);
      } else if (kind === "delete") {
        if (!window.confirm(`Delete all ${n} message(s) of the group ${name}? This cannot be undone.`)) return;
        const data = await post(`connections/${conn}/failed/group/delete`, body(g, { expected: n }));
        say(`deleted ${data.deleted} of ${n}`);
      }
    } catch (e) {
      say(e.message, true);
    }
    await ctx.after();
  }

  // Which permission each group action needs (a batched retry is a retry; the server also checks the DAG).
  const NEEDS = { retry: "retry", batch: "retry", archive: "archive", delete: "delete" };

  function card(g, ctx, active) {
    const allowed = ctx.state.allowed || {};
    // Shown only to users with that action's permission (the server answers 403 to the others anyway).
    const button = (kind, text, cls) => el("button", { type: "button", class: `btn ${cls} group-${kind}`,
      hidden: !allowed[NEEDS[kind]],
      disabled: kind === "retry" && g.count > ctx.maxReturn,
      title: kind === "retry" && g.count > ctx.maxReturn ? `more than ${ctx.maxReturn}: use the batched retry` : null,
      "aria-label": `${text}: ${g.count} message(s) of ${words(g, ctx.state.groupBy)}`,
      onclick: () => action(kind, g, ctx) }, text);
    const select = el("button", { type: "button", class: "group", "aria-pressed": String(active),
      dataset: { key: g[ctx.state.groupBy] === null ? "" : g[ctx.state.groupBy] },
      title: `list the messages of this group`, onclick: () => ctx.select(g) },
    ctx.label(g), el("span", { class: "count" }, g.count));
    return el("article", { class: "group-card", role: "listitem", dataset: { key: select.dataset.key } }, select,
      el("dl", { class: "group-facts" },
        el("dt", {}, "failures"), el("dd", {}, `${formatTime(g.first_failure)} – ${formatTime(g.last_failure)}`),
        el("dt", {}, "last retried"), el("dd", { class: "last-retried" }, g.last_retried === undefined ? "…"
          : (g.last_retried ? `${formatTime(g.last_retried)} by ${g.last_retried_by}` +
            (g.last_run_id ? ` (run ${g.last_run_id})` : "") : "not in the last 30 days")),
        el("dt", {}, "failed again"), el("dd", { class: "failed-again" }, g.failed_again === undefined ? "…"
          : String(g.failed_again))),
      el("div", { class: "toolbar group-actions" }, button("retry", "Retry group", "primary"),
        button("batch", "Batched retry", ""), button("archive", "Archive group", ""),
        button("delete", "Delete group", "danger")));
  }

  // ctx: {state, select(group), label(group), after(), active(group)}
  async function render(target, data, ctx) {
    ctx.maxReturn = 1000;
    const draw = (groups) => {
      target.replaceChildren(...groups.map((g) => card(g, ctx, ctx.active(g))));
      if (!groups.length) target.replaceChildren(el("p", {}, "the error queue is empty"));
    };
    draw(data.groups);
    try {
      const cards = await api(`connections/${encodeURIComponent(ctx.state.conn)}/failed/group-cards?by=${ctx.state.groupBy}`);
      ctx.maxReturn = cards.max_return;
      draw(cards.groups);
    } catch (e) {
      target.append(el("p", { class: "error" }, `retry history: ${e.message}`));
    }
  }

  // The list's rows: a link to each message's page and, for a message retried before, how often and when.
  async function decorateRows(connId, messages) {
    for (const m of messages) {
      const row = document.querySelector(`#messages tr.message[data-seq="${m.seq}"]`);
      const cell = row && row.cells[1];
      if (cell && !cell.querySelector("a")) {
        cell.replaceChildren(el("a", { href: window.SQ.messageUrl(connId, m.id, m.seq), class: "message-link",
          title: "the page of this message (a link to share)" }, String(m.seq)));
      }
    }
    if (!messages.length) return;
    try {
      const query = new URLSearchParams();
      for (const m of messages.slice(0, 100)) query.append("id", m.id);
      const data = await api(`connections/${encodeURIComponent(connId)}/failed/retried?${query}`);
      for (const m of messages) {
        const seen = data.retried[m.id];
        const row = document.querySelector(`#messages tr.message[data-seq="${m.seq}"]`);
        if (!seen || !row) continue;
        row.cells[4].append(el("span", { class: "badge retried", title: `retried ${seen.retries} time(s), last ` +
          `${formatTime(seen.last_retried)} by ${seen.last_retried_by}; it failed again` }, "failed again"));
      }
    } catch (e) { /* the history is extra: the list stands without it */ }
  }

  window.SQGroups = { render, decorateRows };
})();
