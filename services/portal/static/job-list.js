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
let order = url.get("order") || "submissionTime,DESC";
let offset = Number(url.get("offset") || 0);
let limit = Number(url.get("limit") || 20);
let filters = {};
let source = null;
let items = [];

function readFilters() {
  const form = $("#filters");
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
  const [field, dir] = order.split(",");
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
  return { ...filters, order, offset: String(offset), limit: String(limit) };
}

let counted = 0;

// The page first, the total after: counting every matching job is the slow part of a list.
async function count(asked) {
  const answer = await api("/jobs?" + new URLSearchParams({ ...query(), limit: "1", offset: "0", withTotalCount: "true" }));
  if (asked !== counted) return;
  const total = answer.totalCount ?? 0;
  $("#count").textContent = total ? `${offset + 1}–${offset + items.length} of ${total}` : "0 jobs";
  $("#next").disabled = offset + items.length >= total;
}

async function refresh() {
  let answer;
  try {
    answer = await api("/jobs?" + new URLSearchParams(query()));
  } catch (error) { showError($("#list-error"), error); return; }
  fill($("#list-error"));
  items = answer || [];
  const selected = new Set([...document.querySelectorAll("#rows input:checked")].map((c) => /** @type {HTMLInputElement} */ (c).value));
  fill($("#rows"), items.length === 0 ? [el("tr", {}, el("td", { colspan: String(COLUMNS.length + 1), class: "muted" }, "No jobs match."))] :
    items.map((job) => {
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
  $("#count").textContent = items.length ? `${offset + 1}–${offset + items.length}` : "0 jobs";
  $("#prev").disabled = offset === 0;
  $("#next").disabled = items.length < limit;
  updateStop();
  counted += 1;
  count(counted).catch(() => {});
  document.body.dataset.ready = "true";
}

function updateStop() {
  $("#stop-selected").disabled = document.querySelectorAll("#rows input:checked").length === 0;
}

function subscribe() {
  if (source) source.close();
  source = live(query(), refresh);
  history.replaceState(null, "", "?" + new URLSearchParams({ ...filters, order, offset: String(offset), limit: String(limit) }));
}

function reload() { showHead(); refresh(); subscribe(); }

function start() {
  const form = $("#filters");
  for (const [k, v] of url.entries()) {
    if (k === "state") for (const s of v.split(",")) { const box = $(`#s-${s}`); if (box) box.checked = true; }
    else if (form.elements[k] && form.elements[k].type === "text") form.elements[k].value = v;
  }
  filters = readFilters();
  $("#page-size").value = String(limit);
  form.addEventListener("submit", (e) => { e.preventDefault(); filters = readFilters(); offset = 0; reload(); });
  $("#head").addEventListener("click", (e) => {
    const key = e.target.closest("button")?.dataset.order;
    if (key) {
      const [field, dir] = order.split(",");
      order = `${key},${field === key && dir === "DESC" ? "ASC" : "DESC"}`;
      offset = 0;
      reload();
    } else if (e.target.id === "all") {
      for (const c of document.querySelectorAll("#rows input[type=checkbox]:not(:disabled)")) /** @type {HTMLInputElement} */ (c).checked = e.target.checked;
      updateStop();
    }
  });
  $("#rows").addEventListener("change", updateStop);
  $("#prev").addEventListener("click", () => { offset = Math.max(0, offset - limit); reload(); });
  $("#next").addEventListener("click", () => { offset += limit; reload(); });
  $("#page-size").addEventListener("change", (e) => { limit = Number(e.target.value); offset = 0; reload(); });
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
