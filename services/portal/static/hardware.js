// @ts-check
// Hardware (admin): every node with its CPU, memory and GPU, and what the running tasks take.
import { $, api, barChart, el, fill, historyChart, live, showError, spanTitle } from "./common.js";

const HOURS = 6;

function quantity(value) {
  const text = String(value ?? "0");
  const m = /^(\d+(?:\.\d+)?)(m|Ki|Mi|Gi)?$/.exec(text);
  if (!m) return Number(text) || 0;
  const n = Number(m[1]);
  return { m: n / 1000, Ki: n / 1024, Mi: n, Gi: n * 1024 }[m[2]] ?? n;
}

async function refresh() {
  let nodes, pods;
  try { [nodes, pods] = await Promise.all([api("/kubernetes/nodes"), api("/kubernetes/pods")]); }
  catch (error) { showError($("#hw-error"), error); return; }
  const use = {};
  for (const pod of pods.items || []) {
    const node = pod.spec && pod.spec.nodeName;
    if (!node) continue;
    const u = (use[node] = use[node] || { cpu: 0, memory: 0, gpu: 0, tasks: 0 });
    u.tasks += 1;
    for (const c of (pod.spec.containers || [])) {
      const req = (c.resources && (c.resources.requests || c.resources.limits)) || {};
      u.cpu += quantity(req.cpu);
      u.memory += quantity(req.memory);
      u.gpu += quantity(req["nvidia.com/gpu"]);
    }
  }
  const rows = (nodes.items || []).map((n) => {
    const name = n.metadata.name;
    const cap = n.status.capacity || {};
    const ready = (n.status.conditions || []).find((c) => c.type === "Ready");
    const addr = ((n.status.addresses || [])[0] || {}).address || "–";
    return { name, ready: ready ? ready.status === "True" : false, addr, cpu: quantity(cap.cpu), memory: Math.round(quantity(cap.memory)),
      gpu: quantity(cap["nvidia.com/gpu"]), use: use[name] || { cpu: 0, memory: 0, gpu: 0, tasks: 0 } };
  });
  fill($("#gpu-chart"), barChart(rows.map((r) => ({ label: r.name, value: r.use.gpu, max: r.gpu })), { title: "GPUs in use per node", unit: " GPU" }));
  fill($("#cpu-chart"), barChart(rows.map((r) => ({ label: r.name, value: Math.round(r.use.cpu * 10) / 10, max: r.cpu })), { title: "CPU cores allocated per node", unit: " cores" }));
  fill($("#nodes"), rows.map((r) => el("tr", { "data-node": r.name, class: r.name === chosen ? "chosen" : null },
    el("th", { scope: "row" }, el("a", { href: "?" + new URLSearchParams({ node: r.name }) }, r.name)),
    el("td", { class: r.ready ? "ok" : "bad" }, r.ready ? "ready" : "not ready"),
    el("td", {}, r.addr),
    el("td", { class: "num" }, `${Math.round(r.use.cpu * 10) / 10} / ${r.cpu}`),
    el("td", { class: "num" }, `${Math.round(r.use.memory)} / ${r.memory} MB`),
    el("td", { class: "num" }, `${r.use.gpu} / ${r.gpu}`),
    el("td", { class: "num" }, String(r.use.tasks)))));
  showNode(rows.find((r) => r.name === chosen), (pods.items || []).filter((pod) => pod.spec && pod.spec.nodeName === chosen));
  document.body.dataset.ready = "true";
}

// One node's page (?node=NAME): what it has, and every task it runs with its job.
const chosen = new URLSearchParams(location.search).get("node");

function showNode(row, pods) {
  const box = $("#node-detail");
  if (!chosen) { box.classList.add("hidden"); return; }
  box.classList.remove("hidden");
  $("#node-title").textContent = `Node ${chosen}`;
  if (!row) { fill($("#node-body"), el("p", { class: "bad" }, `No node ${chosen} is known now.`)); return; }
  const link = (labels) => {
    const q = new URLSearchParams({ username: labels.userName || "", jobName: labels.jobName || "" });
    return el("a", { href: "/job-detail.html?" + q }, `${labels.userName}~${labels.jobName}`);
  };
  fill($("#node-body"),
    el("dl", { class: "kv" },
      el("dt", {}, "State"), el("dd", { class: row.ready ? "ok" : "bad" }, row.ready ? "ready" : "not ready"),
      el("dt", {}, "Address"), el("dd", {}, row.addr),
      el("dt", {}, "CPU allocated"), el("dd", {}, `${Math.round(row.use.cpu * 10) / 10} of ${row.cpu} cores`),
      el("dt", {}, "Memory allocated"), el("dd", {}, `${Math.round(row.use.memory)} of ${row.memory} MB`),
      el("dt", {}, "GPUs in use"), el("dd", {}, `${row.use.gpu} of ${row.gpu}`)),
    pods.length === 0 ? el("p", { class: "muted" }, "No task runs on this node now.") :
      el("div", { class: "table-wrap" }, el("table", { "aria-label": `Tasks on ${chosen}` },
        el("thead", {}, el("tr", {}, ["Job", "Task", "Virtual cluster", "State", "Since"].map((h) => el("th", { scope: "col" }, h)))),
        el("tbody", {}, pods.map((pod) => {
          const labels = pod.metadata.labels || {};
          return el("tr", { "data-pod": pod.metadata.name },
            el("td", {}, link(labels)), el("td", {}, `${labels.FC_TASKROLE_NAME}[${labels.FC_TASK_INDEX}]`),
            el("td", {}, labels.virtualCluster || "–"), el("td", {}, (pod.status || {}).phase || "–"),
            el("td", {}, (pod.status || {}).startTime || "–"));
        })))));
}

// GPU, CPU and memory use per node over the last hours, from the monitors' history.
async function history() {
  const since = Math.floor(Date.now() / 1000) - HOURS * 3600;
  let answer;
  try { answer = await api("/cluster/metrics?" + new URLSearchParams({ since: String(since) })); }
  catch (error) { showError($("#use-error"), error); return; }
  fill($("#use-error"));
  if (chosen) answer = { ...answer, nodes: (answer.nodes || []).filter((r) => r.node === chosen) };
  const key = (r) => r.node;
  $("#use-title").textContent = spanTitle("Use", answer.nodes.map((r) => r.points), HOURS);
  fill($("#gpu-history"), historyChart(answer, "gpu", { title: "GPU utilisation per node (mean of its GPUs)", sinceSeconds: since, key,
    empty: "no GPU utilisation reported (no node has a GPU the monitor can read)" }));
  fill($("#cpu-history"), historyChart(answer, "cpu", { title: "CPU use per node", sinceSeconds: since, key }));
  fill($("#memory-history"), historyChart(answer, "memory", { title: "Memory use per node", sinceSeconds: since, key }));
  document.body.dataset.history = "true";
}

refresh();
history();
live({}, refresh);
setInterval(history, 30000);
