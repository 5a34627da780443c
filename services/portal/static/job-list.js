// @ts-check
// The job list: OpenPAI's columns, filters, ordering, paging, bulk stop; updated live from the
// platform's events (one stream per page), read again only when an event can change what it
// shows, and at most once every READ_GAP_MS.
import { $, api, el, events, fill, fmtDuration, fmtTime, jobLink, showError, stateBadge } from "./common.js";
import { LIST_EVENT_TYPES, coalescer, listMoved } from "./list-updates.js";

const READ_GAP_MS = 1500;
const SETTLE_MS = 1000;
// The total is counted with a read at most this often while events arrive (counting every
// matching job is the slow part of a list).
const COUNT_GAP_MS = 5000;

// Each column: its label, the order it sorts by, and whether a phone shows it. On a phone the
// list keeps Name (with when and whose under it), Status and Actions on the screen.
const COLUMNS = [
  ["Name", "jobName", true], ["Submitted", "submissionTime", false], ["User", "username", false], ["Duration", null, false],
  ["Virtual cluster", "vc", false], ["Retries", "retries", false], ["Tasks", "totalTaskNumber", false], ["GPUs", "totalGpuNumber", false],
  ["Priority", "jobPriority", false], ["Status", "state", true],
];
// Short enough to stay on one line: the year only when it is not this one.
const SHORT_TIME = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const LONG_TIME = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });

/** @param {number | null | undefined} ms */
function when(ms) {
  if (!ms) return "–";
  const date = new Date(ms);
  return (date.getFullYear() === new Date().getFullYear() ? SHORT_TIME : LONG_TIME).format(date);
}
const FINAL = new Set(["SUCCEEDED", "FAILED", "STOPPED"]);
const me = document.body.dataset.user || "";
const admin = document.body.dataset.role === "admin";
const url = new URLSearchParams(location.search);
// What the page shows, in one place: its order, page and filters (as the address says them), the
// live source, the rows shown and the number of the latest count asked for.
const state = {
  order: url.get("order") || "submissionTime,DESC",
  offset: Number(url.get("offset") || 0),
  limit: Number(url.get("limit") || 20),
  /** @type {Record<string, string>} */
  filters: {},
  /** @type {EventSource | null} */
  source: null,
  /** @type {any[]} */
  items: [],
  counted: 0,
  /** @type {string} the filters the event stream was opened for */
  streamFor: "",
  // the total is due with the next read (the view changed, or a job was submitted)
  countDue: true,
  lastCount: -Infinity,
  /** @type {number | null} */
  total: null,
};

function readFilters() {
  const form = $("#filters");
  /** @type {Record<string, string>} */
  const out = {};
  for (const key of ["keyword", "username", "vc"]) {
    const v = form.elements[key].value.trim();
    if (v) out[key] = v.split(",").map((s) => s.trim()).filter(Boolean).join(",");
  }
  $("#mine").checked = Boolean(me) && out.username === me;
  const states = [...form.querySelectorAll("input[name=state]:checked")].map((c) => c.value);
  if (states.length) out.state = states.join(",");
  return out;
}

function showHead() {
  const [field, dir] = state.order.split(",");
  fill($("#head"),
    el("th", { scope: "col" }, el("input", { type: "checkbox", id: "all", "aria-label": "Select every job on this page" })),
    COLUMNS.map(([label, key, phone]) => {
      const extra = phone ? {} : { class: "col-extra" };
      if (!key) return el("th", { scope: "col", ...extra }, label);
      const sorted = key === field;
      return el("th", { scope: "col", ...extra, "aria-sort": sorted ? (dir === "ASC" ? "ascending" : "descending") : "none" },
        el("button", { type: "button", "data-order": key }, label, sorted ? (dir === "ASC" ? " ▲" : " ▼") : ""));
    }),
    el("th", { scope: "col" }, "Actions"));
}

function query() {
  return { ...state.filters, order: state.order, offset: String(state.offset), limit: String(state.limit) };
}

// The page first, the total after: counting every matching job is the slow part of a list.
async function count(asked) {
  const answer = await api("/jobs?" + new URLSearchParams({ ...query(), limit: "1", offset: "0", withTotalCount: "true" }));
  if (asked !== state.counted) return;
  showCount(answer.totalCount ?? 0);
}

async function refresh() {
  // The total rides with a read of the rows once a view is shown; the first read of a view
  // shows its rows first and counts after.
  const withCount = state.countDue && state.items.length > 0 && Date.now() - state.lastCount >= COUNT_GAP_MS;
  let answer;
  try {
    answer = await api("/jobs?" + new URLSearchParams({ ...query(), ...(withCount ? { withTotalCount: "true" } : {}) }));
  } catch (error) { showError($("#list-error"), error); return; }
  fill($("#list-error"));
  let total = null;
  if (answer && !Array.isArray(answer) && Array.isArray(answer.data)) { total = answer.totalCount ?? null; answer = answer.data; }
  state.items = answer || [];
  const selected = new Set([...document.querySelectorAll("#rows input:checked")].map((c) => /** @type {HTMLInputElement} */ (c).value));
  fill($("#rows"), state.items.length === 0 ? [el("tr", {}, el("td", { colspan: String(COLUMNS.length + 2), class: "muted" }, "No jobs match."))] :
    state.items.map((job) => {
      const key = `${job.username}~${job.name}`;
      const mine = admin || job.username === me;
      return el("tr", { "data-job": key },
        el("td", {}, el("input", { type: "checkbox", value: key, checked: selected.has(key), "aria-label": `Select ${job.name}`, disabled: FINAL.has(job.state) || !mine })),
        // A job's page is its owner's and the admins': others see its name, not a link to a refusal.
        el("td", { class: "job-name" }, admin || job.username === me ? jobLink(job.username, job.name) : el("span", { class: "other-job" }, job.name),
          el("div", { class: "row-meta muted" }, `${when(job.submissionTime)} · ${job.username}`)),
        el("td", { class: "col-extra when", title: fmtTime(job.submissionTime) }, when(job.submissionTime)),
        el("td", { class: "col-extra" }, job.username),
        el("td", { class: "col-extra" }, fmtDuration(job.launchedTime || job.createdTime, job.completedTime)),
        el("td", { class: "col-extra" }, job.virtualCluster),
        el("td", { class: "col-extra num" }, String(job.retries ?? 0)),
        el("td", { class: "col-extra num" }, String(job.totalTaskNumber ?? "–")),
        el("td", { class: "col-extra num" }, String(job.totalGpuNumber ?? 0)),
        el("td", { class: "col-extra" }, job.jobPriority || "–"),
        el("td", {}, stateBadge(job.state)),
        el("td", { class: "row-actions" }, mine ? [
          el("a", { class: "button secondary small", href: "/submit.html?" + new URLSearchParams({ clone: key }), "aria-label": `Clone ${job.name}` }, "Clone"),
          FINAL.has(job.state) ? null : el("button", { type: "button", class: "danger small", "data-stop": key, "aria-label": `Stop ${job.name}` }, "Stop"),
        ] : null));
    }));
  $("#prev").disabled = state.offset === 0;
  updateStop();
  state.counted += 1;
  if (total !== null) {
    state.countDue = false;
    state.lastCount = Date.now();
    showCount(total);
  } else if (state.countDue && Date.now() - state.lastCount >= COUNT_GAP_MS) {
    state.countDue = false;
    state.lastCount = Date.now();
    count(state.counted).catch(() => {});
  } else if (state.total !== null) showCount(state.total);
  document.body.dataset.ready = "true";
}

function showCount(total) {
  state.total = total;
  $("#count").textContent = total ? `${state.offset + 1}–${state.offset + state.items.length} of ${total}` : "0 jobs";
  $("#next").disabled = state.offset + state.items.length >= total;
}

function updateStop() {
  $("#stop-selected").disabled = document.querySelectorAll("#rows input:checked").length === 0;
}

const reads = coalescer(refresh, {
  gapMs: READ_GAP_MS, settleMs: SETTLE_MS, now: () => Date.now(),
  later: (fn, ms) => setTimeout(fn, ms), cancel: (handle) => clearTimeout(handle),
});

function onEvent(event) {
  const shown = new Map(state.items.map((job) => [job.jobId, job.state]));
  if (!listMoved(event, shown, { order: state.order, filters: state.filters })) return;
  if (!event || event.type === "job.submitted" || state.filters.state) state.countDue = true;
  reads.request();
}

// One stream per page: opened again only when the filters it carries change (not for an order
// or a page of the same jobs).
function subscribe() {
  const params = { ...state.filters, types: LIST_EVENT_TYPES.join(",") };
  const key = new URLSearchParams(params).toString();
  if (state.source && key === state.streamFor) return;
  if (state.source) state.source.close();
  state.streamFor = key;
  state.source = events(params, onEvent);
}

function reload() {
  showHead();
  state.countDue = true;
  state.lastCount = -Infinity;
  state.total = null;
  state.items = [];
  reads.now();
  subscribe();
  history.replaceState(null, "", "?" + new URLSearchParams({ ...state.filters, order: state.order, offset: String(state.offset), limit: String(state.limit) }));
}

function start() {
  const form = $("#filters");
  for (const [k, v] of url.entries()) {
    if (k === "state") for (const s of v.split(",")) { const box = $(`#s-${s}`); if (box) box.checked = true; }
    else if (form.elements[k] && form.elements[k].type === "text") form.elements[k].value = v;
  }
  state.filters = readFilters();
  // The filters beyond name and owner are open where there is room, or when one is in use.
  const more = /** @type {HTMLDetailsElement} */ ($("#more-filters"));
  more.open = matchMedia("(min-width: 761px)").matches || Boolean(state.filters.vc || state.filters.state || (state.filters.username && !$("#mine").checked));
  $("#mine").addEventListener("change", (e) => {
    const users = form.elements.username;
    if (e.target.checked) users.value = me;
    else if (users.value.trim() === me) users.value = "";
    state.filters = readFilters();
    state.offset = 0;
    reload();
  });
  $("#page-size").value = String(state.limit);
  form.addEventListener("submit", (e) => { e.preventDefault(); state.filters = readFilters(); state.offset = 0; reload(); });
  $("#head").addEventListener("click", (e) => {
    const key = e.target.closest("button")?.dataset.order;
    if (key) {
      const [field, dir] = state.order.split(",");
      state.order = `${key},${field === key && dir === "DESC" ? "ASC" : "DESC"}`;
      state.offset = 0;
      reload();
    } else if (e.target.id === "all") {
      for (const c of document.querySelectorAll("#rows input[type=checkbox]:not(:disabled)")) /** @type {HTMLInputElement} */ (c).checked = e.target.checked;
      updateStop();
    }
  });
  $("#rows").addEventListener("change", updateStop);
  $("#rows").addEventListener("click", (e) => {
    const key = e.target.closest("button")?.dataset.stop;
    if (key) stopJobs([key]);
  });
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); reload(); });
  $("#next").addEventListener("click", () => { state.offset += state.limit; reload(); });
  $("#page-size").addEventListener("change", (e) => { state.limit = Number(e.target.value); state.offset = 0; reload(); });
  $("#stop-selected").addEventListener("click", () => {
    stopJobs([...document.querySelectorAll("#rows input:checked")].map((c) => /** @type {HTMLInputElement} */ (c).value));
  });
  reload();
}

/** @param {string[]} keys */
async function stopJobs(keys) {
  if (!keys.length || !confirm(keys.length === 1 ? `Stop ${keys[0].split("~").slice(1).join("~")}?` : `Stop ${keys.length} job(s)?`)) return;
  const results = await Promise.allSettled(keys.map((key) => {
    const [user, ...name] = key.split("~");
    return api(`/jobs/${encodeURIComponent(user)}~${encodeURIComponent(name.join("~"))}/executionType`, { method: "PUT", body: { value: "STOP" } });
  }));
  const failed = results.filter((r) => r.status === "rejected");
  if (failed.length) showError($("#list-error"), new Error(`${failed.length} job(s) could not be stopped: ${/** @type {PromiseRejectedResult} */ (failed[0]).reason.message}`));
  reads.now();
}

start();
