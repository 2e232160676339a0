// The retry redirects section of the "SQL Queues" page: list a connection's stored redirects, make one, remove one.
// Every retry path follows them (the page's retry, batched retries, edit and retry, operators, the command line).
// It uses dashboard.js's el() and api() (index.html loads dashboard.js first); server texts go in with textContent.
"use strict";

(() => {
  const st = { conn: null, canManage: false };
  const $ = (id) => document.getElementById(id);

  function say(text, isError = false) {
    const status = $("redirects-status");
    status.textContent = text;
    status.className = isError ? "error" : "";
  }

  const path = () => `connections/${encodeURIComponent(st.conn)}/redirects`;

  async function loadConnections() {
    try {
      const data = await api("archive/connections");  // the configured connections (view permission)
      $("redirects-conn").replaceChildren(...data.connections.map((c) => el("option", { value: c.conn_id }, c.conn_id)));
      if (data.connections.length) { st.conn = data.connections[0].conn_id; await load(); }
    } catch (e) { say(e.message, true); }
  }

  async function load() {
    if (!st.conn) return;
    try {
      const data = await api(path());
      st.canManage = data.can_manage;
      $("redirect-target").replaceChildren(...data.queues.map((q) => el("option", { value: q }, q)));
      $("redirect-make").disabled = !st.canManage;
      $("redirect-make").title = st.canManage ? "" : "managing redirects needs the 'redirects' permission";
      $("redirects-list").querySelector("tbody").replaceChildren(...data.redirects.map((r) => el("tr", {},
        el("td", {}, r.source), el("td", {}, r.target), el("td", {}, r.created_by || "-"),
        el("td", {}, r.created_at || "-"),
        el("td", {}, el("button", { type: "button", class: "btn ghost", disabled: !st.canManage,
          onclick: () => remove(r.source) }, "Remove")))));
      $("redirects-caption").textContent = data.redirects.length
        ? `${data.redirects.length} redirect(s) on ${st.conn}: retries of a source queue go to its destination`
        : `no redirects on ${st.conn}: retries go to the queue each message failed in`;
    } catch (e) { say(e.message, true); }
  }

  async function make(event) {
    event.preventDefault();
    const source = $("redirect-source").value.trim();
    const target = $("redirect-target").value;
    if (!source || !target) { say("name the source queue and choose a destination", true); return; }
    try {
      const data = await api(path(), { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ source, target }) });
      say(`retries of ${data.redirect.source} now go to ${data.redirect.target}`);
      $("redirect-source").value = "";
      await load();
    } catch (e) { say(e.message, true); }
  }

  async function remove(source) {
    if (!window.confirm(`Remove the redirect of ${source}? Its retries go back to ${source} again.`)) return;
    try {
      const data = await api(`${path()}/remove`, { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify({ source }) });
      say(`redirect of ${data.redirect.source} removed`);
      await load();
    } catch (e) { say(e.message, true); }
  }

  $("redirects-conn").addEventListener("change", () => { st.conn = $("redirects-conn").value; load(); });
  $("redirect-form").addEventListener("submit", make);
  loadConnections();
})();
