// @ts-check
// The job list: OpenPAI's columns, filters, ordering, paging, bulk stop; updated live.
import { $, api, el, fill, fmtDuration, fmtTime, jobLink, live, showError, stateBadge } from "./common.js";

const COLUMNS = [
  ["Name", "jobName"], ["Submitted", "submissionTime"], ["User", "username"], ["Duration", null],
  ["Virtual cluster", "vc"], ["Retries", "retries"], ["Tasks", "totalTaskNumber"], ["GPUs", "totalGpuNumber"],
  ["Priority", "jobPriority"], ["Status", "state"],
];
const FINAL = new Set(["SUCCEEDED", "FAILED", "STOPPED"]);
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
};

function readFilters() {
  const form = $("#filters");
  /** @type {Record<string, string>} */
  const out = {};
  for (const key of ["keyword", "username", "vc"]) {
    const v = form.elements[key].value.trim();
    if (v) out[key] = v.split(",").map((s) => s.trim()).filter(Boolean).join(",");
  }
  const states = [...form.querySelectorAll("input[name=state]:checked")].map((c) => c.value);
  if (states.length) out.state = states.join(",");
  return out;
}

function showHead() {
  const [field, dir] = state.order.split(",");
  fill($("#head"),
    el("th", { scope: "col" }, el("input", { type: "checkbox", id: "all", "aria-label": "Select every job on this page" })),
    COLUMNS.map(([label, key]) => {
      if (!key) return el("th", { scope: "col" }, label);
      const sorted = key === field;
      return el("th", { scope: "col", "aria-sort": sorted ? (dir === "ASC" ? "ascending" : "descending") : "none" },
        el("button", { type: "button", "data-order": key }, label, sorted ? (dir === "ASC" ? " ▲" : " ▼") : ""));
    }));
}

function query() {
  return { ...state.filters, order: state.order, offset: String(state.offset), limit: String(state.limit) };
}

// The page first, the total after: counting every matching job is the slow part of a list.
async function count(asked) {
  const answer = await api("/jobs?" + new URLSearchParams({ ...query(), limit: "1", offset: "0", withTotalCount: "true" }));
  if (asked !== state.counted) return;
  const total = answer.totalCount ?? 0;
  $("#count").textContent = total ? `${state.offset + 1}–${state.offset + state.items.length} of ${total}` : "0 jobs";
  $("#next").disabled = state.offset + state.items.length >= total;
}

async function refresh() {
  let answer;
  try {
    answer = await api("/jobs?" + new URLSearchParams(query()));
  } catch (error) { showError($("#list-error"), error); return; }
  fill($("#list-error"));
  state.items = answer || [];
  const selected = new Set([...document.querySelectorAll("#rows input:checked")].map((c) => /** @type {HTMLInputElement} */ (c).value));
  fill($("#rows"), state.items.length === 0 ? [el("tr", {}, el("td", { colspan: String(COLUMNS.length + 1), class: "muted" }, "No jobs match."))] :
    state.items.map((job) => {
      const key = `${job.username}~${job.name}`;
      return el("tr", { "data-job": key },
        el("td", {}, el("input", { type: "checkbox", value: key, checked: selected.has(key), "aria-label": `Select ${job.name}`, disabled: FINAL.has(job.state) })),
        el("td", {}, jobLink(job.username, job.name)),
        el("td", {}, fmtTime(job.submissionTime)),
        el("td", {}, job.username),
        el("td", {}, fmtDuration(job.launchedTime || job.createdTime, job.completedTime)),
        el("td", {}, job.virtualCluster),
        el("td", { class: "num" }, String(job.retries ?? 0)),
        el("td", { class: "num" }, String(job.totalTaskNumber ?? "–")),
        el("td", { class: "num" }, String(job.totalGpuNumber ?? 0)),
        el("td", {}, job.jobPriority || "–"),
        el("td", {}, stateBadge(job.state)));
    }));
  $("#count").textContent = state.items.length ? `${state.offset + 1}–${state.offset + state.items.length}` : "0 jobs";
  $("#prev").disabled = state.offset === 0;
  $("#next").disabled = state.items.length < state.limit;
  updateStop();
  state.counted += 1;
  count(state.counted).catch(() => {});
  document.body.dataset.ready = "true";
}

function updateStop() {
  $("#stop-selected").disabled = document.querySelectorAll("#rows input:checked").length === 0;
}

function subscribe() {
  if (state.source) state.source.close();
  state.source = live(query(), refresh);
  history.replaceState(null, "", "?" + new URLSearchParams({ ...state.filters, order: state.order, offset: String(state.offset), limit: String(state.limit) }));
}

function reload() { showHead(); refresh(); subscribe(); }

function start() {
  const form = $("#filters");
  for (const [k, v] of url.entries()) {
    if (k === "state") for (const s of v.split(",")) { const box = $(`#s-${s}`); if (box) box.checked = true; }
    else if (form.elements[k] && form.elements[k].type === "text") form.elements[k].value = v;
  }
  state.filters = readFilters();
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
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - state.limit); reload(); });
  $("#next").addEventListener("click", () => { state.offset += state.limit; reload(); });
  $("#page-size").addEventListener("change", (e) => { state.limit = Number(e.target.value); state.offset = 0; reload(); });
  $("#stop-selected").addEventListener("click", async () => {
    const keys = [...document.querySelectorAll("#rows input:checked")].map((c) => /** @type {HTMLInputElement} */ (c).value);
    if (!keys.length || !confirm(`Stop ${keys.length} job(s)?`)) return;
    const results = await Promise.allSettled(keys.map((key) => {
      const [user, ...name] = key.split("~");
      return api(`/jobs/${encodeURIComponent(user)}~${encodeURIComponent(name.join("~"))}/executionType`, { method: "PUT", body: { value: "STOP" } });
    }));
    const failed = results.filter((r) => r.status === "rejected");
    if (failed.length) showError($("#list-error"), new Error(`${failed.length} job(s) could not be stopped: ${failed[0].reason.message}`));
    refresh();
  });
  reload();
}

start();
