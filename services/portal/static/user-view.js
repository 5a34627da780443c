// @ts-check
// Users (admin): add, search, edit admin right and VCs one by one or for the selected users,
// delete, batch add from CSV. An error about one field of the new user is shown at that field.
import { $, api, el, fill, showError } from "./common.js";
import { clearFieldErrors, showApiFieldError } from "./field-errors.js";

const list = (text) => text.split(/[;,]/).map((s) => s.trim()).filter(Boolean);
// the users ticked for a change made to all of them at once (kept across a refresh)
const picked = new Set();

async function refresh() {
  const users = await api("/users");
  fill($("#users"), users.map((u) => {
    const vcs = el("input", { type: "text", value: u.virtualCluster.join(", "), "aria-label": `Virtual clusters of ${u.username}` });
    const admin = el("input", { type: "checkbox", checked: u.admin, "aria-label": `${u.username} is an administrator` });
    const words = [u.username, u.email || "", ...u.virtualCluster, ...u.grouplist].join(" ").toLowerCase();
    return el("tr", { "data-user": u.username, "data-words": words },
      el("td", {}, el("input", { type: "checkbox", class: "pick", value: u.username, checked: picked.has(u.username), "aria-label": `Select ${u.username}` })),
      el("th", { scope: "row" }, u.username),
      el("td", {}, u.email || "–"),
      el("td", {}, admin),
      el("td", {}, vcs),
      el("td", {}, u.grouplist.join(", ")),
      el("td", { class: "actions" },
        el("button", { type: "button", class: "secondary", onclick: () => save(u.username, admin.checked, list(vcs.value)) }, "Save"),
        el("button", { type: "button", class: "danger", onclick: () => remove(u.username) }, "Delete")));
  }));
  search();
  document.body.dataset.ready = "true";
}

// Rows whose name, e-mail, VCs or groups hold every word typed.
function search() {
  const words = $("#user-search").value.toLowerCase().split(/\s+/).filter(Boolean);
  let shown = 0;
  const rows = /** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll("#users tr[data-user]"));
  for (const row of rows) {
    const hit = words.every((w) => (row.dataset.words || "").includes(w));
    row.classList.toggle("hidden", !hit);
    if (hit) shown += 1;
  }
  $("#user-count").textContent = words.length ? `${shown} of ${rows.length} users` : `${rows.length} users`;
}

$("#user-search").addEventListener("input", search);

function showPicked() {
  $("#batch-count").textContent = picked.size ? `${picked.size} selected` : "none selected";
  for (const button of document.querySelectorAll("#batch button")) /** @type {HTMLButtonElement} */ (button).disabled = picked.size === 0;
}

$("#users").addEventListener("change", (e) => {
  const box = /** @type {HTMLInputElement} */ (e.target);
  if (!box.classList.contains("pick")) return;
  if (box.checked) picked.add(box.value); else picked.delete(box.value);
  showPicked();
});

// One change for every selected user: each is its own PUT; what failed is named.
async function batch(data, done) {
  const names = [...picked];
  const results = await Promise.allSettled(names.map((username) =>
    api("/users", { method: "PUT", body: { data: { username, ...data }, patch: true } })));
  const failed = names.filter((_, i) => results[i].status === "rejected");
  $("#batch-status").textContent = failed.length ? `Not changed: ${failed.join(", ")}.` : `${done} for ${names.join(", ")}.`;
  await refresh().catch((error) => showError($("#user-error"), error));
}

$("#batch-vcs").addEventListener("click", () => {
  const vcs = list($("#batch-vc-list").value);
  batch({ virtualCluster: vcs }, `Virtual clusters set to ${vcs.join(", ") || "none"}`);
});
$("#batch-admin").addEventListener("click", () => batch({ admin: true }, "Made administrators"));
$("#batch-user").addEventListener("click", () => batch({ admin: false }, "Made normal users"));
showPicked();

async function act(work) {
  try { await work(); fill($("#user-error")); await refresh(); } catch (error) { showError($("#user-error"), error); }
}

function save(username, admin, virtualCluster) {
  return act(() => api("/users", { method: "PUT", body: { data: { username, admin, virtualCluster }, patch: true } }));
}

function remove(username) {
  if (!confirm(`Delete user ${username}?`)) return;
  act(() => api(`/users/${encodeURIComponent(username)}`, { method: "DELETE" }));
}

$("#add-user").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = /** @type {HTMLFormElement} */ (e.target);
  const f = /** @type {any} */ (form.elements);
  const username = f.username.value.trim();
  // Left blank, the VC field means what its placeholder says: the default VC.
  const virtualCluster = list(f.vcs.value).length ? list(f.vcs.value) : ["default"];
  $("#add-status").textContent = "";
  clearFieldErrors(form);
  try {
    await api("/users", { method: "POST", body: { username, password: f.password.value,
      email: f.email.value.trim(), admin: f.admin.checked, virtualCluster } });
  } catch (error) {
    // The API's virtualCluster is the form's vcs field.
    if (!showApiFieldError(form, error, { virtualCluster: "vcs" })) showError($("#user-error"), error);
    return;
  }
  form.reset();
  fill($("#user-error"));
  $("#add-status").textContent = `User ${username} added, with virtual clusters ${virtualCluster.join(", ")}.`;
  await refresh().catch((error) => showError($("#user-error"), error));
});

$("#csv-file").addEventListener("change", async (e) => {
  const file = e.target.files[0];
  if (!file) return;
  const [header, ...lines] = (await file.text()).split(/\r?\n/).filter((l) => l.trim());
  const names = header.split(",").map((h) => h.trim());
  const results = [];
  for (const line of lines) {
    const cells = Object.fromEntries(line.split(",").map((c, i) => [names[i], c.trim()]));
    try {
      await api("/users", { method: "POST", body: { username: cells.username, password: cells.password, email: cells.email || "",
        admin: /^(true|yes|1)$/i.test(cells.admin || ""), virtualCluster: list(cells.virtualCluster || "") } });
      results.push(el("li", { class: "ok" }, `${cells.username}: added`));
    } catch (error) {
      results.push(el("li", { class: "bad" }, `${cells.username || line}: ${error.message}`));
    }
  }
  fill($("#csv-result"), results);
  refresh();
});

refresh().catch((error) => showError($("#user-error"), error));
