// @ts-check
// The administrators' review queue: public items waiting for approval, approved or rejected
// (with a reason the author sees) in place.
import { $, el, fill, market, showError } from "./common.js";
import { itemLink } from "./market-share.js";

function row(item) {
  const reasonId = `reason-${item.id}`;
  const status = el("span", { class: "muted", role: "status" });
  const decide = (body, button) => async () => {
    if (body.status === "rejected" && !body.statusReason) {
      status.textContent = "Give a reason to reject.";
      $(`#${CSS.escape(reasonId)}`).focus();
      return;
    }
    button.disabled = true;
    try {
      await market(`/items/${encodeURIComponent(item.id)}`, { method: "PUT", body });
      await load();
    } catch (error) {
      status.textContent = error.message;
      button.disabled = false;
    }
  };
  const approve = el("button", { type: "button", "data-approve": item.id }, "Approve");
  const reject = el("button", { type: "button", class: "danger", "data-reject": item.id }, "Reject");
  const reason = el("input", { type: "text", id: reasonId, placeholder: "reason for rejecting" });
  approve.addEventListener("click", decide({ status: "approved" }, approve));
  reject.addEventListener("click", () => decide({ status: "rejected", statusReason: reason.value.trim() }, reject)());
  return el("tr", { "data-item": item.id },
    el("td", {}, el("a", { href: itemLink(item) }, item.name)),
    el("td", {}, item.type),
    el("td", {}, item.author),
    el("td", {}, item.summary || "–"),
    el("td", {}, item.updatedAt ? new Date(item.updatedAt).toLocaleString() : "–"),
    el("td", { class: "decision" },
      el("label", { for: reasonId, class: "visually-hidden" }, `Reason for rejecting ${item.name}`),
      reason, " ", approve, " ", reject, " ", status));
}

async function load() {
  try {
    const items = await market("/items?" + new URLSearchParams({ status: "pending", limit: "200" }));
    fill($("#rows"), items.length ? items.map(row) : el("tr", {}, el("td", { colspan: "6", class: "muted" }, "Nothing waits for review.")));
    $("#count").textContent = `${items.length} item${items.length === 1 ? "" : "s"} waiting`;
    fill($("#review-error"));
  } catch (error) {
    showError($("#review-error"), error);
  }
}

load().finally(() => { document.body.dataset.ready = "true"; });
