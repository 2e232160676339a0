// The error archive section of the "SQL Queues" page: list a connection's archives, browse one, archive now,
// restore. It uses dashboard.js's el() and api() (index.html loads dashboard.js first). Everything from the server
// (ids, queue names, header and body previews: untrusted input from other systems) is set with textContent.
"use strict";

(() => {
  const PAGE = 50;
  const st = { conn: null, canEdit: false, archive: null, cursors: [0], page: 0, next: null, selected: new Set() };
  const $ = (id) => document.getElementById(id);

  // el() and api() are dashboard.js's (loaded first by index.html): one DOM builder, one API client.

  function say(text, isError = false) {
    const status = $("archive-status");
    status.textContent = text;
    status.className = isError ? "error" : "";
  }

  // one time format with the rest of the page: "YYYY-MM-DD HH:MM:SS UTC"
  function when(value) {
    if (!value) return "-";
    const parsed = Date.parse(value);
    return Number.isNaN(parsed) ? String(value) : new Date(parsed).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  const connPath = () => `connections/${encodeURIComponent(st.conn)}/archives`;

  async function loadConnections() {
    try {
      const data = await api("archive/connections");
      const select = $("archive-conn");
      select.replaceChildren(...data.connections.map((c) => el("option", { value: c.conn_id }, c.conn_id)));
      if (!data.configured) {
        say("Archiving is not set up: an administrator adds an 'archive' key with a location to the Variable " +
            "sqlqueue_maintenance.");
        $("archive-form").hidden = true;
        return;
      }
      if (data.older_than_days !== null && !$("archive-days").value) $("archive-days").value = data.older_than_days;
      if (data.connections.length) { st.conn = data.connections[0].conn_id; await loadArchives(); }
    } catch (e) { say(e.message, true); }
  }

  async function loadArchives() {
    if (!st.conn) return;
    try {
      const data = await api(connPath());
      st.canEdit = data.can_edit;
      $("archive-now").disabled = !st.canEdit;
      $("archive-now").title = st.canEdit ? "" : "archiving needs the 'archive' permission on this connection";
      const body = $("archive-list").querySelector("tbody");
      body.replaceChildren(...data.archives.map((a) => el("tr", { "data-archive": a.archive_id },
        el("td", {}, el("button", { type: "button", class: "btn link", onclick: () => openArchive(a.archive_id) },
          a.archive_id)),
        el("td", {}, when(a.created_at)), el("td", {}, a.status), el("td", { class: "num" }, a.rows),
        el("td", { class: "num" }, a.restored), el("td", {}, `${when(a.min_time_of_failure)} – ${when(a.max_time_of_failure)}`),
        el("td", {}, a.selection.cutoff ? `failed before ${when(a.selection.cutoff)}` : "by group",
          Object.entries(a.selection.filter || {}).map(([k, v]) => `; ${k} = ${v}`).join("")))));
      $("archive-list-caption").textContent = data.archives.length
        ? `${data.archives.length} archive(s) of ${data.error_queue} on ${st.conn}` : `no archives of ${data.error_queue} yet`;
      say("");
    } catch (e) { say(e.message, true); }
  }

  function messageRow(m) {
    const box = el("input", { type: "checkbox", "aria-label": `select archived message ${m.id}` });
    box.checked = st.selected.has(m.id);
    box.disabled = m.restored || m.not_deleted || !st.canEdit;
    box.addEventListener("change", () => {
      if (box.checked) st.selected.add(m.id); else st.selected.delete(m.id);
      updateButtons();
    });
    const state = m.restored ? "restored" : (m.not_deleted ? "was gone before deletion" : "archived");
    const details = el("details", { class: "more" }, el("summary", {}, "headers and body"),
      el("div", {}, el("strong", {}, "Id "), m.id),
      el("div", {}, el("strong", {}, "Headers" + (m.headers_truncated ? " (preview)" : "")),
        el("pre", { class: "raw-headers" }, m.headers_preview)),
      el("div", {}, el("strong", {}, `Body (${m.body_length} bytes${m.body_binary ? ", binary, shown as hex" : ""}` +
        `${m.body_truncated ? ", preview" : ""})`), el("pre", { class: "body" }, m.body_preview)));
    return el("tr", { class: "archived", "data-id": m.id },
      el("td", {}, box), el("td", { class: "num" }, m.seq), el("td", {}, when(m.time_of_failure)),
      el("td", {}, m.failed_q || "-"), el("td", {}, m.exception_type || "-"), el("td", {}, state), el("td", {}, details));
  }

  function updateButtons() {
    $("archive-restore-selected").disabled = !st.canEdit || st.selected.size === 0;
    $("archive-restore-all").disabled = !st.canEdit || !st.archive || st.archive.status !== "deleted";
    $("archive-selection").textContent = st.selected.size ? `${st.selected.size} selected` : "";
    $("archive-next").disabled = st.next === null;
    $("archive-first").disabled = st.page === 0;
  }

  async function loadPage() {
    const params = new URLSearchParams({ after: String(st.cursors[st.page]), limit: String(PAGE) });
    try {
      const data = await api(`${connPath()}/${encodeURIComponent(st.archive.archive_id)}?${params}`);
      st.archive = data.archive;
      st.canEdit = data.can_edit;
      st.next = data.next_after;
      $("archive-messages").querySelector("tbody").replaceChildren(...data.messages.map(messageRow));
      $("archive-page").textContent = `page ${st.page + 1}`;
      $("archive-messages-caption").textContent = `${data.archive.rows} archived message(s) of ` +
        `${data.archive.queue}, ${data.archive.restored} restored (status: ${data.archive.status})`;
      updateButtons();
    } catch (e) { say(e.message, true); }
  }

  async function openArchive(archiveId) {
    st.archive = { archive_id: archiveId };
    st.cursors = [0]; st.page = 0; st.next = null; st.selected.clear();
    $("archive-view").hidden = false;
    $("archive-result").textContent = "";
    const title = $("archive-view-title");
    title.textContent = `Archive ${archiveId}`;
    title.scrollIntoView({ block: "start" });
    title.focus({ preventScroll: true });
    await loadPage();
  }

  async function restore(ids) {
    const result = $("archive-result");
    try {
      const data = await api(`${connPath()}/${encodeURIComponent(st.archive.archive_id)}/restore`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ ids }) });
      result.className = "";
      result.textContent = `restored ${data.restored} message(s) into ${data.queue}` +
        (data.already_restored ? ` (${data.already_restored} were restored before)` : "");
      st.selected.clear();
    } catch (e) { result.className = "error"; result.textContent = e.message; }
    await Promise.all([loadPage(), loadArchives()]);
  }

  $("archive-conn").addEventListener("change", (e) => {
    st.conn = e.target.value; $("archive-view").hidden = true; loadArchives();
  });
  $("archive-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const days = $("archive-days").value.trim();
    const exceptionType = $("archive-exception").value.trim();
    const request = { older_than_days: days === "" ? null : Number(days), exception_type: exceptionType || null };
    const what = [days !== "" ? `failed more than ${days} day(s) ago` : null,
                  exceptionType ? `of exception type ${exceptionType}` : null].filter(Boolean).join(", ");
    if (!window.confirm(`Archive the failed messages ${what || "(nothing chosen)"} and delete them from the error queue?`)) return;
    say("archiving…");
    try {
      const data = await api(connPath(), { method: "POST", headers: { "Content-Type": "application/json" },
                                           body: JSON.stringify(request) });
      await loadArchives();
      say(`archived ${data.rows} message(s) as ${data.archive_id}`);
    } catch (err) { say(err.message, true); }
  });
  $("archive-restore-selected").addEventListener("click", () => restore([...st.selected]));
  $("archive-restore-all").addEventListener("click", () => {
    if (window.confirm("Put every archived message of this archive back into the error queue?")) restore(null);
  });
  $("archive-next").addEventListener("click", () => {
    if (st.next === null) return;
    st.cursors[st.page + 1] = st.next; st.page += 1; loadPage();
  });
  $("archive-first").addEventListener("click", () => { st.page = 0; loadPage(); });
  $("archive-close").addEventListener("click", () => { $("archive-view").hidden = true; $("archive-title").focus(); });
  loadConnections();
})();
