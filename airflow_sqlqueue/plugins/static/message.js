// The page of one failed message: ?conn=<connection>&id=<native Id>[&seq=<position>], a URL to share. Everything
// shown comes from other systems (untrusted): set as text, with control and bidirectional-override characters made
// visible (⟨U+202E⟩) so a value can neither run nor reorder what is around it. Copy buttons copy the value as it is.
"use strict";
(() => {
  const { el, api, post, formatTime, copyText, messageUrl } = window.SQ;
  const params = new URLSearchParams(location.search);
  const state = { conn: params.get("conn") || "", id: params.get("id") || "", seq: params.get("seq"), message: null };
  const $ = (id) => document.getElementById(id);
  // C0/C1 controls (but tab and line feed), bidi embeddings, overrides and isolates, marks: shown, not obeyed
  const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g;

  function visible(text) {
    if (text === null || text === undefined) return "-";
    return String(text).replace(HIDDEN, (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}⟩`);
  }

  function setStatus(text, isError = false) {
    $("status").textContent = text;
    $("status").className = isError ? "error" : "";
  }

  function result(text, isError = false) {
    $("m-result").textContent = text;
    $("m-result").className = isError ? "error" : "";
  }

  function path(rest) {
    return `connections/${encodeURIComponent(state.conn)}/${rest}`;
  }

  async function fetchMessage() {
    const query = new URLSearchParams({ id: state.id });
    if (state.seq) query.set("seq", state.seq);
    try {
      return await api(path(`failed/message?${query}`));
    } catch (e) {
      if (e.status !== 404 || !state.seq) throw e;
      // not at that position any more: a returned message that failed again is back under a new one, same Id
      const again = await api(path(`failed/message?${new URLSearchParams({ id: state.id })}`));
      state.seq = String(again.seq);
      history.replaceState(null, "", messageUrl(state.conn, state.id, again.seq));
      return again;
    }
  }

  function fact(name, value, cls) {
    return [el("dt", {}, name), el("dd", { class: cls || null }, visible(value))];
  }

  function headerRow(key, value) {
    const copy = el("button", { type: "button", class: "btn ghost copy", "aria-label": `copy the value of ${visible(key)}` },
      "Copy");
    copy.addEventListener("click", () => copyText(value === null ? "" : value, copy));
    return el("tr", { dataset: { header: key } }, el("th", { scope: "row" }, visible(key)),
      el("td", { class: "value" }, value === null ? "null" : visible(value)), el("td", {}, copy));
  }

  function render(m) {
    state.message = m;
    document.title = `Failed message ${m.id} - SQL Queues`;
    $("title").textContent = `Failed message ${visible(m.id)}`;
    $("back").href = `./?conn=${encodeURIComponent(state.conn)}`;
    const bad = $("bad");
    bad.replaceChildren(...m.bad.map((r) => el("li", {}, r)));
    bad.hidden = !m.bad.length;
    $("facts").replaceChildren(
      ...fact("Id", m.id, "mono"), ...fact("position", String(m.seq)), ...fact("error queue", m.error_queue),
      ...fact("failing queue", m.failed_q), ...fact("exception type", m.exception_type),
      ...fact("processing endpoint", m.processing_endpoint), ...fact("processing machine", m.processing_machine),
      ...fact("sent at", formatTime(m.time_sent)), ...fact("failed at", formatTime(m.time_of_failure)),
      ...fact("message type", m.message_type), ...fact("conversation", m.conversation_id, "mono"),
      ...fact("MessageId header", m.message_id, "mono"));
    $("exception-message").textContent = visible(m.exception_message);
    $("stack").textContent = visible(m.stack_trace);
    $("stack-box").hidden = !m.stack_trace;
    // history
    const rows = m.history.map((x) => el("tr", { class: "history-entry" }, el("td", {}, x.at ? formatTime(x.at) : "-"),
      el("td", {}, visible(x.by)), el("td", {}, visible(x.how) + (x.copy_id ? ` (new Id ${x.copy_id})` : "")),
      el("td", { class: "failed-again" }, x.failed_again === null ? "-" : x.failed_again
        ? `yes${x.failed_again_at ? ", at " + formatTime(x.failed_again_at) : ""}` : "not back in the error queue")));
    $("history").tBodies[0].replaceChildren(...(rows.length ? rows
      : [el("tr", {}, el("td", { colspan: "4" }, "never retried through this page"))]));
    // headers
    const headers = m.headers || {};
    $("headers").hidden = !m.headers;
    $("raw-headers").hidden = !!m.headers;
    $("raw-headers").textContent = m.headers ? "" : visible(m.headers_preview) +
      (m.headers_truncated ? `\n… (${m.headers_length} characters in all)` : "");
    $("headers").tBodies[0].replaceChildren(...Object.entries(headers).map(([k, v]) => headerRow(k, v)));
    filterHeaders();
    // body
    const kind = { json: "JSON, indented", xml: "XML, one element a line", text: "text", binary: "binary, shown as hex" }[m.body_kind];
    $("body-note").textContent = `${m.body_length} bytes; ${visible(m.content_type || "no content type")}; ${kind}` +
      (m.body_truncated ? `; only the first ${m.body_binary ? "512" : String(m.body_shown_bytes)} bytes are shown` : "");
    $("body").textContent = visible(m.body_text);
    $("body").dataset.kind = m.body_kind;
    const download = $("download");
    download.hidden = !m.body_truncated && !m.body_binary;
    download.href = `api/${path(`failed/message/body?${new URLSearchParams({ id: m.id, seq: String(m.seq) })}`)}`;
    download.setAttribute("download", `message-${m.seq}.bin`);
    // actions: each shown only to a user with its own permission (GET .../permissions), never one that can only 403
    showActions(m);
    loadConversation(m);
  }

  async function showActions(m) {
    let allowed = {};
    try { allowed = (await api(path("permissions"))).actions; } catch (e) { allowed = {}; }
    const actions = { "m-retry": allowed.retry, "m-delete": allowed.delete, "m-archive": allowed.archive };
    for (const [id, may] of Object.entries(actions)) { $(id).hidden = !may; $(id).disabled = !may; }
    $("m-edit").hidden = !(m.edit_retry && allowed.edit_retry);
  }

  // the same conversation: a search of the error queue's headers, loaded after the message (it can take a while)
  // (a bounded window of positions around the message: "Look further" and "Look from the start" read the next one)
  async function loadConversation(m, after) {
    const caption = $("conversation-caption");
    const rows = $("conversation").tBodies[0];
    const more = $("conversation-more");
    rows.replaceChildren();
    if (more) more.replaceChildren();
    if (!m.conversation_id) { caption.textContent = "this message names no conversation"; return; }
    caption.textContent = `looking for the failed messages of conversation ${visible(m.conversation_id)}…`;
    try {
      const query = new URLSearchParams({ conversation_id: m.conversation_id, but: m.id, seq: String(m.seq) });
      if (after !== undefined) query.set("after", String(after));
      const talk = await api(path(`failed/conversation?${query}`));
      const looked = `positions ${talk.after + 1} to ${talk.next_after ?? "the end"}`;
      caption.textContent = `${talk.messages.length} other failed message(s) with conversation ` +
        `${visible(m.conversation_id)} among ${looked}` + (talk.more ? " (more may be elsewhere)" : "");
      if (more) {
        if (talk.next_after !== null) {
          more.append(el("button", { type: "button", id: "conversation-further",
            onclick: () => loadConversation(m, talk.next_after) }, "Look further"));
        }
        if (talk.after > 0) {
          more.append(el("button", { type: "button", id: "conversation-start",
            onclick: () => loadConversation(m, 0) }, "Look from the start"));
        }
      }
      rows.replaceChildren(...talk.messages.map((c) => el("tr", { class: "conversation-message" },
        el("td", { class: "num" }, el("a", { href: messageUrl(state.conn, c.id, c.seq) }, String(c.seq))),
        el("td", {}, formatTime(c.time_of_failure)), el("td", {}, visible(c.failed_q)),
        el("td", {}, visible(c.exception_type)), el("td", {}, visible(c.message_type)))));
    } catch (e) {
      caption.textContent = `the conversation could not be listed: ${e.message}`;
    }
  }

  function filterHeaders() {
    const wanted = $("header-filter").value.toLowerCase();
    for (const row of $("headers").tBodies[0].rows) {
      row.hidden = wanted !== "" && !row.textContent.toLowerCase().includes(wanted);
    }
  }

  function gone(text) {
    state.message = null;
    for (const id of ["m-retry", "m-delete", "m-archive"]) $(id).disabled = true;
    $("m-edit").hidden = true;
    setStatus(text);
  }

  async function load() {
    if (!state.conn || !state.id) { setStatus("the link names no message (it needs conn= and id=)", true); return; }
    setStatus("loading…");
    try {
      render(await fetchMessage());
      $("message").setAttribute("aria-busy", "false");
      setStatus(`updated ${formatTime(new Date())}`);
    } catch (e) {
      if (e.status === 404) gone(`message ${state.id} is not in the error queue of ${state.conn} (returned, deleted or archived)`);
      else setStatus(e.message, true);
    }
  }

  async function act(kind) {
    const m = state.message;
    if (!m) return;
    const one = [{ seq: m.seq, id: m.id }];
    try {
      if (kind === "retry") {
        if (!window.confirm(`Return message ${m.id} to ${m.failed_q || "its queue"}?`)) return;
        const data = await post(path("failed/retry"), { messages: one });
        result(`returned: ` + Object.entries(data.returned).map(([q, n]) => `${n} to ${q}`).join(", "));
      } else if (kind === "delete") {
        if (!window.confirm(`Delete message ${m.id}? This cannot be undone.`)) return;
        const data = await post(path("failed/delete"), { messages: one });
        result(`deleted ${data.deleted}`);
      } else if (kind === "archive") {
        // the archive takes a filter: archive only when the MessageId header finds this message alone
        const key = m.message_id || m.id;
        const found = await api(path(`failed?${new URLSearchParams({ search: key, limit: "2" })}`));
        if (found.messages.length !== 1 || found.messages[0].seq !== m.seq) {
          result("this message cannot be told apart from others by its MessageId: archive it from the list", true);
          return;
        }
        if (!window.confirm(`Archive message ${m.id} (moved out of the error queue into the error archive)?`)) return;
        const data = await post(path("archives"), { search: key, max_messages: 1 });
        result(`archived ${data.deleted ?? 1} into ${data.archive_id}`);
      }
      await load();
    } catch (e) {
      result(e.message, true);
    }
  }

  function openEditor() {
    const m = state.message;
    const kept = {};
    for (const [k, v] of Object.entries(m.headers || {})) if (!m.failure_headers.includes(k)) kept[k] = v;
    $("editor-headers").value = JSON.stringify(kept, null, 2);
    $("editor-headers").disabled = !m.headers;
    const editable = !m.body_binary && !m.body_truncated;
    $("editor-body").value = editable ? m.body_text : "";
    $("editor-body").disabled = !editable;
    $("editor-note").textContent = `Message ${m.id}: the edited copy gets a new Id and the header airflow_sqlqueue.EditOf, ` +
      "goes to the queue it failed in, and this one is deleted. Identity, routing and failure headers are protected." +
      (editable ? "" : " The body is binary or too large to edit here; it is kept.");
    $("editor-error").hidden = true;
    $("editor").showModal();
  }

  async function sendEdit(event) {
    event.preventDefault();
    const m = state.message;
    let headers = null;
    try {
      if (!$("editor-headers").disabled) {
        headers = JSON.parse($("editor-headers").value);
        if (!headers || typeof headers !== "object" || Array.isArray(headers) ||
            Object.values(headers).some((v) => v !== null && typeof v !== "string")) {
          throw new Error("the headers must be a JSON object of names to text values (or null)");
        }
      }
    } catch (e) { $("editor-error").textContent = e.message; $("editor-error").hidden = false; return; }
    const body = $("editor-body").disabled ? null : $("editor-body").value;
    try {
      const data = await post(path("failed/edit-retry"), { seq: m.seq, id: m.id, headers, body });
      $("editor").close();
      result(`sent an edited copy ${data.id} to ${data.queue}`);
      await load();
    } catch (e) {
      $("editor-error").textContent = `refused: ${e.message}`;
      $("editor-error").hidden = false;
    }
  }

  $("m-retry").addEventListener("click", () => act("retry"));
  $("m-delete").addEventListener("click", () => act("delete"));
  $("m-archive").addEventListener("click", () => act("archive"));
  $("m-edit").addEventListener("click", openEditor);
  $("editor-form").addEventListener("submit", sendEdit);
  $("editor-cancel").addEventListener("click", () => $("editor").close());
  $("header-filter").addEventListener("input", filterHeaders);
  $("refresh").addEventListener("click", load);
  $("copy-link").addEventListener("click", (e) => copyText(new URL(messageUrl(state.conn, state.id, state.seq),
    location.href).href, e.currentTarget));
  $("copy-headers").addEventListener("click", (e) => copyText(JSON.stringify(state.message?.headers ?? {}, null, 2),
    e.currentTarget));
  $("copy-body").addEventListener("click", (e) => copyText(state.message?.body_text ?? "", e.currentTarget));
  load();
})();
