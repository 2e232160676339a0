// The "SQL Queues" page: plain DOM, no framework, no CDN. Calls the dashboard API beside it with the Airflow
// session cookie (same origin). Text from the server (queue names, headers, bodies: untrusted input from other
// systems) is always set with textContent, never parsed as HTML.
"use strict";

// Shared with the message page (common.js, loaded first): the theme, DOM building with text only, API calls.
const { BASE, el, api, formatTime, copyText } = window.SQ;
const PAGE_SIZE = 50;
// allowed: the actions the user may take on the connection (GET .../permissions); a button shows only with its own
const state = { conn: null, canEdit: false, allowed: {}, selected: new Map(), groupBy: "exception_type", filter: {},
  search: "", cursors: [0], page: 0, next: null, editRetry: false, messages: new Map(), runsTimer: null,
  retryQueues: [], failureHeaders: [] };

function setStatus(text, isError = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "";
}

// -- ages, flows and rates as the overview shows them (times: SQ.formatTime) --------------------------------------
function formatAge(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
  return `${(seconds / 86400).toFixed(1)} d`;
}

function formatFlow(flow) {
  if (flow === null || flow === undefined) return "-";
  return (flow > 0 ? "+" : "") + flow.toFixed(2);
}

function formatRate(rate) {
  if (rate === null || rate === undefined) return "-";
  return rate.toFixed(2);
}

function formatThresholds(t) {
  const parts = [];
  if (t.max_depth !== undefined && t.max_depth !== null) parts.push(`depth ≤ ${t.max_depth}`);
  if (t.max_age_seconds !== undefined && t.max_age_seconds !== null) parts.push(`age ≤ ${t.max_age_seconds} s`);
  return parts.join(", ") || "-";
}

// -- the panel above the queues: opening it scrolls it into view and moves the focus to its title ---------------
function openPanel(kind, title) {
  const panel = document.getElementById("panel");
  panel.hidden = false;
  document.getElementById("detail").hidden = kind !== "detail";
  document.getElementById("errors").hidden = kind !== "errors";
  const heading = document.getElementById("panel-title");
  heading.textContent = title;
  panel.scrollIntoView({ block: "start" });
  heading.focus({ preventScroll: true });
}

function closePanel() {
  document.getElementById("panel").hidden = true;
  clearTimeout(state.runsTimer);
  state.conn = null;
  state.runsSeen = undefined;
  document.getElementById("connections").focus();
}

// -- overview ---------------------------------------------------------------------------------------------------
function queueTable(conn) {
  const head = el("tr", {}, el("th", { scope: "col" }, "queue"), el("th", { scope: "col", class: "num" }, "depth"),
    el("th", { scope: "col", class: "num" }, "critical time (oldest)"),
    el("th", { scope: "col", class: "num" }, "sent /min"), el("th", { scope: "col", class: "num" }, "net flow /min"),
    el("th", { scope: "col" }, "thresholds"), el("th", { scope: "col" }, "over threshold"));
  const rows = conn.queues.map((q) => {
    const name = el("button", { class: "btn link", type: "button", title: `depth of ${q.queue} over time`,
      onclick: () => showHistory(conn.conn_id, q.queue, q.thresholds) }, q.queue);
    const extra = q.is_error_queue ? el("button", { class: "btn link browse", type: "button",
      onclick: () => showErrors(conn.conn_id) }, " browse failed messages") : null;
    return el("tr", { class: q.breaches.length ? "breach" : "", dataset: { conn: conn.conn_id, queue: q.queue } },
      el("td", { class: "queue" }, name, extra ? " · " : null, extra),
      el("td", { class: "num depth", title: q.depth_exact ? "exact count" : "estimate" },
        q.depth === null ? "-" : q.depth),
      el("td", { class: "num age" }, formatAge(q.oldest_age_seconds)),
      el("td", { class: "num throughput" }, formatRate(q.throughput_per_minute)),
      el("td", { class: "num flow" }, formatFlow(q.net_flow_per_minute)),
      el("td", {}, formatThresholds(q.thresholds)),
      el("td", { class: "breaches" }, q.breaches.join("; ")));
  });
  return el("table", { class: "grid" }, el("thead", {}, head), el("tbody", {}, ...rows));
}

async function loadOverview() {
  setStatus("loading…");
  const main = document.getElementById("connections");
  try {
    const data = await api("overview");
    main.replaceChildren(...data.connections.map((conn) => el("section", { class: "connection card",
      dataset: { conn: conn.conn_id }, "aria-label": `connection ${conn.conn_id}` },
      el("div", { class: "card-head" }, el("h2", {}, `Connection ${conn.conn_id}`),
        conn.error ? null : el("button", { type: "button", class: "btn browse-errors",
          onclick: () => showErrors(conn.conn_id) }, `Browse failed messages (${conn.error_queue})`)),
      conn.error ? el("p", { class: "error" }, conn.error)
                 : (conn.queues.length ? queueTable(conn) : el("p", {}, "no queues found")))));
    main.setAttribute("aria-busy", "false");
    setStatus(`configuration: ${data.source}; updated ${formatTime(new Date())}`);
  } catch (e) {
    setStatus(e.message, true);
  }
}

// -- depth over time (inline SVG) -------------------------------------------------------------------------------
function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

function lineChart(samples, value, options) {
  const width = 900, height = 200, left = 60, right = 10, top = 10, bottom = 30;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", class: options.kind,
    "aria-label": `${options.title}; the same figures are in the table below` });
  chart.append(svg("title", {}, options.title));
  const points = samples.map((s) => [Date.parse(s.sampled_at), value(s)]).filter(([, v]) => v !== null && v !== undefined);
  if (!points.length) {
    chart.append(svg("text", { x: left, y: height / 2 }, options.empty));
    return chart;
  }
  const times = samples.map((s) => Date.parse(s.sampled_at));
  const t0 = Math.min(...times), t1 = Math.max(...times);
  const yMax = Math.max(1, ...points.map(([, v]) => v), options.limit || 0);
  const x = (t) => left + (t1 === t0 ? (width - left - right) / 2 : (t - t0) / (t1 - t0) * (width - left - right));
  const y = (d) => top + (1 - d / yMax) * (height - top - bottom);
  chart.append(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }),
    svg("text", { x: 4, y: top + 10 }, String(Math.round(yMax * 100) / 100)), svg("text", { x: 4, y: height - bottom }, "0"),
    svg("text", { x: left, y: height - 8 }, formatTime(new Date(t0))),
    svg("text", { x: width - right, y: height - 8, "text-anchor": "end" }, formatTime(new Date(t1))));
  if (options.limit !== undefined && options.limit !== null) {
    chart.append(svg("line", { class: "limit", x1: left, y1: y(options.limit), x2: width - right, y2: y(options.limit) }));
  }
  chart.append(svg("polyline", { class: "series", points: points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ") }));
  for (const [t, v] of points) {
    const dot = svg("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, class: "dot" });
    dot.append(svg("title", {}, `${formatTime(new Date(t))}: ${v}`));
    chart.append(dot);
  }
  return chart;
}

function plot(samples, maxDepth) {
  return lineChart(samples, (s) => s.depth, { kind: "depth-chart", title: "depth over time", limit: maxDepth,
    empty: "no samples recorded in this period" });
}

function historyTable(samples) {
  return el("table", { class: "grid history-table" },
    el("caption", {}, "Samples: depth, messages sent per minute since the previous sample, critical time"),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "sampled at"), el("th", { scope: "col", class: "num" }, "depth"),
      el("th", { scope: "col", class: "num" }, "sent /min"), el("th", { scope: "col", class: "num" }, "critical time (oldest)"))),
    el("tbody", {}, ...samples.map((s) => el("tr", {}, el("td", {}, formatTime(s.sampled_at)),
      el("td", { class: "num" }, s.depth), el("td", { class: "num" }, formatRate(s.throughput_per_minute)),
      el("td", { class: "num" }, formatAge(s.oldest_age_seconds))))));
}

async function showHistory(connId, queue, thresholds) {
  openPanel("detail", `Depth and throughput of ${queue} on ${connId}, last 24 h`);
  const target = document.getElementById("plot");
  target.replaceChildren("loading…");
  try {
    const data = await api(`connections/${encodeURIComponent(connId)}/history?queue=${encodeURIComponent(queue)}`);
    target.replaceChildren(
      el("h3", {}, "Depth"), plot(data.samples, thresholds.max_depth),
      el("h3", {}, "Throughput (messages sent per minute)"),
      lineChart(data.samples, (s) => s.throughput_per_minute, { kind: "throughput-chart",
        title: "messages sent per minute over time", empty: "no throughput yet (it needs two samples of a non-empty queue)" }),
      el("p", {}, `${data.samples.length} samples; net flow ${formatFlow(data.net_flow_per_minute)} per minute ` +
        "between the two latest samples"),
      el("details", { class: "more history" }, el("summary", {}, "The samples as a table"), historyTable(data.samples)));
  } catch (e) {
    target.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

// -- error-queue browser ----------------------------------------------------------------------------------------
// Each action's button shows only to a user with that action's permission (retry, delete, ...): never a button
// whose click can only answer 403.
async function loadAllowed() {
  const connId = state.conn;
  try {
    const data = await api(`connections/${encodeURIComponent(connId)}/permissions`);
    if (state.conn === connId) state.allowed = data.actions;
  } catch (e) {
    state.allowed = {};
    setStatus(e.message, true);
  }
  updateButtons();
}

function updateButtons() {
  const none = state.selected.size === 0;
  for (const id of ["retry", "delete"]) {
    const button = document.getElementById(id);
    button.hidden = !state.allowed[id];
    button.disabled = none;
    button.title = none ? "select messages first" : "";
  }
  document.getElementById("selection-count").textContent = none ? "" : `${state.selected.size} selected`;
  document.getElementById("scope-count").textContent = String(state.selected.size);
  const selection = document.getElementById("scope-selection");
  selection.disabled = none;
  if (none && selection.checked) document.querySelector("#batch-form input[value=group]").checked = true;
  const start = document.getElementById("batch-start");
  start.hidden = !state.allowed.retry;
  start.disabled = !state.allowed.retry;
  const boxes = [...document.querySelectorAll("#messages tbody input[type=checkbox]")];
  const all = document.getElementById("select-page");
  all.checked = boxes.length > 0 && boxes.every((b) => b.checked);
  all.disabled = boxes.length === 0;
}

function shortType(text) {
  if (!text) return "-";
  const first = text.split(";")[0].split(",")[0];
  return first.length > 80 ? first.slice(0, 80) + "…" : first;
}

// -- one message's details: a full-width row under it (failure, headers with filter and copy, body) ------------
function headersView(message) {
  if (message.headers) {
    const rows = Object.entries(message.headers).filter(([key]) => key !== "NServiceBus.ExceptionInfo.StackTrace")
      .map(([key, value]) => {
        const text = value === null ? "null" : value;
        const copy = el("button", { type: "button", class: "btn ghost copy", "aria-label": `copy the value of ${key}` }, "Copy");
        copy.addEventListener("click", () => copyText(text, copy));
        return el("tr", { dataset: { header: key } }, el("th", { scope: "row" }, key), el("td", { class: "value" }, text),
          el("td", {}, copy));
      });
    const table = el("table", { class: "grid headers-table" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "header"), el("th", { scope: "col" }, "value"),
        el("th", { scope: "col" }, el("span", { class: "skip" }, "copy")))),
      el("tbody", {}, ...rows));
    const filter = el("input", { type: "search", class: "header-filter", placeholder: "filter headers",
      "aria-label": "filter the headers by name or value" });
    filter.addEventListener("input", () => {
      const wanted = filter.value.toLowerCase();
      for (const row of table.tBodies[0].rows) row.hidden = wanted !== "" && !row.textContent.toLowerCase().includes(wanted);
    });
    return el("div", {}, el("div", { class: "toolbar" }, filter), table);
  }
  return el("pre", { class: "raw-headers" }, message.headers_preview +
    (message.headers_truncated ? `\n… (${message.headers_length} characters in all)` : ""));
}

function detailView(message) {
  const headers = message.headers || {};
  const edit = state.editRetry && state.allowed.edit_retry ? el("button", { type: "button", class: "btn edit-retry",
    onclick: () => openEditor(message) }, "Edit and retry") : null;
  const conversation = headers["NServiceBus.ConversationId"];
  const same = conversation ? el("button", { type: "button", class: "btn ghost same-conversation",
    onclick: () => { document.getElementById("search").value = conversation; state.search = conversation; restart(); } },
  "Failed messages of the same conversation") : null;
  const facts = [["Id", message.id], ["position", String(message.seq)], ["failed at", formatTime(message.time_of_failure)],
    ["failing queue", message.failed_q || "-"], ["exception", message.exception_type || "-"],
    ["processing endpoint", headers["NServiceBus.ProcessingEndpoint"] || "-"],
    ["machine", headers["NServiceBus.ProcessingMachine"] || "-"]];
  const bodyCopy = el("button", { type: "button", class: "btn ghost copy" }, "Copy");
  bodyCopy.addEventListener("click", () => copyText(message.body_preview, bodyCopy));
  return el("div", { class: "message-detail-body" },
    message.bad.length ? el("ul", { class: "bad-reasons" }, ...message.bad.map((r) => el("li", {}, r))) : null,
    el("div", { class: "toolbar" }, edit, same),
    el("dl", { class: "facts" }, ...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    message.exception_message ? el("div", {}, el("h4", {}, "Exception message"),
      el("pre", { class: "exception-message" }, message.exception_message)) : null,
    message.stack_trace ? el("div", {}, el("h4", {}, "Stack trace"), el("pre", { class: "stack" }, message.stack_trace)) : null,
    el("div", {}, el("h4", {}, "Headers" + (message.headers_truncated ? " (preview)" : "")), headersView(message)),
    el("div", {}, el("h4", {}, `Body (${message.body_length} bytes${message.body_binary ? ", binary, shown as hex" : ""}` +
      `${message.body_truncated ? ", preview" : ""}) `, bodyCopy), el("pre", { class: "body" }, message.body_preview)));
}

function messageRow(message) {
  const key = `${message.seq}/${message.id}`;
  const box = el("input", { type: "checkbox", "aria-label": `select message ${message.id} at position ${message.seq}` });
  box.checked = state.selected.has(key);
  box.addEventListener("change", () => {
    if (box.checked) state.selected.set(key, { seq: message.seq, id: message.id }); else state.selected.delete(key);
    updateButtons();
  });
  const bad = message.bad.length ? el("span", { class: "badge", title: message.bad.join("; ") }, "bad") : null;
  state.messages.set(key, message);
  const detailRow = el("tr", { class: "message-detail", hidden: true, dataset: { seq: String(message.seq) } },
    el("td", { colspan: "7" }));
  // the toggle stays in the row; what it opens is a full-width row under it, built when first opened
  const toggle = el("details", { class: "more" }, el("summary", {}, message.exception_message
    ? (message.exception_message.length > 120 ? message.exception_message.slice(0, 120) + "…" : message.exception_message)
    : "headers and body"));
  toggle.addEventListener("toggle", () => {
    if (toggle.open && !detailRow.firstChild.firstChild) detailRow.firstChild.append(detailView(message));
    detailRow.hidden = !toggle.open;
  });
  const row = el("tr", { class: "message" + (message.bad.length ? " bad" : ""), dataset: { seq: String(message.seq), id: message.id } },
    el("td", {}, box), el("td", { class: "num" }, message.seq), el("td", {}, formatTime(message.time_of_failure)),
    el("td", {}, message.failed_q || "-"), el("td", {}, message.exception_type || "-", bad),
    el("td", {}, shortType(message.message_type)), el("td", {}, toggle));
  return [row, detailRow];
}

function groupLabel(group) {
  const value = group[state.groupBy];
  return value === null || value === undefined ? "(none)" : (state.groupBy === "message_type" ? shortType(value) : value);
}

// -- the filter of a group: {field: value, ..., missing: [fields without a value]} -------------------------------
function filterKey(filter) {
  const keys = Object.keys(filter || {}).filter((k) => k !== "missing").sort();
  return JSON.stringify([keys.map((k) => [k, filter[k]]), [...((filter || {}).missing || [])].sort()]);
}

function filterWords(filter) {
  const words = Object.entries(filter).filter(([k]) => k !== "missing").map(([k, v]) => `${k.replace("_", " ")} ${v}`);
  for (const k of filter.missing || []) words.push(`no ${k.replace("_", " ")}`);
  return words;
}

function filterParams(params, filter) {
  for (const [key, value] of Object.entries(filter)) {
    if (key === "missing") for (const field of value) params.append("missing", field);
    else params.set(key, value);
  }
}

async function loadGroups() {
  const target = document.getElementById("groups");
  try {
    const data = await api(`connections/${encodeURIComponent(state.conn)}/failed/groups?by=${state.groupBy}`);
    state.canEdit = data.can_edit;
    state.total = data.total;
    const active = filterKey(state.filter);
    if (window.SQGroups) {  // group cards with history and whole-group actions: groups.js
      window.SQGroups.render(target, data, { state, label: groupLabel, active: (g) => active === filterKey(g.filter),
        select: (g) => { state.filter = g.filter; restart(); },
        after: () => Promise.all([loadGroups().then(loadPage), loadOverview(), loadRuns()]) });
      return data;
    }
    // a group's filter comes from the server: the "(none)" group filters to messages without that field
    target.replaceChildren(...data.groups.map((g) => el("button", { type: "button", class: "group", role: "listitem",
      "aria-pressed": String(active === filterKey(g.filter)),
      dataset: { key: g[state.groupBy] === null ? "" : g[state.groupBy] },
      title: `first failure ${formatTime(g.first_failure)}, last ${formatTime(g.last_failure)}`,
      onclick: () => { state.filter = g.filter; restart(); } },
      groupLabel(g), el("span", { class: "count" }, g.count))));
    if (!data.groups.length) target.replaceChildren(el("p", {}, "the error queue is empty"));
    return data;
  } catch (e) {
    target.replaceChildren(el("p", { class: "error" }, e.message));
    return null;
  }
}

async function loadPage() {
  const body = document.querySelector("#messages tbody");
  const caption = document.getElementById("messages-caption");
  const after = state.cursors[state.page];
  const params = new URLSearchParams({ after: String(after), limit: String(PAGE_SIZE) });
  filterParams(params, state.filter);
  if (state.search) params.set("search", state.search);
  try {
    const data = await api(`connections/${encodeURIComponent(state.conn)}/failed?${params}`);
    state.canEdit = data.can_edit;
    state.editRetry = Boolean(data.edit_retry);
    state.failureHeaders = data.failure_headers || [];
    state.next = data.next_after;
    state.messages.clear();
    body.replaceChildren(...data.messages.flatMap(messageRow));
    const filters = filterWords(state.filter);
    if (state.search) filters.push(`text containing "${state.search}" (headers, Id or body)`);
    // a filtered page reads a bounded number of rows: fewer listed with a next page means "read on"
    const partial = data.next_after !== null && data.messages.length < PAGE_SIZE;
    caption.textContent = `${state.total ?? "?"} failed messages in ${data.error_queue}` +
      (filters.length ? `; showing those with ${filters.join(", ")}` : "") +
      `; page ${state.page + 1}: ${data.messages.length} listed` +
      (partial ? ` (looked up to position ${data.next_after}; Next looks further)` : "");
    document.getElementById("page-label").textContent = `page ${state.page + 1}`;
    document.getElementById("prev-page").disabled = state.page === 0;
    document.getElementById("first-page").disabled = state.page === 0;
    document.getElementById("next-page").disabled = state.next === null;
    if (!data.messages.length) body.replaceChildren(el("tr", {}, el("td", { colspan: "7" },
      partial ? `none up to position ${data.next_after}: Next looks further` : "no failed messages here")));
    if (window.SQGroups) window.SQGroups.decorateRows(state.conn, data.messages);  // links and retry history
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: "7", class: "error" }, e.message)));
  }
  updateButtons();
}

async function restart() {
  state.cursors = [0];
  state.page = 0;
  const filters = filterWords(state.filter);
  document.getElementById("scope-group-label").textContent = filters.length
    ? `every message with ${filters.join(", ")}` : "every message in the error queue";
  await loadGroups();
  await loadPage();
}

async function showErrors(connId) {
  if (state.conn !== connId) {
    state.selected.clear();
    state.filter = {};
    state.search = "";
    document.getElementById("search").value = "";
  }
  if (state.conn !== connId) state.allowed = {};  // nothing to act with until the server says what the user may do
  state.conn = connId;
  openPanel("errors", `Failed messages of ${connId}`);
  document.getElementById("action-result").textContent = "";
  document.getElementById("batch-result").textContent = "";
  document.getElementById("redirects").replaceChildren();
  await loadAllowed();  // before the list: its rows' buttons (edit and retry) follow it
  await Promise.all([restart(), loadRuns()]);
}

async function act(action) {
  const connId = state.conn;
  const messages = [...state.selected.values()];
  if (!connId || !messages.length) return;
  if (action === "delete" && !window.confirm(`Delete ${messages.length} failed message(s)? This cannot be undone.`)) return;
  const result = document.getElementById("action-result");
  try {
    const data = await api(`connections/${encodeURIComponent(connId)}/failed/${action}`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ messages }) });
    result.className = "";
    result.textContent = action === "retry"
      ? `returned ${data.total_returned}: ` + Object.entries(data.returned).map(([q, n]) => `${n} to ${q}`).join(", ")
      : `deleted ${data.deleted}`;
    state.selected.clear();
  } catch (e) {
    result.className = "error";
    result.textContent = e.message;
  }
  await Promise.all([loadGroups().then(loadPage), loadOverview()]);
}

// -- edit and retry (only when the deployment turned it on and the user may edit) --------------------------------
function openEditor(message) {
  const dialog = document.getElementById("editor");
  const headersBox = document.getElementById("editor-headers");
  const bodyBox = document.getElementById("editor-body");
  const note = document.getElementById("editor-note");
  const error = document.getElementById("editor-error");
  error.hidden = true;
  error.textContent = "";
  state.editing = message;
  const kept = {};
  for (const [key, value] of Object.entries(message.headers || {})) {
    if (!state.failureHeaders.includes(key)) kept[key] = value;
  }
  headersBox.value = JSON.stringify(kept, null, 2);
  headersBox.disabled = !message.headers;
  const bodyEditable = !message.body_binary && !message.body_truncated;
  bodyBox.value = bodyEditable ? message.body_preview : "";
  bodyBox.disabled = !bodyEditable;
  note.textContent = `Message ${message.id} (position ${message.seq}). The edited copy gets a new Id and the header ` +
    "airflow_sqlqueue.EditOf naming this one, goes to the queue it failed in, and this one is deleted. " +
    "Identity, routing and failure headers are protected: the server refuses a change to them." +
    (message.headers ? "" : " The headers are too large to edit here; they are kept.") +
    (bodyEditable ? "" : " The body is binary or too large to edit here; it is kept as it is.");
  dialog.showModal();
  headersBox.focus();
}

function editorValues() {
  const message = state.editing;
  const headersBox = document.getElementById("editor-headers");
  const bodyBox = document.getElementById("editor-body");
  let headers = null;
  if (!headersBox.disabled) {
    try { headers = JSON.parse(headersBox.value); } catch (e) { throw new Error(`the headers are not valid JSON: ${e.message}`); }
    if (!headers || typeof headers !== "object" || Array.isArray(headers) ||
        Object.values(headers).some((v) => v !== null && typeof v !== "string")) {
      throw new Error("the headers must be a JSON object of names to text values (or null)");
    }
  }
  const body = bodyBox.disabled ? null : bodyBox.value;
  const type = String((headers || message.headers || {})["NServiceBus.ContentType"] || "");
  if (body !== null && type.toLowerCase().includes("json")) {
    try { JSON.parse(body); } catch (e) { throw new Error(`the content type is ${type}, but the body is not valid JSON: ${e.message}`); }
  }
  return { seq: message.seq, id: message.id, headers, body };
}

async function sendEdit(event) {
  event.preventDefault();
  const error = document.getElementById("editor-error");
  error.hidden = true;
  let values;
  try { values = editorValues(); } catch (e) { error.textContent = e.message; error.hidden = false; return; }
  try {
    const data = await api(`connections/${encodeURIComponent(state.conn)}/failed/edit-retry`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(values) });
    document.getElementById("editor").close();
    const result = document.getElementById("action-result");
    result.className = "";
    result.textContent = `sent an edited copy ${data.id} of ${data.edit_of} to ${data.queue}`;
    state.selected.delete(`${values.seq}/${values.id}`);
    await Promise.all([loadGroups().then(loadPage), loadOverview()]);
  } catch (e) {
    error.textContent = `refused: ${e.message}`;  // the server's reason, nothing was changed
    error.hidden = false;
  }
}

// -- batched retries: a DAG run each, with progress read back from its progress rows ----------------------------
function queueSelect(label, queues, value) {
  return el("select", { "aria-label": label }, ...queues.map((q) => {
    const option = el("option", { value: q }, q);
    option.selected = q === value;
    return option;
  }));
}

function addRedirect() {
  const queues = state.retryQueues;
  if (!queues.length) return;
  const row = el("div", { class: "redirect toolbar" }, queueSelect("retries for this queue", queues, queues[0]), " → ",
    queueSelect("go to this queue", queues, queues[Math.min(1, queues.length - 1)]),
    el("button", { type: "button", class: "btn ghost", "aria-label": "remove this redirect",
      onclick: () => row.remove() }, "Remove"));
  document.getElementById("redirects").append(row);
  row.querySelector("select").focus();
}

function numberOf(id) {
  const text = document.getElementById(id).value.trim();
  return text === "" ? null : Number(text);
}

async function startBatchRetry(event) {
  event.preventDefault();
  const result = document.getElementById("batch-result");
  const scope = document.querySelector("#batch-form input[name=scope]:checked").value;
  const request = { batch_size: numberOf("batch-size"), ramp_start: numberOf("ramp-start"),
    rate_per_second: numberOf("rate"), max_messages: numberOf("max-messages"), redirects: {} };
  for (const row of document.querySelectorAll("#redirects .redirect")) {
    const [from, to] = row.querySelectorAll("select");
    request.redirects[from.value] = to.value;
  }
  if (scope === "selection") request.positions = [...state.selected.values()];
  else Object.assign(request, state.filter);
  if (state.search && scope !== "selection") {  // a batch takes groups, not a search: say so before starting
    if (!window.confirm("The batched retry takes the group you chose, not the search: start it anyway?")) return;
  }
  try {
    const data = await api(`connections/${encodeURIComponent(state.conn)}/batch-retries`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request) });
    result.className = "";
    if (scope === "selection") { state.selected.clear(); updateButtons(); }  // the run handles them now
    result.replaceChildren(`started `, runLink(data.run_id, data.run_path),
      data.unpaused_dag ? ` (the DAG was paused: unpaused it)` : "", data.hint ? el("p", { class: "hint" }, data.hint) : "");
  } catch (e) {
    result.className = "error";
    result.textContent = e.message;
  }
  await loadRuns();
}

async function cancelRun(runId) {
  const result = document.getElementById("batch-result");
  try {
    await api(`connections/${encodeURIComponent(state.conn)}/batch-retries/cancel`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ run_id: runId }) });
    result.className = "";
    result.textContent = `asked ${runId} to stop before its next batch`;
  } catch (e) {
    result.className = "error";
    result.textContent = e.message;
  }
  await loadRuns();
}

const FINISHED = new Set(["done", "cancelled", "failed"]);

// A run in the Airflow UI (the page sits at <UI base>/sqlqueue/, the run at <UI base>/dags/<dag>/runs/<run>).
function runLink(runId, path) {
  if (!path) return runId;
  return el("a", { href: new URL("../" + path, location.origin + BASE).href, target: "_top", class: "run-link" }, runId);
}

function runRow(run) {
  const done = run.to_do ? Math.min(run.looked_at, run.to_do) : 0;
  const bar = run.to_do !== null && run.to_do !== undefined
    ? el("progress", { max: String(Math.max(run.to_do, 1)), value: String(done),
      "aria-label": `${done} of ${run.to_do} looked at` }) : el("span", {}, "-");
  const returned = Object.entries(run.returned).map(([q, n]) => `${n} to ${q}`).join(", ") || "0";
  const cancel = !FINISHED.has(run.state) && state.allowed.retry ? el("button", { type: "button", class: "btn danger cancel-run",
    "aria-label": `cancel ${run.run_id}`, onclick: () => cancelRun(run.run_id) }, "Cancel") : null;
  const left = run.left_count ? el("details", { class: "more" }, el("summary", {}, String(run.left_count)),
    el("ul", { class: "left-reasons" }, ...run.left.map((x) => el("li", {}, `${x.id}: ${x.reason}`)))) : "0";
  return el("tr", { class: `run state-${run.state}`, dataset: { run: run.run_id, state: run.state } },
    el("td", { class: "run-id" }, runLink(run.run_id, run.run_path)), el("td", {}, run.triggered_by || "-"),
    el("td", {}, formatTime(run.started_at || run.queued_at)),
    el("td", { class: "state" }, run.state + (run.cancel_requested_by && run.state !== "cancelled"
      ? ` (cancel asked by ${run.cancel_requested_by})` : ""), run.hint ? el("p", { class: "hint" }, run.hint) : null),
    el("td", {}, bar), el("td", { class: "num batches" }, run.batches_done),
    el("td", { class: "returned" }, returned), el("td", { class: "num left" }, left),
    el("td", { class: "num remaining" }, run.remaining === null ? "-" : run.remaining), el("td", {}, cancel));
}

async function loadRuns() {
  clearTimeout(state.runsTimer);
  if (!state.conn) return;
  const body = document.querySelector("#runs tbody");
  try {
    const data = await api(`connections/${encodeURIComponent(state.conn)}/batch-retries`);
    state.canEdit = data.can_edit;
    state.retryQueues = data.queues;
    document.getElementById("add-redirect").disabled = !data.queues.length;
    body.replaceChildren(...data.runs.map(runRow));
    if (!data.runs.length) body.replaceChildren(el("tr", {}, el("td", { colspan: "10" }, "no batched retries yet")));
    // a run that returned or ended since the last look changed the error queue: list, groups and overview again
    const seen = new Map(data.runs.map((r) => [r.run_id, `${r.state}/${r.batches_done}/${r.looked_at}`]));
    const changed = state.runsSeen !== undefined && [...seen].some(([id, key]) =>
      state.runsSeen.get(id) !== key && (state.runsSeen.has(id) || FINISHED.has(key.split("/")[0])));
    state.runsSeen = seen;
    if (changed) { await loadGroups().then(loadPage); loadOverview(); }
    if (data.runs.some((r) => !FINISHED.has(r.state))) state.runsTimer = setTimeout(loadRuns, 2000);
  } catch (e) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: "10", class: "error" }, e.message)));
  }
  updateButtons();
}

document.getElementById("refresh").addEventListener("click", () => {
  loadOverview();
  if (state.conn) { loadAllowed().then(() => loadGroups()).then(loadPage); loadRuns(); }
});
document.getElementById("panel-close").addEventListener("click", closePanel);
document.getElementById("editor-form").addEventListener("submit", sendEdit);
document.getElementById("editor-cancel").addEventListener("click", () => document.getElementById("editor").close());
document.getElementById("batch-form").addEventListener("submit", startBatchRetry);
document.getElementById("add-redirect").addEventListener("click", addRedirect);
document.getElementById("retry").addEventListener("click", () => act("retry"));
document.getElementById("delete").addEventListener("click", () => act("delete"));
document.getElementById("group-by").addEventListener("change", (e) => { state.groupBy = e.target.value; state.filter = {}; restart(); });
document.getElementById("filters").addEventListener("submit", (e) => {
  e.preventDefault();
  state.search = document.getElementById("search").value.trim();
  restart();
});
document.getElementById("clear-filters").addEventListener("click", () => {
  state.filter = {}; state.search = ""; document.getElementById("search").value = ""; restart();
});
document.getElementById("select-page").addEventListener("change", (e) => {
  for (const box of document.querySelectorAll("#messages tbody input[type=checkbox]")) {
    if (box.checked !== e.target.checked) box.click();
  }
});
document.getElementById("next-page").addEventListener("click", () => {
  if (state.next === null) return;
  state.cursors[state.page + 1] = state.next;
  state.page += 1;
  loadPage();
});
document.getElementById("prev-page").addEventListener("click", () => { if (state.page > 0) { state.page -= 1; loadPage(); } });
document.getElementById("first-page").addEventListener("click", () => { state.page = 0; loadPage(); });
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && !document.getElementById("panel").hidden && !document.getElementById("editor").open) closePanel();
});
loadOverview().then(() => {  // ./?conn=<id> (the message page's way back) opens that connection's error browser
  const conn = new URLSearchParams(location.search).get("conn");
  if (conn) showErrors(conn);
});
