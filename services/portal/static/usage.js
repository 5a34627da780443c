// @ts-check
// Usage: GPU-hours, CPU-hours, jobs by final state and mean wait per user or virtual cluster over
// a period, from GET /api/v2/usage (admins see everyone; a user their own jobs).
import { $, api, bar, el, fill, showError } from "./common.js";

const KEYS = { user: ["User", "user"], vc: ["Virtual cluster", "virtualCluster"] };
const PERIODS = ["24h", "7d", "30d", "90d", "365d"];

/** @param {number} value */
export function hours(value) {
  return value.toLocaleString("en", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
}

/** @param {number | null} seconds */
export function wait(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function chosen() {
  const query = new URLSearchParams(location.search);
  const by = query.get("by") === "vc" ? "vc" : "user";
  const since = PERIODS.includes(query.get("since") || "") ? String(query.get("since")) : "7d";
  return { by, since };
}

/** @param {any} row @param {string} key @param {number} most @param {number} all */
function line(row, key, most, all) {
  const share = all ? Math.round((100 * row.gpuHours) / all) : 0;
  return el("tr", { "data-key": row[key] },
    el("th", { scope: "row" }, row[key]),
    el("td", { class: "num", "data-gpu-hours": String(row.gpuHours) }, hours(row.gpuHours)),
    el("td", {}, bar(row.gpuHours, most, `${share}% of the GPU-hours`)),
    el("td", { class: "num" }, hours(row.cpuHours)),
    el("td", { class: "num" }, String(row.jobsRun)),
    el("td", { class: "num" }, String(row.jobs.SUCCEEDED)),
    el("td", { class: "num" }, String(row.jobs.FAILED)),
    el("td", { class: "num" }, String(row.jobs.STOPPED)),
    el("td", { class: "num" }, wait(row.meanWaitSeconds)));
}

async function refresh() {
  const { by, since } = chosen();
  /** @type {HTMLInputElement} */ ($(`#by-${by}`)).checked = true;
  /** @type {HTMLSelectElement} */ ($("#since")).value = since;
  const [heading, key] = KEYS[by];
  $("#usage-key").textContent = heading;
  let report;
  try { report = await api("/usage?" + new URLSearchParams({ by, from: since })); }
  catch (error) { showError($("#usage-error"), error); document.body.dataset.ready = "true"; return; }
  fill($("#usage-error"));
  const mine = document.body.dataset.role !== "admin";
  $("#usage-scope").textContent = `From ${new Date(report.from).toLocaleString()} to ${new Date(report.to).toLocaleString()}` +
    (mine ? ": your own jobs." : ": every user's jobs.");
  const total = report.total;
  fill($("#usage-total"), el("dl", { class: "kv" },
    el("dt", {}, "GPU-hours"), el("dd", { id: "total-gpu-hours" }, hours(total.gpuHours)),
    el("dt", {}, "CPU-hours"), el("dd", {}, hours(total.cpuHours)),
    el("dt", {}, "Jobs run"), el("dd", {}, String(total.jobsRun)),
    el("dt", {}, "Jobs ended"), el("dd", {},
      `${total.jobs.SUCCEEDED} succeeded, ${total.jobs.FAILED} failed, ${total.jobs.STOPPED} stopped`),
    el("dt", {}, "Mean wait"), el("dd", {}, wait(total.meanWaitSeconds))));
  const most = Math.max(0, ...report.rows.map((/** @type {any} */ r) => r.gpuHours));
  fill($("#usage-rows"), report.rows.length === 0 ?
    el("tr", {}, el("td", { colspan: "9", class: "muted" }, "No job ran, started or ended in this period.")) :
    report.rows.map((/** @type {any} */ row) => line(row, key, most, total.gpuHours)));
  document.body.dataset.ready = "true";
}

// A change of grouping or period is a new address, so the view can be linked and the back button works.
$("#usage-form").addEventListener("change", () => {
  const form = /** @type {HTMLFormElement} */ ($("#usage-form"));
  const data = new FormData(form);
  const query = new URLSearchParams({ by: String(data.get("by") || "user"), since: String(data.get("since") || "7d") });
  history.pushState(null, "", "?" + query);
  document.body.dataset.ready = "false";
  refresh();
});
window.addEventListener("popstate", refresh);
refresh();
