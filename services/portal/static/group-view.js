// @ts-check
// Groups (admin): their rights (admin, virtual clusters) and members; add, edit and delete.
import { $, api, el, fill, showError } from "./common.js";

async function refresh() {
  const groups = await api("/groups");
  const rows = await Promise.all(groups.map(async (g) => {
    const members = await api(`/groups/${encodeURIComponent(g.groupname)}/userlist`).catch(() => []);
    const acls = (g.extension && g.extension.acls) || {};
    return el("tr", { "data-group": g.groupname },
      el("th", { scope: "row" }, g.groupname),
      el("td", {}, g.description || "–"),
      el("td", {}, acls.admin ? "yes" : "no"),
      el("td", {}, (acls.virtualClusters || []).join(", ") || "–"),
      el("td", {}, (members || []).map((m) => (typeof m === "string" ? m : m.username)).join(", ") || "–"),
      el("td", {},
        el("button", { type: "button", class: "secondary", "data-edit": g.groupname, onclick: () => edit(g) }, "Edit"), " ",
        el("button", { type: "button", class: "danger", onclick: () => remove(g.groupname) }, "Delete")));
  }));
  fill($("#groups"), rows);
  document.body.dataset.ready = "true";
}

async function act(work) {
  try { await work(); fill($("#group-error")); await refresh(); } catch (error) { showError($("#group-error"), error); }
}

// Editing fills the edit form with the group; saving sends only what the form holds (a patch).
// What the page holds, in one place: the group being edited, if any.
const state = {
  /** @type {any} */
  editing: null,
};
function edit(group) {
  state.editing = group;
  const f = $("#edit-group").elements;
  const acls = (group.extension && group.extension.acls) || {};
  f.groupname.value = group.groupname;
  f.description.value = group.description || "";
  f.externalName.value = group.externalName || "";
  f.vcs.value = (acls.virtualClusters || []).join(", ");
  f.admin.checked = Boolean(acls.admin);
  $("#edit-title").textContent = `Edit group ${group.groupname}`;
  $("#edit-panel").classList.remove("hidden");
  f.description.focus();
}

$("#edit-group").addEventListener("submit", (e) => {
  e.preventDefault();
  const f = e.target.elements;
  const extension = (state.editing && state.editing.extension) || {};
  act(async () => {
    await api("/groups", { method: "PUT", body: { patch: true, data: { groupname: f.groupname.value, description: f.description.value,
      externalName: f.externalName.value,
      // Other extension keys and acls stay as they were.
      extension: { ...extension, acls: { ...(extension.acls || {}), admin: f.admin.checked,
        virtualClusters: f.vcs.value.split(",").map((s) => s.trim()).filter(Boolean) } } } } });
    $("#edit-panel").classList.add("hidden");
  });
});

$("#edit-cancel").addEventListener("click", () => $("#edit-panel").classList.add("hidden"));

function remove(name) {
  if (!confirm(`Delete group ${name}?`)) return;
  act(() => api(`/groups/${encodeURIComponent(name)}`, { method: "DELETE" }));
}

$("#add-group").addEventListener("submit", (e) => {
  e.preventDefault();
  const f = e.target.elements;
  act(async () => {
    await api("/groups", { method: "POST", body: { groupname: f.groupname.value.trim(), description: f.description.value,
      extension: { acls: { admin: f.admin.checked, virtualClusters: f.vcs.value.split(",").map((s) => s.trim()).filter(Boolean) } } } });
    e.target.reset();
  });
});

refresh().catch((error) => showError($("#group-error"), error));
