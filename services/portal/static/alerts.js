// @ts-check
// Alerts (admin): what fires now, what resolved in the last hours, and the rules behind them.
import { $, api, el, fill, fmtTime, showError } from "./common.js";

const HOURS = 6;

function about(labels) {
  return labels.job_name || labels.node_name || labels.service || labels.username || "–";
}

function alertTable(label, alerts, last) {
  return el("div", { class: "table-wrap" }, el("table", { "aria-label": label },
    el("thead", {}, el("tr", {}, ["Alert", "Severity", "About", "Summary", "Since", ...(last ? [last] : [])].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, alerts.map((a) => {
      const l = a.labels || {};
      return el("tr", { "data-alert": l.alertname || "" }, el("td", {}, l.alertname || "–"), el("td", {}, l.severity || "–"), el("td", {}, about(l)),
        el("td", {}, (a.annotations || {}).summary || ""), el("td", {}, fmtTime(Date.parse(a.startsAt))),
        ...(last ? [el("td", {}, fmtTime(Date.parse(a.endsAt)))] : []));
    }))));
}

function wait(seconds) {
  if (!seconds) return "at once";
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

function ruleTable(rules) {
  return el("div", { class: "table-wrap" }, el("table", { "aria-label": "Alerting rules" },
    el("thead", {}, el("tr", {}, ["Rule", "Severity", "Condition", "For", "Summary"].map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rules.map((r) => el("tr", { "data-rule": r.alert },
      el("th", { scope: "row" }, r.alert),
      el("td", {}, (r.labels || {}).severity || "–"),
      el("td", {}, el("code", {}, r.expr)),
      el("td", { class: "num" }, wait(r.for)),
      el("td", {}, (r.annotations || {}).summary || ""))))));
}

async function refresh() {
  const since = Math.floor(Date.now() / 1000) - HOURS * 3600;
  let firing, recent, rules;
  try {
    [firing, recent, rules] = await Promise.all([
      api("/alerts"), api("/alerts/recent?" + new URLSearchParams({ since: String(since) })), api("/alerts/rules")]);
  } catch (error) { showError($("#alert-error"), error); return; }
  fill($("#alert-error"));
  fill($("#firing"), (firing || []).length === 0 ? el("p", { class: "muted" }, "No alert fires now.") : alertTable("Firing alerts", firing));
  fill($("#recent"), (recent || []).length === 0 ? el("p", { class: "muted" }, `No alert resolved in the last ${HOURS} hours.`) :
    alertTable("Resolved alerts", recent, "Resolved"));
  $("#rules-source").textContent = rules.source === "stored" ? "(set with pai alert-rules set)" : "(built in; pai alert-rules set replaces them)";
  fill($("#rules"), rules.rules.length === 0 ? el("p", { class: "muted" }, "No rule is configured.") : ruleTable(rules.rules));
  document.body.dataset.ready = "true";
}

refresh();
setInterval(refresh, 10000);
