// @ts-check
// Virtual clusters: guaranteed and used GPUs, CPU and memory, running and waiting jobs; updated live.
import { $, api, bar, barChart, el, fill, live, showError } from "./common.js";

// A VC's CPU and memory: what the scheduler guarantees it, or, where it guarantees none (a
// platform without GPUs, whose VCs are cells of GPUs), what its nodes have.
/** @param {any} vc */
export function vcResources(vc) {
  const nodes = Array.isArray(vc.nodes) ? vc.nodes : [];
  const sum = (/** @type {(n: any) => number} */ f) => nodes.reduce((total, n) => total + (Number(f(n)) || 0), 0);
  const guaranteed = vc.resourcesGuaranteed || {};
  const used = vc.resourcesUsed || {};
  const byNodes = !guaranteed.cpu && nodes.length > 0;
  return {
    byNodes,
    cpu: byNodes ? sum((n) => n.cpu) : guaranteed.cpu || 0,
    usedCpu: byNodes ? sum((n) => n.usedCpu ?? (n.used || {}).cpu) : used.cpu || 0,
    memory: byNodes ? sum((n) => n.memoryMb) : guaranteed.memory || 0,
    usedMemory: byNodes ? sum((n) => n.usedMemoryMb ?? (n.used || {}).memoryMb) : used.memory || 0,
  };
}

const round = (/** @type {number} */ n) => String(Math.round(n * 10) / 10);

async function refresh() {
  let vcs;
  try { vcs = await api("/virtual-clusters"); } catch (error) { showError($("#vc-error"), error); return; }
  fill($("#vc-error"));
  const entries = Object.entries(vcs).sort(([a], [b]) => a.localeCompare(b));
  const gpus = entries.some(([, vc]) => vc.resourcesGuaranteed.GPUs || (vc.cluster && vc.cluster.gpus));
  $("#chart-title").textContent = gpus ? "GPUs used of guaranteed" : "CPU cores used of the virtual cluster's";
  fill($("#chart"), gpus ?
    barChart(entries.map(([name, vc]) => ({ label: name, value: vc.resourcesUsed.GPUs, max: vc.resourcesGuaranteed.GPUs })),
      { title: "GPUs used of guaranteed, per virtual cluster", unit: " GPU" }) :
    barChart(entries.map(([name, vc]) => { const r = vcResources(vc); return { label: name, value: r.usedCpu, max: r.cpu }; }),
      { title: "CPU cores used, per virtual cluster (no GPU in this cluster)", unit: " CPU" }));
  fill($("#vcs"), entries.map(([name, vc]) => {
    const r = vcResources(vc);
    const of = r.byNodes ? " (its nodes)" : "";
    return el("tr", { "data-vc": name },
      el("th", { scope: "row" }, name),
      el("td", { class: "num" }, String(vc.resourcesGuaranteed.GPUs)),
      el("td", { class: "num" }, String(vc.resourcesUsed.GPUs)),
      el("td", {}, bar(vc.resourcesUsed.GPUs, vc.resourcesGuaranteed.GPUs, `${vc.usedCapacity}% of the cluster's GPUs`)),
      el("td", { class: "num", "data-cpu": `${r.usedCpu}/${r.cpu}` }, `${round(r.usedCpu)} / ${round(r.cpu)}${of}`),
      el("td", { class: "num", "data-memory": `${r.usedMemory}/${r.memory}` }, `${Math.round(r.usedMemory)} / ${Math.round(r.memory)}${of}`),
      el("td", { class: "num" }, String(vc.runningJobs ?? 0)),
      el("td", { class: "num" }, String(vc.waitingJobs ?? 0)),
      el("td", {}, (vc.nodeList || []).join(", ") || "–"));
  }));
  document.body.dataset.ready = "true";
}

// Admins: the scheduler's HiveD config, starting from the one in force (GET
// /api/v2/virtual-clusters/config: its cell types, every VC's cells and quotas, user limits) and
// applied through PUT /api/v2/virtual-clusters/config, whose checks (the scheduler's) answer here:
// what is wrong, or which running jobs a change would harm.
/** @param {any} answer */
export function configText(answer) {
  const cells = answer.cells === "nodes" ? "derived from the nodes" : "given by the config";
  const notes = (answer.notes || []).map((/** @type {string} */ n) => `# note: ${n}\n`).join("");
  return `# The scheduler config in force; its cells are ${cells}.\n${notes}${answer.yaml || ""}`;
}

async function loadConfig() {
  try {
    $("#vc-config").value = configText(await api("/virtual-clusters/config"));
  } catch (error) { showError($("#vc-config-answer"), error); }
}

/** @param {any} answer */
function harmed(answer) {
  const jobs = [...Object.keys(answer.killed || {}), ...Object.keys(answer.downgraded || {})];
  return jobs.length ? el("p", {}, `Running jobs it ${answer.code ? "would harm" : "harmed"}: ${jobs.join(", ")}.`) : null;
}

async function adminEditor() {
  if (document.body.dataset.role !== "admin") return;
  $("#vc-admin").classList.remove("hidden");
  if (!$("#vc-config").value) await loadConfig();
  $("#vc-config-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const force = /** @type {HTMLInputElement} */ ($("#vc-force")).checked;
    if (force && !confirm("Force the change: running jobs it harms are stopped or downgraded. Go on?")) return;
    const out = $("#vc-config-answer");
    try {
      const answer = await api("/virtual-clusters/config" + (force ? "?force=true" : ""), { method: "PUT", body: $("#vc-config").value, type: "text/yaml" });
      fill(out, el("p", { class: "ok" }, answer.message), harmed(answer));
      refresh();
      loadConfig();
    } catch (error) {
      fill(out, el("p", { class: "bad" }, `Not applied: ${error.message}`), harmed(error.body || {}));
    }
  });
}

refresh();
adminEditor();
live({}, refresh);
