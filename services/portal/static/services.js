// @ts-check
// Platform services (admin): up or down, from the monitor's heartbeat alerts and the API's answers.
import { $, api, el, fill, market, showError } from "./common.js";

// Every service of the platform (pai up's and the images'), each shown once.
const SERVICES = ["rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace", "portal"];

// true: it answered; false: it did not; null: this platform does not run it (REST has no route to it).
async function probe(ask) {
  try { await ask(); return true; } catch (error) {
    if (error.status === 404) return null;
    return Boolean(error.status && error.status < 500 && error.status !== 503);
  }
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
  const [scheduler, events, marketplace] = await Promise.all([
    probe(() => api("/virtual-clusters")),
    // The events gateway answers its webhooks through REST; without one REST answers 404.
    probe(() => api("/webhooks")),
    probe(() => market("/items?limit=1")),
  ]);
  const checks = { rest: true, portal: true, scheduler, alerter: alerterUp, events, marketplace };
  fill($("#services"), SERVICES.map((name) => {
    const known = name in checks ? checks[name] : undefined;
    if (known === null) {
      return el("div", { class: "card", "data-service": name, "data-up": "absent" },
        el("div", { class: "n muted" }, "Not run"), el("div", {}, el("strong", {}, name)),
        el("div", { class: "l" }, "this platform does not run it"));
    }
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
