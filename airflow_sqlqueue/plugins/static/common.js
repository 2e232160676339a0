// What the pages of "SQL Queues" share (window.SQ): the theme of the Airflow UI around them, DOM building with
// text only (server text is untrusted: never parsed as HTML), API calls beside the page, one time format, copy.
"use strict";
(() => {
  const BASE = location.pathname.replace(/[^/]*$/, "");

  function parentRoot() {
    try { return window.parent !== window ? window.parent.document.documentElement : null; } catch (e) { return null; }
  }

  function themeOf(root) {
    if (!root) return null;
    if (root.classList.contains("dark") || root.dataset.theme === "dark") return "dark";
    if (root.classList.contains("light") || root.dataset.theme === "light") return "light";
    return null;
  }

  // Our colour variables from the Airflow UI's Chakra tokens (the deployment's theme, custom ones too).
  const TOKENS = { "--bg": "bg", "--fg": "fg", "--muted": "fg-muted", "--line": "border", "--subtle": "bg-muted",
    "--hover": "bg-emphasized", "--accent": "brand-solid", "--accent-fg": "brand-contrast", "--link": "brand-fg",
    "--warn-bg": "red-subtle", "--warn-fg": "red-fg", "--bad-bg": "amber-subtle", "--bad-fg": "amber-fg",
    "--focus": "brand-focus-ring", "--ok-fg": "green-fg", "--code-bg": "bg-subtle", "--panel": "bg-panel" };

  function asRgb(value) {  // any CSS colour (oklch too) as rgb(), through a canvas pixel; null when not a colour
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = 1;
    const context = canvas.getContext("2d", { willReadFrequently: true });
    context.fillStyle = "#010203";
    context.fillStyle = value;
    if (context.fillStyle === "#010203") return null;
    context.fillRect(0, 0, 1, 1);
    const [r, g, b] = context.getImageData(0, 0, 1, 1).data;
    return `rgb(${r}, ${g}, ${b})`;
  }

  function airflowTokens(theme) {
    const root = parentRoot();
    const style = document.documentElement.style;
    for (const name of Object.keys(TOKENS)) style.removeProperty(name);
    if (!root || themeOf(root) !== theme) return;  // a theme asked for (?theme=) that the UI does not show
    const computed = window.parent.getComputedStyle(root);
    for (const [name, token] of Object.entries(TOKENS)) {
      const value = computed.getPropertyValue(`--chakra-colors-${token}`).trim();
      const rgb = value ? asRgb(value) : null;
      if (rgb) style.setProperty(name, rgb);
    }
  }

  function applyTheme() {
    const asked = new URLSearchParams(location.search).get("theme");
    let theme = asked === "dark" || asked === "light" ? asked : themeOf(parentRoot());
    if (!theme) theme = window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
    document.documentElement.dataset.theme = theme;
    airflowTokens(theme);
  }
  applyTheme();
  if (parentRoot()) {
    new MutationObserver(applyTheme).observe(parentRoot(), { attributes: true, attributeFilter: ["class", "data-theme"] });
  }
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", applyTheme);

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : value);
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
      const error = new Error(`${response.status}: ${detail}`);
      error.status = response.status;
      throw error;
    }
    return body;
  }

  function post(path, body) {
    return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  }

  function parseTime(value) {
    if (value === null || value === undefined || value === "") return null;
    if (value instanceof Date) return value;
    const wire = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2}):(\d+) Z$/.exec(String(value).trim());
    const parsed = wire ? Date.parse(`${wire[1]}T${wire[2]}.${wire[3].slice(0, 3)}Z`) : Date.parse(value);
    return Number.isNaN(parsed) ? null : new Date(parsed);
  }

  function formatTime(value) {
    const date = parseTime(value);
    if (!date) return value ? String(value) : "-";
    return date.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }

  async function copyText(text, button) {
    try {
      await navigator.clipboard.writeText(text);
    } catch (e) {  // no clipboard permission in the iframe: copy through a selected text area
      const area = el("textarea", { "aria-hidden": "true", style: "position:fixed;left:-9999px" });
      area.value = text;
      document.body.append(area);
      area.select();
      document.execCommand("copy");
      area.remove();
    }
    if (button) { const was = button.textContent; button.textContent = "Copied"; setTimeout(() => { button.textContent = was; }, 1500); }
  }

  // The page of one failed message (a URL to share: the connection, the message's Id, its position).
  function messageUrl(connId, id, seq) {
    const params = new URLSearchParams({ conn: connId, id });
    if (seq !== undefined && seq !== null) params.set("seq", String(seq));
    return `${BASE}message?${params}`;
  }

  window.SQ = { BASE, el, api, post, formatTime, parseTime, copyText, messageUrl, applyTheme };
})();
