// @ts-check
// A job's page: status, exit and failure analysis, tasks, live logs, config; updated live.
import { $, api, el, fill, fmtDuration, fmtTime, historyChart, live, portal, session, showError, stateBadge } from "./common.js";
import { neverFits, solutionSteps, solutionText, stoppedNotice, successDespiteFailures, trueToBudget } from "./explain.js";
import { saveAsTemplate } from "./market-share.js";
import { logFileName, matchingLines, unseen } from "./log-view.js";
import { digestsByRole } from "./pinning.js";
import { openTerminal } from "./terminal.js";

const params = new URLSearchParams(location.search);
const user = params.get("username");
const name = params.get("jobName");
const base = `/jobs/${encodeURIComponent(user)}~${encodeURIComponent(name)}`;
const FINAL = new Set(["SUCCEEDED", "FAILED", "STOPPED"]);
// What the page shows, in one place: the job's detail, the attempt chosen, the log followed
// (which, how far read, its timer) and the use chart's timer.
const page = {
  /** @type {any} */
  detail: null,
  /** @type {number | null} the attempt chosen; null: the latest */
  chosenAttempt: null,
  logKey: "",
  logOffset: 0,
  // the log read so far, whole (the view may show only the lines a search keeps)
  logText: "",
  /** @type {ReturnType<typeof setTimeout> | null} */
  logTimer: null,
  // a read of the log is under way; another was asked for meanwhile
  logReading: false,
  logAgain: false,
  /** @type {ReturnType<typeof setTimeout> | null} */
  useTimer: null,
  /** @type {number | null} the GPUs of the whole cluster, once known */
  clusterGpus: null,
  // what the task tables show now (their data), so an update that changes nothing builds nothing
  tasksKey: "",
  // the job's config asks for the ssh plugin
  ssh: false,
  /** @type {any} the job's config, as the API's validator read it; null until known */
  config: null,
  /** @type {(() => void) | null} closes the terminal open in a task */
  closeTerminal: null,
};

// The job's retry budget (jobRetryCount, 0 unless set); null until its config is read.
function retryBudget() {
  if (!page.config) return null;
  return Number.isInteger(page.config.jobRetryCount) ? page.config.jobRetryCount : 0;
}

function term(label, value) {
  return [el("dt", {}, label), el("dd", {}, value ?? "–")];
}

function exitMeaning(status) {
  const spec = status.appExitSpec;
  if (status.appExitCode === null || status.appExitCode === undefined) return "–";
  const parts = [String(status.appExitCode)];
  if (spec && spec.phrase) parts.push(` ${spec.phrase}`);
  if (spec && spec.type) parts.push(` (${spec.type})`);
  return parts.join("");
}

function showSummary() {
  const s = page.detail.jobStatus;
  document.title = `${name} · PAI`;
  fill($("#job-title"), el("h2", { class: "inline" }, `${user} / ${name} `), stateBadge(s.state));
  const retries = s.retryDetails || {};
  fill($("#summary"),
    term("Status", stateBadge(s.state)),
    term("User", s.username),
    term("Virtual cluster", s.virtualCluster),
    s.queue ? term("Queue", `${s.queue.position} of ${s.queue.of} in VC ${s.queue.virtualCluster}`) : null,
    term("Submitted", fmtTime(s.submissionTime)),
    term("Launched", fmtTime(s.launchedTime)),
    term("Completed", fmtTime(s.completedTime)),
    term("Duration", fmtDuration(s.launchedTime || s.createdTime, s.completedTime)),
    term("Retries", `${s.retries} (user ${retries.user ?? 0}, platform ${retries.platform ?? 0}, resource ${retries.resource ?? 0})`),
    term("Exit code", exitMeaning(s)),
    term("Tasks", `${s.totalTaskNumber ?? "–"} in ${s.totalTaskRoleNumber ?? "–"} role(s), ${s.totalGpuNumber ?? 0} GPU(s)`),
    term("Attempt", String(s.attemptId ?? 0)));
  const pending = $("#pending");
  const never = neverFits(page.detail, page.clusterGpus);
  if (s.state === "WAITING" && (s.pendingReason || never)) {
    fill(pending, s.pendingReason ? `Waiting: ${s.pendingReason}` : "Waiting.", never ? el("strong", { class: "never-fits" }, ` ${never}`) : null);
    pending.classList.remove("hidden");
  } else pending.classList.add("hidden");
  const outcome = $("#outcome");
  const note = successDespiteFailures(page.detail) || stoppedNotice(page.detail);
  outcome.textContent = note || "";
  outcome.classList.toggle("hidden", !note);
  const failure = $("#failure");
  const spec = s.appExitSpec;
  if (s.state === "FAILED" || (s.state !== "STOPPED" && spec && s.appExitCode)) {
    const steps = spec ? solutionSteps(spec.solution) : [];
    const advice = solutionText(trueToBudget(steps, { budget: retryBudget(), retries: s.retries ?? 0, final: FINAL.has(s.state) }));
    fill(failure,
      el("strong", {}, `Exit code ${exitMeaning(s)}`),
      spec && spec.reason ? el("p", {}, spec.reason) : null,
      advice ? el("p", {}, "What to do: ", advice) : null,
      s.appExitTriggerMessage ? el("p", {}, `Triggered by ${s.appExitTriggerTaskRoleName ?? "?"}[${s.appExitTriggerTaskIndex ?? "?"}]: ${s.appExitTriggerMessage}`) : null,
      s.appExitDiagnostics ? el("pre", { class: "config" }, s.appExitDiagnostics) : null);
    failure.classList.remove("hidden");
  } else failure.classList.add("hidden");
  $("#stop").disabled = FINAL.has(s.state) || s.executionType === "STOP";
  $("#clone").href = "/submit.html?" + new URLSearchParams({ clone: `${user}~${name}` });
  // Where an engine ran the tasks in their images: a clone pinned to the digests they ran.
  const pinned = $("#clone-pinned");
  pinned.classList.toggle("hidden", Object.keys(digestsByRole(page.detail)).length === 0);
  pinned.href = "/submit.html?" + new URLSearchParams({ clone: `${user}~${name}`, pin: "images" });
}

function ports(p) {
  return p && Object.keys(p).length ? Object.entries(p).map(([k, v]) => `${k}:${v}`).join(", ") : "–";
}

const esc = (value) => String(value ?? "–").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const badge = (state) => `<span class="state state-${esc(state || "UNKNOWN")}" data-state="${esc(state || "UNKNOWN")}">${esc(state || "UNKNOWN")}</span>`;
const HEAD = ["Index", "State", "Retries", "IP", "Ports", "Exit code", "Node", "Started", "Duration", "Log"];

// A job may have thousands of tasks: rows are written as escaped HTML in one go, which the
// browser builds far faster than one element at a time.
function taskRows(role, statuses) {
  return statuses.map((t) => `<tr data-task="${esc(role)}-${esc(t.taskIndex)}">` +
    `<td class="num">${esc(t.taskIndex)}</td><td>${badge(t.taskState)}</td><td class="num">${t.retries ? `<button type="button" class="secondary small" data-tries="${esc(role)}/${esc(t.taskIndex)}" aria-label="Tries of ${esc(role)}[${esc(t.taskIndex)}]">${esc(t.retries)}</button>` : "0"}</td>` +
    `<td>${esc(t.containerIp || "–")}</td><td>${esc(ports(t.containerPorts))}</td><td class="num">${esc(t.containerExitCode)}</td>` +
    `<td>${esc(t.containerNodeName || "–")}</td><td>${esc(fmtTime(t.launchedTime))}</td>` +
    `<td>${esc(fmtDuration(t.launchedTime, t.completedTime))}</td>` +
    `<td><button type="button" class="secondary" data-log="${esc(role)}/${esc(t.taskIndex)}">Log</button></td></tr>`).join("");
}

// The task tables are built again only when the tasks changed: a page of a thousand tasks costs
// its browser far more to lay out again than to compare (a live update often changes nothing
// the tables show, e.g. the connection's first event).
function showTasks() {
  const roles = Object.entries(page.detail.taskRoles || {});
  const key = JSON.stringify(roles.map(([role, status]) => [role, status.taskStatuses || []]));
  if (key === page.tasksKey) return;
  page.tasksKey = key;
  const boxes = [];
  const options = [];
  for (const [role, status] of roles) {
    const statuses = status.taskStatuses || [];
    for (const t of statuses) options.push(`<option value="${esc(role)}/${esc(t.taskIndex)}">${esc(role)}[${esc(t.taskIndex)}] (${esc(t.taskState)})</option>`);
    const tbody = el("tbody");
    tbody.innerHTML = taskRows(role, statuses);
    boxes.push(el("h3", {}, role),
      el("div", { class: "table-wrap" }, el("table", { class: "tasks", "aria-label": `Tasks of ${role}` },
        el("thead", {}, el("tr", {}, HEAD.map((h) => el("th", { scope: "col" }, h)))), tbody)));
  }
  fill($("#roles"), boxes);
  const select = $("#log-task");
  const current = select.value;
  select.innerHTML = options.join("");
  if (current && [...select.options].some((o) => o.value === current)) select.value = current;
}

async function showAttempts() {
  const attempts = await api(`${base}/job-attempts`).catch(() => []);
  const select = $("#attempt");
  const current = select.value;
  // OpenPAI's job history names each attempt by `attemptIndex`, from #0 (the first run) up.
  const listed = (attempts || []).filter((a) => Number.isInteger(a.attemptIndex))
    .sort((a, b) => a.attemptIndex - b.attemptIndex);
  fill(select, el("option", { value: "" }, "latest"),
    listed.map((a) => el("option", { value: String(a.attemptIndex) },
      `#${a.attemptIndex} ${a.state || ""}${a.isLatest ? " (latest)" : ""}`)));
  if ([...select.options].some((o) => o.value === current)) select.value = current;
}

function taskOf(role, index) {
  return ((page.detail.taskRoles[role] || {}).taskStatuses || []).find((x) => String(x.taskIndex) === String(index));
}

function taskState(role, index) {
  const t = taskOf(role, index);
  return t ? t.taskState : "WAITING";
}

// A task's tries within the attempt shown (its retries), from OpenPAI's task route.
async function showTries(role, index) {
  const attempt = page.detail.jobStatus.attemptId ?? 0;
  const box = $("#tries");
  try {
    const task = await api(`${base}/attempts/${attempt}/taskRoles/${encodeURIComponent(role)}/taskIndex/${index}/attempts`);
    $("#tries-title").textContent = `Tries of ${role}[${index}] in attempt #${attempt}`;
    fill($("#tries-table"), el("thead", {}, el("tr", {}, ["Try", "State", "Exit code", "Node", "Started", "Duration"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, (task.attempts || []).map((/** @type {any} */ a) => el("tr", { "data-try": String(a.attemptId) },
        el("td", { class: "num" }, `#${a.attemptId}`), el("td", {}, stateBadge(a.attemptState)),
        el("td", { class: "num" }, a.containerExitCode ?? "–"), el("td", {}, a.containerNodeName || "–"),
        el("td", {}, fmtTime(a.currentAttemptLaunchedTime)),
        el("td", {}, fmtDuration(a.currentAttemptLaunchedTime, a.currentAttemptCompletedTime))))));
    box.classList.remove("hidden");
    box.focus();
  } catch (error) { showError($("#job-error"), error); }
}

// One read of the log at a time: a call while one is under way (the job changed, the user chose
// another task) asks for one more read after it, never a second read from the same offset, which
// would show its lines twice.
async function followLog() {
  clearTimeout(page.logTimer);
  if (page.logReading) { page.logAgain = true; return; }
  page.logReading = true;
  let more = false;
  try { more = await readLog(); } finally { page.logReading = false; }
  if (page.logAgain) { page.logAgain = false; followLog(); return; }
  if (more) page.logTimer = setTimeout(followLog, 1000);
}

// Reads the log from where the page's copy ends; says whether it may still grow.
async function readLog() {
  const value = $("#log-task").value;
  if (!value || !page.detail) return false;
  const [role, index] = value.split("/");
  const file = $("#log-file").value;
  const attempt = page.detail.jobStatus.attemptId ?? 0;
  const key = `${attempt}/${role}/${index}/${(taskOf(role, index) || {}).attemptId ?? 0}/${file}`;
  if (key !== page.logKey) { page.logKey = key; page.logOffset = 0; page.logText = ""; showLog(); }
  const state = taskState(role, index);
  // a finished task's log longer than one piece: read on to its end
  let unread = false;
  if (state !== "WAITING") {
    try {
      // The log of the task's latest try (a retried task's earlier tries have their own).
      const tried = (taskOf(role, index) || {}).attemptId ?? 0;
      const path = `${base}/attempts/${attempt}/taskRoles/${encodeURIComponent(role)}/taskIndex/${index}/attempts/${tried}/logs/${file}?offset=${page.logOffset}`;
      const piece = await api(path);
      if (key === page.logKey && piece && piece.content) {
        const { text, end } = unseen(page.logOffset, piece);
        page.logOffset = end;
        unread = typeof piece.size === "number" && end < piece.size;
        if (text) {
          page.logText += text;
          showLog(text);
        }
      }
      $("#log-state").textContent = FINAL.has(state) ? `${state}: the whole log` : "following…";
    } catch (error) {
      $("#log-state").textContent = error.message;
    }
  } else $("#log-state").textContent = "the task has not started yet";
  return unread || !FINAL.has(state) || !FINAL.has(page.detail.jobStatus.state);
}

// The log as read so far, or the lines of it a search keeps; `added` is what just arrived
// (appended as it is where no search filters the view).
/** @param {string} [added] */
function showLog(added) {
  const query = $("#log-search").value;
  const log = $("#log");
  if (!query) {
    if (added !== undefined && log.textContent.length + added.length === page.logText.length) log.textContent += added;
    else log.textContent = page.logText;
    $("#log-found").textContent = "";
    log.scrollTop = log.scrollHeight;
    return;
  }
  const { text, count } = matchingLines(page.logText, query);
  log.textContent = text;
  $("#log-found").textContent = `${count} line${count === 1 ? "" : "s"} contain “${query}”`;
}

// The task's whole log of the chosen output, read piece by piece from the API's log route, as a
// file (however much of it the page has read).
async function downloadLog() {
  const value = $("#log-task").value;
  if (!value || !page.detail) return;
  const [role, index] = value.split("/");
  const file = $("#log-file").value;
  const attempt = page.detail.jobStatus.attemptId ?? 0;
  const tried = (taskOf(role, index) || {}).attemptId ?? 0;
  const route = `${base}/attempts/${attempt}/taskRoles/${encodeURIComponent(role)}/taskIndex/${index}/attempts/${tried}/logs/${file}`;
  const parts = [];
  let offset = 0;
  try {
    for (;;) {
      const piece = await api(`${route}?offset=${offset}&limit=1048576`);
      if (!piece || !piece.content) break;
      parts.push(piece.content);
      const next = Number(piece.nextOffset ?? offset);
      if (next <= offset || (typeof piece.size === "number" && next >= piece.size)) break;
      offset = next;
    }
  } catch (error) { showError($("#job-error"), error); return; }
  const link = el("a", { href: URL.createObjectURL(new Blob(parts, { type: "text/plain" })), download: logFileName(name, role, index, file) });
  document.body.append(link);
  link.click();
  link.remove();
}

async function refresh() {
  try {
    page.detail = await api(page.chosenAttempt === null ? base : `${base}/attempts/${page.chosenAttempt}`);
  } catch (error) {
    showError($("#job-error"), error);
    return;
  }
  fill($("#job-error"));
  performance.mark("job-fetched");
  show();
  performance.mark("job-shown");
  requestAnimationFrame(() => setTimeout(() => performance.mark("job-painted"), 0));
}

// The ssh plugin's connection for each running task: its address and the port named ssh.
function showSsh() {
  const box = $("#ssh");
  if (!page.ssh || !page.detail) { box.classList.add("hidden"); return; }
  const lines = [];
  for (const [role, status] of Object.entries(page.detail.taskRoles || {})) {
    for (const t of (status.taskStatuses || [])) {
      const port = t.containerPorts && t.containerPorts.ssh;
      if (t.taskState === "RUNNING" && t.containerIp && port) lines.push(`${role}[${t.taskIndex}]: ssh -p ${port} root@${t.containerIp}`);
    }
  }
  fill($("#ssh-lines"), lines.length ? el("pre", { class: "config", tabindex: "0" }, lines.slice(0, 50).join("\n") + (lines.length > 50 ? `\n… ${lines.length - 50} more` : "")) :
    el("p", { class: "muted" }, "No task runs now: connections show here while tasks run."));
  box.classList.remove("hidden");
}

// The terminal: offered while a task of the latest attempt runs; an open one stays until closed.
function showShell() {
  const running = [];
  if (page.chosenAttempt === null) {
    for (const [role, status] of Object.entries(page.detail.taskRoles || {})) {
      for (const t of (status.taskStatuses || [])) if (t.taskState === "RUNNING") running.push(`${role}/${t.taskIndex}`);
    }
  }
  const select = $("#shell-task");
  const current = select.value;
  const shown = [...select.options].map((o) => o.value).join(",");
  if (shown !== running.join(",")) {
    fill(select, running.slice(0, 500).map((key) => { const [role, index] = key.split("/"); return el("option", { value: key }, `${role}[${index}]`); }));
    if (running.includes(current)) select.value = current;
  }
  $("#shell-open").disabled = running.length === 0 || page.closeTerminal !== null;
  $("#shell").classList.toggle("hidden", running.length === 0 && page.closeTerminal === null);
}

async function startShell() {
  const value = $("#shell-task").value;
  if (!value || page.closeTerminal) return;
  const [role, index] = value.split("/");
  const say = (/** @type {string} */ text) => { $("#shell-state").textContent = text; };
  $("#shell-open").disabled = true;
  try {
    const { csrf } = await session();
    page.closeTerminal = await openTerminal($("#terminal"), { job: `${user}~${name}`, role, index, csrf, say });
    $("#shell-close").classList.remove("hidden");
  } catch (error) {
    say(error.message || String(error));
  }
  showShell();
}

function closeShell() {
  if (page.closeTerminal) page.closeTerminal();
  page.closeTerminal = null;
  $("#shell-close").classList.add("hidden");
  $("#shell-state").textContent = "";
  showShell();
}

function show() {
  showSummary();
  showTasks();
  showSsh();
  showShell();
  followLog();
  document.body.dataset.state = page.detail.jobStatus.state;
}

// Each task's GPU and CPU use over time, from the monitors' history (kept for the last hours).
async function taskUse() {
  let answer;
  try { answer = await api(`${base}/metrics`); }
  catch (error) { showError($("#use-error"), error); return; }
  fill($("#use-error"));
  const key = (r) => `${r.role}[${r.index}]`;
  const submitted = page.detail && page.detail.jobStatus && page.detail.jobStatus.createdTime ? page.detail.jobStatus.createdTime / 1000 : undefined;
  const since = Math.max(submitted || 0, (answer.now || Date.now() / 1000) - answer.keep);
  fill($("#task-gpu"), historyChart(answer, "gpu", { title: "GPU use per task", sinceSeconds: since, key,
    empty: "no GPU use reported (the tasks hold no GPU the monitor can read)" }));
  const ended = page.detail && FINAL.has(page.detail.jobStatus.state);
  fill($("#task-cpu"), historyChart(answer, "cpu", { title: "CPU use per task (100% is one core)", sinceSeconds: since, key,
    empty: ended ? "no sample of its tasks (they ran between two samples, or before the history kept)" : "no samples yet" }));
  document.body.dataset.history = "true";
  if (page.detail && FINAL.has(page.detail.jobStatus.state) && page.useTimer) { clearInterval(page.useTimer); page.useTimer = null; }
}

// The cluster's GPUs, to tell a wait that can end from one that cannot.
async function learnCluster() {
  const vcs = await api("/virtual-clusters").catch(() => null);
  const any = vcs && Object.values(vcs)[0];
  if (any && any.cluster && typeof any.cluster.gpus === "number") {
    page.clusterGpus = any.cluster.gpus;
    if (page.detail) showSummary();
  }
}

// The config read by the API's own validator (the portal's /portal/validate): its retry budget,
// and its warnings (a field the platform will not act on, and the fix).
async function readConfig(text) {
  const answer = await portal("/portal/validate", text, "text/yaml").catch(() => null);
  if (!answer || !answer.config || typeof answer.config !== "object") return;
  page.config = answer.config;
  if (page.detail) showSummary();
  const warnings = Array.isArray(answer.warnings) ? answer.warnings : [];
  const box = $("#advice");
  fill(box, warnings.length ? [el("strong", {}, "This job asks for what the platform will not do:"),
    el("ul", {}, warnings.map((w) => el("li", { "data-path": w.path }, el("code", {}, w.path), `: ${w.message}`)))] : []);
  box.classList.toggle("hidden", warnings.length === 0);
}

async function start() {
  await refresh();
  learnCluster();
  showAttempts();
  api(`${base}/config`, { raw: true }).then((text) => {
    $("#config").textContent = text;
    page.ssh = /^\s*-?\s*plugin:\s*['"]?ssh['"]?\s*$/m.test(String(text));
    showSsh();
    readConfig(String(text));
  }).catch((e) => { $("#config").textContent = e.message; });
  $("#clone").after(saveAsTemplate($("#job-error"), () => api(`${base}/config`, { raw: true }), () => name));
  $("#close-tries").addEventListener("click", () => $("#tries").classList.add("hidden"));
  $("#attempt").addEventListener("change", (e) => { page.chosenAttempt = e.target.value === "" ? null : Number(e.target.value); refresh(); });
  $("#log-task").addEventListener("change", followLog);
  $("#log-file").addEventListener("change", followLog);
  $("#log-search").addEventListener("input", () => showLog());
  $("#shell-open").addEventListener("click", () => { startShell(); });
  $("#shell-close").addEventListener("click", closeShell);
  $("#log-download").addEventListener("click", () => { downloadLog(); });
  $("#roles").addEventListener("click", (e) => {
    const tries = e.target.dataset && e.target.dataset.tries;
    if (tries) { const [role, index] = tries.split("/"); showTries(role, index); return; }
    const key = e.target.dataset && e.target.dataset.log;
    if (!key) return;
    $("#log-task").value = key;
    followLog();
    $("#log").focus();
  });
  $("#stop").addEventListener("click", async () => {
    if (!confirm(`Stop job ${name}?`)) return;
    try { await api(`${base}/executionType`, { method: "PUT", body: { value: "STOP" } }); refresh(); }
    catch (error) { showError($("#job-error"), error); }
  });
  live({ job: `${user}~${name}` }, (change) => {
    // The portal sends the job's new state with the change; the latest attempt needs no fetch.
    if (change && change.detail && page.chosenAttempt === null) { page.detail = change.detail; show(); }
    else refresh();
    showAttempts();
  });
  taskUse();
  page.useTimer = setInterval(taskUse, 15000);
  document.body.dataset.ready = "true";
}

start();
