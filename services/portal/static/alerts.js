// Alerts (admin): what fires now, with its rule's labels and summary.
import { $, api, el, fill, fmtTime, showError } from "./common.js";

async function refresh() {
  let alerts;
  try { alerts = await api("/alerts"); } catch (error) { showError($("#alert-error"), error); return; }
  fill($("#alert-error"));
  fill($("#firing"), (alerts || []).length === 0 ? el("p", { class: "muted" }, "No alert fires now.") :
    el("table", { "aria-label": "Firing alerts" },
      el("thead", {}, el("tr", {}, ["Alert", "Severity", "About", "Summary", "Since"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, alerts.map((a) => {
        const l = a.labels || {};
        const about = l.job_name || l.node_name || l.service || l.username || "–";
        return el("tr", {}, el("td", {}, l.alertname || "–"), el("td", {}, l.severity || "–"), el("td", {}, about),
          el("td", {}, (a.annotations || {}).summary || ""), el("td", {}, fmtTime(Date.parse(a.startsAt))));
      }))));
  document.body.dataset.ready = "true";
}

refresh();
setInterval(refresh, 10000);
