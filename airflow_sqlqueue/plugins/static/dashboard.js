// The "SQL Queues" page: plain DOM, no framework, no CDN. Calls the dashboard API beside it with the Airflow
// session cookie (same origin). Text from the server is always set with textContent, never parsed as HTML.
"use strict";

const BASE = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const state = { errorsConn: null, selected: new Set() };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function api(path, options = {}) {
  const response = await fetch(BASE + "api/" + path, { credentials: "same-origin", ...options });
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    const detail = body && body.detail ? (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail))
                                       : response.statusText;
    throw new Error(`${response.status}: ${detail}`);
  }
  return body;
}

function setStatus(text, isError = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "";
}

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

function formatThresholds(t) {
  const parts = [];
  if (t.max_depth !== undefined && t.max_depth !== null) parts.push(`depth ≤ ${t.max_depth}`);
  if (t.max_age_seconds !== undefined && t.max_age_seconds !== null) parts.push(`age ≤ ${t.max_age_seconds}s`);
  return parts.join(", ") || "-";
}

function queueTable(conn) {
  const head = el("tr", {}, el("th", {}, "queue"), el("th", { class: "num" }, "depth"),
    el("th", { class: "num" }, "oldest message"), el("th", { class: "num" }, "net flow /min"),
    el("th", {}, "thresholds"), el("th", {}, "over threshold"));
  const rows = conn.queues.map((q) => {
    const name = el("button", { class: "link", type: "button", title: "depth over time",
      onclick: () => showHistory(conn.conn_id, q.queue, q.thresholds) }, q.queue);
    const extra = q.is_error_queue ? el("button", { class: "link browse", type: "button",
      onclick: () => showErrors(conn.conn_id) }, "browse failed messages") : null;
    return el("tr", { class: q.breaches.length ? "breach" : "", dataset: { conn: conn.conn_id, queue: q.queue } },
      el("td", { class: "queue" }, name, extra),
      el("td", { class: "num depth" }, q.depth === null ? "-" : q.depth),
      el("td", { class: "num age" }, formatAge(q.oldest_age_seconds)),
      el("td", { class: "num flow" }, formatFlow(q.net_flow_per_minute)),
      el("td", {}, formatThresholds(q.thresholds)),
      el("td", { class: "breaches" }, q.breaches.join("; ")));
  });
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

async function loadOverview() {
  setStatus("loading…");
  const main = document.getElementById("connections");
  try {
    const data = await api("overview");
    main.replaceChildren(...data.connections.map((conn) => el("section", { class: "connection",
      dataset: { conn: conn.conn_id } },
      el("h2", {}, `Connection ${conn.conn_id}`),
      conn.error ? el("p", { class: "error" }, conn.error)
                 : (conn.queues.length ? queueTable(conn) : el("p", {}, "no queues found")),
      conn.error ? null : el("button", { type: "button", onclick: () => showErrors(conn.conn_id) },
        `Browse failed messages (${conn.error_queue})`))));
    main.setAttribute("aria-busy", "false");
    setStatus(`configuration: ${data.source}; updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    setStatus(e.message, true);
  }
}

// -- depth over time (inline SVG) -------------------------------------------------------------------------
function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (text !== null) node.textContent = text;
  return node;
}

function plot(samples, maxDepth) {
  const width = 900, height = 240, left = 60, right = 10, top = 10, bottom = 30;
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "depth over time" });
  if (!samples.length) {
    chart.append(svg("text", { x: left, y: height / 2 }, "no samples recorded in this period"));
    return chart;
  }
  const times = samples.map((s) => Date.parse(s.sampled_at));
  const t0 = Math.min(...times), t1 = Math.max(...times);
  const yMax = Math.max(1, ...samples.map((s) => s.depth), maxDepth || 0);
  const x = (t) => left + (t1 === t0 ? (width - left - right) / 2 : (t - t0) / (t1 - t0) * (width - left - right));
  const y = (d) => top + (1 - d / yMax) * (height - top - bottom);
  chart.append(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }),
    svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }),
    svg("text", { x: 4, y: top + 10 }, String(yMax)), svg("text", { x: 4, y: height - bottom }, "0"),
    svg("text", { x: left, y: height - 8 }, new Date(t0).toLocaleString()),
    svg("text", { x: width - right, y: height - 8, "text-anchor": "end" }, new Date(t1).toLocaleString()));
  if (maxDepth !== undefined && maxDepth !== null) {
    chart.append(svg("line", { class: "limit", x1: left, y1: y(maxDepth), x2: width - right, y2: y(maxDepth) }));
  }
  const points = samples.map((s, i) => `${x(times[i]).toFixed(1)},${y(s.depth).toFixed(1)}`).join(" ");
  chart.append(svg("polyline", { class: "depth", points }));
  for (const [i, s] of samples.entries()) {
    const dot = svg("circle", { cx: x(times[i]).toFixed(1), cy: y(s.depth).toFixed(1), r: 2.5, fill: "currentColor" });
    dot.append(svg("title", {}, `${s.sampled_at}: ${s.depth}`));
    chart.append(dot);
  }
  return chart;
}

async function showHistory(connId, queue, thresholds) {
  const section = document.getElementById("detail");
  section.hidden = false;
  document.getElementById("detail-title").textContent = `Depth of ${queue} on ${connId}, last 24 h`;
  const target = document.getElementById("plot");
  target.replaceChildren("loading…");
  try {
    const data = await api(`connections/${encodeURIComponent(connId)}/history?queue=${encodeURIComponent(queue)}`);
    target.replaceChildren(plot(data.samples, thresholds.max_depth),
      el("p", {}, `${data.samples.length} samples; net flow ${formatFlow(data.net_flow_per_minute)} per minute`));
  } catch (e) {
    target.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

// -- error-queue browser ------------------------------------------------------------------------------------
function updateButtons(canEdit) {
  const none = state.selected.size === 0;
  for (const id of ["retry", "delete"]) {
    const button = document.getElementById(id);
    button.disabled = none || !canEdit;
    button.title = canEdit ? "" : "needs edit permission on this connection";
  }
}

function messageView(message, canEdit) {
  const box = el("input", { type: "checkbox", "aria-label": `select ${message.id}` });
  box.addEventListener("change", () => {
    if (box.checked) state.selected.add(message.id); else state.selected.delete(message.id);
    updateButtons(canEdit);
  });
  return el("div", { class: "message", dataset: { id: message.id } },
    el("label", {}, box, ` ${message.id}`),
    el("div", {}, `failed ${message.time_of_failure || "?"}: ${message.exception_message || ""}`),
    el("details", {}, el("summary", {}, "headers"), el("pre", {}, JSON.stringify(message.headers, null, 2))),
    el("details", {}, el("summary", {}, `body (${message.body_size} bytes${message.body_truncated ? ", preview" : ""})`),
      el("pre", {}, message.body_preview)));
}

async function showErrors(connId) {
  state.errorsConn = connId;
  state.selected.clear();
  const section = document.getElementById("errors");
  section.hidden = false;
  const groups = document.getElementById("groups");
  groups.replaceChildren("loading…");
  try {
    const data = await api(`connections/${encodeURIComponent(connId)}/failed`);
    document.getElementById("errors-title").textContent =
      `Failed messages in ${data.error_queue} on ${connId}: ${data.total}` +
      (data.listed < data.total ? ` (first ${data.listed} listed)` : "");
    groups.dataset.conn = connId;
    groups.replaceChildren(...(data.groups.length ? data.groups.map((g) => el("details",
      { class: "group", open: "", dataset: { failedQ: g.failed_q, exceptionType: g.exception_type } },
      el("summary", {}, `${g.failed_q} — ${g.exception_type}: ${g.count}` +
        (g.last_failure ? ` (last ${g.last_failure})` : "")),
      ...g.messages.map((m) => messageView(m, data.can_edit)))) : [el("p", {}, "the error queue is empty")]));
    updateButtons(data.can_edit);
  } catch (e) {
    groups.replaceChildren(el("p", { class: "error" }, e.message));
  }
}

async function act(action) {
  const connId = state.errorsConn;
  const ids = [...state.selected];
  if (!connId || !ids.length) return;
  if (action === "delete" && !window.confirm(`Delete ${ids.length} failed message(s)? This cannot be undone.`)) return;
  const result = document.getElementById("action-result");
  try {
    const data = await api(`connections/${encodeURIComponent(connId)}/failed/${action}`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ids }) });
    result.className = "";
    result.textContent = action === "retry"
      ? `returned ${data.total_returned}` + (data.left.length ? `; ${data.left.length} stay: ${data.left.map((l) => l.reason).join("; ")}` : "")
      : `deleted ${data.deleted}`;
  } catch (e) {
    result.className = "error";
    result.textContent = e.message;
  }
  await Promise.all([showErrors(connId), loadOverview()]);
}

document.getElementById("refresh").addEventListener("click", () => {
  loadOverview();
  if (state.errorsConn) showErrors(state.errorsConn);
});
document.getElementById("retry").addEventListener("click", () => act("retry"));
document.getElementById("delete").addEventListener("click", () => act("delete"));
loadOverview();
