// @ts-check
// What every page shares: the API through the portal (token added server-side, CSRF on writes),
// live updates from /portal/events, formatting, and small drawing helpers.

let sessionPromise = null;

export function session() {
  if (!sessionPromise) {
    sessionPromise = fetch("/portal/session", { credentials: "same-origin" }).then(async (r) => {
      if (r.status === 401) {
        location.href = "/index.html?next=" + encodeURIComponent(location.pathname + location.search);
        throw new Error("signed out");
      }
      return r.json();
    });
  }
  return sessionPromise;
}

// A message for people: the API's pointers to its own routes ("; `GET /x` lists them.") are for
// scripts, and the page has its own ways to show the same.
export function forPeople(message) {
  return String(message)
    .replace(/;\s*`(?:GET|POST|PUT|PATCH|DELETE) [^`]*`[^.;]*\./g, ".")
    .replace(/\s*\(`?(?:GET|POST|PUT|PATCH|DELETE) \/[^)]*\)/g, "");
}

export class ApiError extends Error {
  constructor(status, body) {
    super(forPeople((body && body.message) || `The API answered ${status}.`));
    this.status = status;
    this.code = body && body.code;
    this.body = body || {};
  }
}

/**
 * @typedef {object} CallOptions
 * @property {string} [method]
 * @property {any} [body]
 * @property {string} [type]
 * @property {boolean} [raw]
 * @property {boolean} [withHeaders]
 */

// A call of the REST API v2; `path` starts after /api/v2.
/**
 * @param {string} path
 * @param {CallOptions} [options]
 * @returns {Promise<any>}
 */
export async function api(path, options = {}) {
  return (await call("/api/v2" + path, options)).data;
}

// A call of the marketplace's API; `path` starts after /marketplace/api. With `withHeaders`,
// the answer is {data, headers} (X-Total-Count says how many items match).
/**
 * @param {string} path
 * @param {CallOptions} [options]
 * @returns {Promise<any>}
 */
export async function market(path, options = {}) {
  const answer = await call("/marketplace/api" + path, options);
  return options.withHeaders ? answer : answer.data;
}

/**
 * @param {string} url
 * @param {CallOptions} [options]
 * @returns {Promise<{data: any, headers: Headers}>}
 */
async function call(url, { method = "GET", body, type, raw = false } = {}) {
  /** @type {Record<string, string>} */
  const headers = { Accept: "application/json" };
  if (method !== "GET" && method !== "HEAD") {
    headers["X-CSRF-Token"] = (await session()).csrf;
  }
  let payload = body;
  if (body !== undefined && type === undefined && typeof body !== "string") {
    payload = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  } else if (type) {
    headers["Content-Type"] = type;
  }
  const response = await fetch(url, { method, headers, body: payload, credentials: "same-origin" });
  if (response.status === 401) {
    location.href = "/index.html?next=" + encodeURIComponent(location.pathname + location.search);
    throw new ApiError(401, { message: "Your session ended; sign in again." });
  }
  const text = await response.text();
  /** @type {any} */
  let data = text;
  if (!raw) {
    try { data = text ? JSON.parse(text) : null; } catch { data = text; }
  }
  if (!response.ok) throw new ApiError(response.status, data && typeof data === "object" ? data : { message: text });
  return { data, headers: response.headers };
}

// A call of the portal's own endpoints (validation, rendering) with the CSRF token.
/**
 * @param {string} path
 * @param {string} body
 * @param {string} type
 * @returns {Promise<any>}
 */
export async function portal(path, body, type) {
  const { csrf } = await session();
  const response = await fetch(path, {
    method: "POST",
    headers: { "X-CSRF-Token": csrf, "Content-Type": type },
    body,
    credentials: "same-origin",
  });
  if (!response.ok) throw new ApiError(response.status, { message: await response.text() });
  return path.endsWith("/render") ? response.text() : response.json();
}

// Live updates: `onChange` runs (at most every 50 ms) whenever what the page shows changed.
// The browser's EventSource reconnects by itself; the page never reloads.
export function live(params, onChange) {
  const query = new URLSearchParams(params).toString();
  const source = new EventSource("/portal/events" + (query ? "?" + query : ""));
  let timer = null;
  let later = [];
  const fire = (event) => {
    if (!timer) timer = setTimeout(() => { timer = null; onChange(event); }, 50);
    if (document.body.dataset.live === "gateway") {
      // An event can reach the page before the API's read model has applied it: look again
      // shortly after the last one.
      later.forEach(clearTimeout);
      later = [500, 1500].map((ms) => setTimeout(() => onChange({}), ms));
    }
  };
  source.addEventListener("change", (event) => fire(JSON.parse(event.data)));
  source.addEventListener("ready", (event) => {
    document.body.dataset.live = JSON.parse(event.data).source;
    // Connected (the first time too: a change between the page's first read and the stream's
    // start would otherwise be missed), again, or switched to the event stream: what happened
    // meanwhile is fetched.
    fire({});
  });
  return source;
}

// The platform's events themselves, for a page that decides what each one means to it: `onEvent`
// gets the event (its type and job_id), or null when the stream does not say what happened (it
// connected or switched source, or the portal compared answers itself). No timers: the page
// coalesces.
/**
 * @param {Record<string, string>} params
 * @param {(event: any) => void} onEvent
 */
export function events(params, onEvent) {
  const query = new URLSearchParams(params).toString();
  const source = new EventSource("/portal/events" + (query ? "?" + query : ""));
  source.addEventListener("change", (message) => {
    let event = null;
    try {
      const change = JSON.parse(/** @type {MessageEvent} */ (message).data);
      event = typeof change.event === "string" ? JSON.parse(change.event) : null;
    } catch { event = null; }
    onEvent(event);
  });
  source.addEventListener("ready", (message) => {
    document.body.dataset.live = JSON.parse(/** @type {MessageEvent} */ (message).data).source;
    onEvent(null);
  });
  return source;
}

// ---------------------------------------------------------------- DOM

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function $(selector) { return document.querySelector(selector); }

export function fill(container, ...children) {
  container.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

export function stateBadge(state) {
  const s = state || "UNKNOWN";
  return el("span", { class: `state state-${s}`, "data-state": s }, s);
}

// One formatter for the page: building one per call costs more than the rest of a table row.
const TIME = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });

export function fmtTime(ms) {
  return ms ? TIME.format(new Date(ms)) : "–";
}

export function fmtDuration(start, end) {
  if (!start) return "–";
  let s = Math.max(0, Math.round(((end || Date.now()) - start) / 1000));
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s}s`;
  return `${s}s`;
}

export function showError(container, error) {
  fill(container, el("div", { class: "notice bad", role: "alert" }, error.message || String(error)));
}

export function jobLink(username, name) {
  const q = new URLSearchParams({ username, jobName: name });
  return el("a", { href: "/job-detail.html?" + q }, name);
}

// A bar of used out of total (the width set through CSSOM, which the CSP allows).
export function bar(used, total, label) {
  const span = el("span");
  span.style.width = total ? `${Math.min(100, (100 * used) / total)}%` : "0";
  return el("div", { class: "bar", role: "img", "aria-label": label || `${used} of ${total}` }, span);
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A small bar chart in SVG: items [{label, value, max}], values drawn against their max.
/**
 * @param {{label: string, value: number, max: number}[]} items
 * @param {{title?: string, unit?: string}} [options]
 */
export function barChart(items, { title, unit = "" } = {}) {
  const width = 520, rowH = 26, left = 130, height = Math.max(1, items.length) * rowH + 10;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title || "chart" });
  if (title) { const t = svg("title"); t.textContent = title; root.append(t); }
  items.forEach((item, i) => {
    const y = 5 + i * rowH;
    const label = svg("text", { x: 0, y: y + 15 }); label.textContent = item.label; root.append(label);
    root.append(svg("rect", { x: left, y: y + 4, width: width - left - 90, height: 14, fill: "#e4e8ef", rx: 3 }));
    const w = item.max ? ((width - left - 90) * Math.min(item.value, item.max)) / item.max : 0;
    root.append(svg("rect", { x: left, y: y + 4, width: w, height: 14, fill: "#1f5fbf", rx: 3 }));
    const v = svg("text", { x: width - 84, y: y + 15 }); v.textContent = `${item.value} / ${item.max}${unit}`; root.append(v);
  });
  return el("div", { class: "chart" }, root);
}

// Colours of lines, told apart also by their dash (for readers who do not see colours).
const LINE_COLOURS = ["#1f5fbf", "#1b7a3d", "#b3541e", "#7a3db3", "#a01f4f", "#3d7a7a", "#6b6b1f", "#444"];
const LINE_DASHES = ["", "6 3", "2 3", "8 3 2 3"];

function clock(seconds, withSeconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", ...(withSeconds ? { second: "2-digit" } : {}) });
}

// A line chart over time in SVG: series [{label, points: [[seconds, value], ...]}] up to `to`
// (seconds), starting at `from` or, when the history is shorter, at its first point (at least a
// minute shown); values against `max` (grown to the largest value), with a caption, a legend and a
// time axis. A series of one point shows as a dot; `empty` says why there is no line at all.
/**
 * @param {{label: string, points: number[][]}[]} series
 * @param {{title?: string, from?: number, to?: number, max?: number, unit?: string, empty?: string}} [options]
 */
export function lineChart(series, { title, from, to, max = 100, unit = "%", empty = "no samples yet" } = {}) {
  const width = 640, height = 210, left = 44, right = 12, top = 28, bottom = 26;
  const plotW = width - left - right, plotH = height - top - bottom;
  const all = series.flatMap((s) => s.points);
  const end = Math.max(to ?? 0, ...all.map((p) => p[0]));
  const first = all.length ? Math.min(...all.map((p) => p[0])) : end - 60;
  const start = Math.min(Math.max(from ?? first, first), end - 60);
  const top_ = Math.max(max, ...all.map((p) => p[1]));
  const x = (t) => left + (plotW * (t - start)) / (end - start);
  const y = (v) => top + plotH - (plotH * v) / top_;
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title || "chart" });
  if (title) { const t = svg("title"); t.textContent = title; root.append(t); }
  for (const v of [0, top_ / 2, top_]) {
    root.append(svg("line", { class: "axis", x1: left, x2: width - right, y1: y(v), y2: y(v) }));
    const label = svg("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = `${Math.round(v)}${unit}`; root.append(label);
  }
  for (const [t, anchor] of [[start, "start"], [(start + end) / 2, "middle"], [end, "end"]]) {
    const label = svg("text", { x: x(t), y: height - 8, "text-anchor": anchor }); label.textContent = clock(t, end - start < 600); root.append(label);
  }
  let legendX = left;
  series.forEach((s, i) => {
    const colour = LINE_COLOURS[i % LINE_COLOURS.length], dash = LINE_DASHES[Math.floor(i / LINE_COLOURS.length) % LINE_DASHES.length];
    const attrs = { fill: "none", stroke: colour, "stroke-width": 2, "stroke-dasharray": dash };
    if (s.points.length > 1) root.append(svg("polyline", { ...attrs, "data-series": s.label, points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ") }));
    for (const [t, v] of s.points.length > 40 ? [s.points[s.points.length - 1]] : s.points) {
      root.append(svg("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, fill: colour }));
    }
    root.append(svg("line", { ...attrs, x1: legendX, x2: legendX + 18, y1: 12, y2: 12 }));
    const last = s.points.length ? s.points[s.points.length - 1][1] : null;
    const label = svg("text", { x: legendX + 22, y: 16 });
    label.textContent = last === null ? `${s.label} (none reported)` : `${s.label} (${Math.round(last)}${unit})`;
    root.append(label);
    legendX += 34 + 7 * label.textContent.length;
  });
  if (all.length === 0) {
    const none = svg("text", { x: left + plotW / 2, y: top + plotH / 2, "text-anchor": "middle" });
    none.textContent = empty; root.append(none);
  }
  return el("figure", { class: "chart line-chart", "data-series-count": String(series.length) },
    title ? el("figcaption", {}, title) : "", root);
}

// The heading of a chart of the last `hours`: says so only when the history reaches that far
// back; a younger history is named by when it starts (a chart drawn from its first sample).
/**
 * @param {string} what
 * @param {number[][][]} pointLists
 * @param {number} hours
 */
export function spanTitle(what, pointLists, hours) {
  const times = pointLists.flat().map((p) => p[0]);
  const now = Date.now() / 1000;
  if (!times.length) return `${what} (no samples yet)`;
  const first = Math.min(...times);
  if (first <= now - hours * 3600 + 600) return `${what} over the last ${hours} hours`;
  const minutes = Math.max(1, Math.round((now - first) / 60));
  const span = minutes < 120 ? `${minutes} minute${minutes === 1 ? "" : "s"}` : `${Math.round(minutes / 60)} hours`;
  return `${what} over the last ${span} (all the history kept so far)`;
}

// The chart of one metric from a metrics history answer: one line per node or per task.
// Up to MAX_LINES lines are drawn one per node or task; more are drawn as their mean, lowest and
// highest at each time, so a job of a thousand tasks stays a picture.
export const MAX_LINES = 8;

/**
 * @param {any} answer
 * @param {string} metric
 * @param {{title?: string, sinceSeconds?: number, key: (row: any) => string, unit?: string, max?: number, empty?: string}} options
 */
export function historyChart(answer, metric, { title, sinceSeconds, key, unit = "%", max = 100, empty }) {
  const rows = (answer.nodes || answer.tasks || []).filter((r) => r.metric === metric);
  let series = rows.map((r) => ({ label: key(r), points: r.points }));
  if (series.length > MAX_LINES) {
    const at = new Map();
    for (const row of rows) for (const [t, v] of row.points) (at.get(t) || at.set(t, []).get(t)).push(v);
    const times = [...at.keys()].sort((a, b) => a - b);
    const of = (f) => times.map((t) => [t, f(at.get(t))]);
    series = [
      { label: `mean of ${rows.length}`, points: of((vs) => vs.reduce((a, b) => a + b, 0) / vs.length) },
      { label: "lowest", points: of((vs) => Math.min(...vs)) },
      { label: "highest", points: of((vs) => Math.max(...vs)) },
    ];
  }
  return lineChart(series, { title, from: sinceSeconds, to: answer.now, unit, max, empty });
}

// ---------------------------------------------------------------- every page

function wireLogout() {
  const form = document.getElementById("logout-form");
  if (!form) return;
  const csrf = /** @type {HTMLInputElement} */ (/** @type {HTMLFormElement} */ (form).elements.namedItem("csrf"));
  session().then((s) => { csrf.value = s.csrf; }).catch(() => {});
}

// On a phone the menu folds behind a button; the button opens and closes it (Escape too).
function wireMenu() {
  const button = document.getElementById("menu-toggle");
  const nav = document.getElementById("main-menu");
  if (!button || !nav) return;
  const show = (open) => {
    nav.classList.toggle("open", open);
    button.setAttribute("aria-expanded", String(open));
  };
  button.addEventListener("click", () => show(!nav.classList.contains("open")));
  nav.addEventListener("keydown", (event) => {
    if (event.key === "Escape") { show(false); button.focus(); }
  });
}

// A region that scrolls sideways (a wide table on a phone) is reachable by keyboard.
function focusableScrollers() {
  for (const wrap of document.querySelectorAll(".table-wrap:not([tabindex])")) {
    wrap.setAttribute("tabindex", "0");
    if (!wrap.hasAttribute("role")) wrap.setAttribute("role", "region");
    const label = wrap.querySelector("table")?.getAttribute("aria-label");
    if (label && !wrap.hasAttribute("aria-label")) wrap.setAttribute("aria-label", label);
  }
}

function everyPage() {
  wireLogout();
  wireMenu();
  if (typeof MutationObserver === "undefined") return; // not a browser (node's unit tests)
  focusableScrollers();
  new MutationObserver(focusableScrollers).observe(document.body, { childList: true, subtree: true });
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", everyPage);
else everyPage();
