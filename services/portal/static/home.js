// @ts-check
// Home: my jobs by state, my recent jobs, my VCs' GPUs, and for admins the jobs that need a look.
import { $, api, barChart, showError, el, fill, fmtDuration, fmtTime, jobLink, lineChart, live, session, spanTitle, stateBadge } from "./common.js";

const STATES = ["WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"];
const LONG_WAIT_MS = 60 * 60 * 1000;
const HOURS = 6;

// The cluster's mean GPU and CPU use over time (admins: the metrics history is a cluster route).
async function clusterUse() {
  const since = Math.floor(Date.now() / 1000) - HOURS * 3600;
  let answer;
  try { answer = await api("/cluster/metrics?" + new URLSearchParams({ since: String(since) })); }
  catch (error) { showError($("#use-error"), error); return; }
  fill($("#use-error"));
  const mean = (metric) => {
    const at = new Map();
    for (const row of answer.nodes.filter((r) => r.metric === metric)) {
      for (const [t, v] of row.points) { const a = at.get(t) || [0, 0]; at.set(t, [a[0] + v, a[1] + 1]); }
    }
    return [...at.entries()].sort((a, b) => a[0] - b[0]).map(([t, [sum, n]]) => [t, sum / n]);
  };
  $("#use-title").textContent = spanTitle("Cluster use", answer.nodes.map((r) => r.points), HOURS);
  fill($("#use"), lineChart([{ label: "GPU", points: mean("gpu") }, { label: "CPU", points: mean("cpu") }],
    { title: "Mean GPU and CPU use of the cluster's nodes", from: since, to: answer.now }));
  document.body.dataset.history = "true";
}

// What the page holds, in one place: the timer that redraws the cluster's use.
const state = {
  /** @type {ReturnType<typeof setTimeout> | null} */
  clusterUseTimer: null,
};

async function refresh() {
  const me = await session();
  const mine = await api("/jobs?" + new URLSearchParams({ username: me.user, limit: "1000" }));
  const counts = Object.fromEntries(STATES.map((s) => [s, 0]));
  for (const job of mine) counts[job.state] = (counts[job.state] || 0) + 1;
  fill($("#counts"), STATES.map((s) => el("div", { class: "card", "data-count": s },
    el("div", { class: "n" }, String(counts[s])), el("div", { class: "l" }, s.toLowerCase()))));
  fill($("#recent"), mine.length === 0 ? el("p", { class: "muted" }, "No jobs yet.") :
    el("table", { "aria-label": "Recent jobs" },
      el("thead", {}, el("tr", {}, ["Name", "Submitted", "Status"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, mine.slice(0, 8).map((j) => el("tr", {},
        el("td", {}, jobLink(j.username, j.name)), el("td", {}, fmtTime(j.submissionTime)), el("td", {}, stateBadge(j.state)))))));
  const [vcs, profile] = await Promise.all([api("/virtual-clusters").catch(() => ({})), api("/users/me").catch(() => ({}))]);
  const allowed = new Set(profile.virtualCluster || []);
  const shown = Object.entries(vcs).filter(([name]) => me.admin || allowed.has(name));
  fill($("#vcs"), shown.length === 0 ? el("p", { class: "muted" }, "No virtual cluster is granted to you yet.") : [
    barChart(shown.map(([name, vc]) => ({ label: name, value: vc.resourcesUsed.GPUs, max: vc.resourcesGuaranteed.GPUs })),
      { title: "GPUs used of guaranteed, per virtual cluster", unit: " GPU" }),
    el("table", { "aria-label": "My virtual clusters" },
      el("thead", {}, el("tr", {}, ["Virtual cluster", "Free GPUs", "Used GPUs", "Running", "Waiting"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, shown.map(([name, vc]) => el("tr", {},
        el("td", {}, name),
        el("td", { class: "num" }, String(Math.max(0, vc.resourcesGuaranteed.GPUs - vc.resourcesUsed.GPUs))),
        el("td", { class: "num" }, String(vc.resourcesUsed.GPUs)),
        el("td", { class: "num" }, String(vc.runningJobs ?? 0)),
        el("td", { class: "num" }, String(vc.waitingJobs ?? 0)))))),
  ]);
  if (me.admin) await abnormal();
  if (me.admin && !state.clusterUseTimer) {
    $("#use-panel").classList.remove("hidden");
    clusterUse();
    state.clusterUseTimer = setInterval(clusterUse, 30000);
  }
  document.body.dataset.ready = "true";
}

async function abnormal() {
  const open = await api("/jobs?" + new URLSearchParams({ state: "WAITING,RUNNING", limit: "500" }));
  const now = Date.now();
  const found = [];
  for (const job of open) {
    if (job.state === "WAITING" && now - job.submissionTime > LONG_WAIT_MS) found.push([job, `waiting for ${fmtDuration(job.submissionTime)}`]);
    if ((job.retries || 0) >= 3) found.push([job, `failed and retried ${job.retries} times`]);
  }
  $("#abnormal-panel").classList.remove("hidden");
  fill($("#abnormal"), found.length === 0 ? el("p", { class: "muted" }, "Nothing unusual: no job waits over an hour or keeps failing.") :
    el("table", { "aria-label": "Jobs that need a look" },
      el("thead", {}, el("tr", {}, ["Job", "User", "Why", "Status"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, found.map(([j, why]) => el("tr", {},
        el("td", {}, jobLink(j.username, j.name)), el("td", {}, j.username), el("td", {}, why), el("td", {}, stateBadge(j.state)))))));
}

session().then((me) => { refresh(); live({ username: me.user }, refresh); });
