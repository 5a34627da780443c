// @ts-check
// Platform services (admin): up or down, from the monitor's heartbeat alerts and the API's answers.
import { $, api, el, fill, showError } from "./common.js";

const SERVICES = ["rest", "scheduler", "orchestrator", "monitor", "alerter", "portal"];

async function probe(path) {
  try { await api(path); return true; } catch (error) { return error.status && error.status < 500 && error.status !== 503; }
}

async function refresh() {
  let alerts = [];
  let alerterUp = true;
  try { alerts = await api("/alerts"); } catch (error) { alerterUp = false; showError($("#svc-error"), error); }
  const down = new Map();
  for (const a of alerts || []) {
    const labels = a.labels || {};
    if (labels.alertname === "PaiServiceDown" && labels.service) down.set(labels.service, (a.annotations || {}).summary || "no heartbeat");
  }
  const checks = { rest: true, portal: true, scheduler: await probe("/virtual-clusters"), alerter: alerterUp };
  fill($("#services"), SERVICES.map((name) => {
    const known = name in checks ? checks[name] : undefined;
    const up = !down.has(name) && known !== false;
    const why = down.get(name) || (known === false ? "the API could not reach it" : known ? "answering" : "heartbeats on time");
    return el("div", { class: "card", "data-service": name, "data-up": String(up) },
      el("div", { class: "n " + (up ? "ok" : "bad") }, up ? "Up" : "Down"),
      el("div", {}, el("strong", {}, name)), el("div", { class: "l" }, why));
  }));
  document.body.dataset.ready = "true";
}

refresh();
setInterval(refresh, 10000);
