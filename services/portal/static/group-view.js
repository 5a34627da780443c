// @ts-check
// Groups (admin): their rights (admin, virtual clusters) and members; add, edit and delete
// groups, add users to a group and remove them. As in OpenPAI, a user joins or leaves a group
// through the user's grouplist (PUT and DELETE /users/{user}/group).
import { $, api, el, fill, showError } from "./common.js";
import { clearFieldErrors, showFieldError } from "./field-errors.js";

const nameOf = (m) => (typeof m === "string" ? m : m.username);

async function refresh() {
  const groups = await api("/groups");
  const rows = await Promise.all(groups.map(async (g) => {
    const members = await api(`/groups/${encodeURIComponent(g.groupname)}/userlist`).catch(() => []);
    if (state.members && state.members.groupname === g.groupname) showMembers(g.groupname, members || []);
    const acls = (g.extension && g.extension.acls) || {};
    return el("tr", { "data-group": g.groupname },
      el("th", { scope: "row" }, g.groupname),
      el("td", {}, g.description || "–"),
      el("td", {}, acls.admin ? "yes" : "no"),
      el("td", {}, (acls.virtualClusters || []).join(", ") || "–"),
      el("td", { "data-members": "" }, (members || []).map(nameOf).join(", ") || "–"),
      el("td", { class: "row-actions" },
        el("button", { type: "button", class: "secondary", "data-members-of": g.groupname, "aria-label": `Members of ${g.groupname}`, onclick: () => openMembers(g.groupname) }, "Members"),
        el("button", { type: "button", class: "secondary", "data-edit": g.groupname, onclick: () => edit(g) }, "Edit"),
        el("button", { type: "button", class: "danger", onclick: () => remove(g.groupname) }, "Delete")));
  }));
  fill($("#groups"), rows);
  document.body.dataset.ready = "true";
}

// ---------------------------------------------------------------- members

// The group whose members the panel shows, and the users an admin may add (for suggestions).
async function openMembers(groupname) {
  state.members = { groupname, names: [] };
  $("#members-title").textContent = `Members of ${groupname}`;
  $("#members-status").textContent = "";
  clearFieldErrors($("#add-member"));
  $("#members-panel").classList.remove("hidden");
  const [members, users] = await Promise.all([
    api(`/groups/${encodeURIComponent(groupname)}/userlist`),
    api("/users").catch(() => []),
  ]);
  state.users = users.map((u) => u.username);
  showMembers(groupname, members);
  $("#m-user").focus();
}

function showMembers(groupname, members) {
  const names = members.map(nameOf);
  state.members = { groupname, names };
  fill($("#member-list"), names.length ? members.map((m) => el("li", { "data-member": nameOf(m) },
    el("span", {}, nameOf(m), m.clusterAdmin ? " (administrator)" : ""), " ",
    el("button", { type: "button", class: "secondary", "aria-label": `Remove ${nameOf(m)} from ${groupname}`,
      onclick: () => removeMember(groupname, nameOf(m)) }, "Remove"))) : [el("li", { class: "muted" }, "Nobody is in this group.")]);
  fill($("#all-users"), (state.users || []).filter((u) => !names.includes(u)).map((u) => el("option", { value: u })));
}

async function changeMembers(work, said) {
  try {
    await work();
    $("#members-status").textContent = said;
    fill($("#group-error"));
    await refresh();
  } catch (error) {
    showError($("#group-error"), error);
  }
}

function removeMember(groupname, username) {
  if (!confirm(`Remove ${username} from group ${groupname}? They lose what the group grants.`)) return;
  changeMembers(() => api(`/users/${encodeURIComponent(username)}/group`, { method: "DELETE", body: { groupname } }),
    `${username} removed from ${groupname}.`);
}

$("#add-member").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = /** @type {HTMLFormElement} */ (e.target);
  clearFieldErrors(form);
  const username = $("#m-user").value.trim();
  const groupname = state.members && state.members.groupname;
  if (!groupname) return;
  if (!username) { showFieldError(form, "username", "Type the name of a user to add."); return; }
  if (state.members.names.includes(username)) { showFieldError(form, "username", `${username} is in ${groupname} already.`); return; }
  try {
    await api(`/users/${encodeURIComponent(username)}/group`, { method: "PUT", body: { groupname } });
  } catch (error) {
    if (error.code === "NoUserError") showFieldError(form, "username", `There is no user ${username}; pick one of the users listed.`);
    else showError($("#group-error"), error);
    return;
  }
  form.reset();
  await changeMembers(async () => {}, `${username} added to ${groupname}.`);
});

$("#members-close").addEventListener("click", () => {
  state.members = null;
  $("#members-panel").classList.add("hidden");
});

async function act(work) {
  try { await work(); fill($("#group-error")); await refresh(); } catch (error) { showError($("#group-error"), error); }
}

// Editing fills the edit form with the group; saving sends only what the form holds (a patch).
// What the page holds, in one place: the group being edited, if any.
const state = {
  /** @type {any} */
  editing: null,
  /** @type {{groupname: string, names: string[]} | null} the group whose members are shown */
  members: null,
  /** @type {string[]} every user's name, suggested when adding one */
  users: [],
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
