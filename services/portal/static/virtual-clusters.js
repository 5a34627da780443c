// @ts-check
// Virtual clusters: guaranteed and used GPUs, running and waiting jobs; updated live.
import { $, api, bar, barChart, el, fill, live, showError } from "./common.js";

async function refresh() {
  let vcs;
  try { vcs = await api("/virtual-clusters"); } catch (error) { showError($("#vc-error"), error); return; }
  const entries = Object.entries(vcs).sort(([a], [b]) => a.localeCompare(b));
  fill($("#chart"), barChart(entries.map(([name, vc]) => ({ label: name, value: vc.resourcesUsed.GPUs, max: vc.resourcesGuaranteed.GPUs })),
    { title: "GPUs used of guaranteed, per virtual cluster", unit: " GPU" }));
  fill($("#vcs"), entries.map(([name, vc]) => el("tr", { "data-vc": name },
    el("th", { scope: "row" }, name),
    el("td", { class: "num" }, String(vc.resourcesGuaranteed.GPUs)),
    el("td", { class: "num" }, String(vc.resourcesUsed.GPUs)),
    el("td", {}, bar(vc.resourcesUsed.GPUs, vc.resourcesGuaranteed.GPUs, `${vc.usedCapacity}% of the cluster's GPUs`)),
    el("td", { class: "num" }, `${vc.resourcesUsed.cpu} / ${vc.resourcesGuaranteed.cpu}`),
    el("td", { class: "num" }, `${vc.resourcesUsed.memory} / ${vc.resourcesGuaranteed.memory}`),
    el("td", { class: "num" }, String(vc.runningJobs ?? 0)),
    el("td", { class: "num" }, String(vc.waitingJobs ?? 0)),
    el("td", {}, (vc.nodeList || []).join(", ") || "–"))));
  document.body.dataset.ready = "true";
}

refresh();
live({}, refresh);
