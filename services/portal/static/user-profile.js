// @ts-check
// Profile: e-mail, password, groups, storages, application tokens (create, copy once, revoke).
import { $, api, el, fill, fmtTime, showError } from "./common.js";

function claims(token) {
  try { return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))); } catch { return {}; }
}

async function refresh() {
  const me = await api("/users/me");
  fill($("#me"), el("dt", {}, "User"), el("dd", {}, me.username), el("dt", {}, "Administrator"), el("dd", {}, me.admin ? "yes" : "no"),
    el("dt", {}, "Groups"), el("dd", {}, me.grouplist.join(", ") || "–"),
    el("dt", {}, "Virtual clusters"), el("dd", {}, me.virtualCluster.join(", ") || "–"));
  if (document.activeElement !== $("#email")) $("#email").value = me.email || "";
  const storages = await api("/storages").catch(() => ({ storages: [] }));
  const list = Array.isArray(storages) ? storages : storages.storages || [];
  fill($("#storages"), list.length ? list.map((s) => el("li", {}, s.name || String(s))) : [el("li", { class: "muted" }, "No storage is granted to you.")]);
  const { tokens } = await api("/tokens");
  fill($("#tokens"), tokens.map((t) => {
    const c = claims(t);
    return el("tr", {}, el("td", {}, el("code", {}, `${t.slice(0, 12)}…${t.slice(-6)}`)),
      el("td", {}, c.application ? "application" : "sign-in"),
      el("td", {}, c.exp ? fmtTime(c.exp * 1000) : "never"),
      el("td", {}, el("button", { type: "button", class: "danger", onclick: () => revoke(t) }, "Revoke")));
  }));
  document.body.dataset.ready = "true";
}

async function act(work) {
  try { await work(); fill($("#profile-error")); await refresh(); } catch (error) { showError($("#profile-error"), error); }
}

function revoke(token) {
  if (!confirm("Revoke this token? Scripts using it stop working; revoking the one of this sign-in signs you out.")) return;
  act(() => api(`/tokens/${encodeURIComponent(token)}`, { method: "DELETE" }));
}

$("#email-form").addEventListener("submit", (e) => {
  e.preventDefault();
  act(() => api("/users/me", { method: "PUT", body: { data: { email: $("#email").value.trim() }, patch: true } }));
});
// OpenPAI's own route: PUT /api/v2/users/me with the old password. The platform then ends every
// other sign-in and token of the user; this one stays.
$("#password-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const status = $("#password-status");
  const oldPassword = $("#old-password").value;
  const newPassword = $("#new-password").value;
  status.className = "";
  if (newPassword !== $("#new-password-again").value) {
    status.className = "error";
    status.textContent = "The two new passwords differ; type the same one twice.";
    return;
  }
  try {
    await api("/users/me", { method: "PUT", body: { data: { oldPassword, newPassword }, patch: true } });
    status.className = "ok";
    status.textContent = "Your password is changed. Your other sign-ins and tokens have ended; this one stays.";
    /** @type {HTMLFormElement} */ (e.target).reset();
    refresh().catch(() => {});
  } catch (error) {
    status.className = "error";
    status.textContent = error.code === "IncorrectPasswordError" ?
      "The current password is not right; the password is unchanged." : `The password is unchanged: ${error.message}`;
  }
});
$("#new-token").addEventListener("click", () => act(async () => {
  const { token } = await api("/tokens/application", { method: "POST" });
  $("#token-text").textContent = token;
  $("#new-token-value").classList.remove("hidden");
}));
$("#copy-token").addEventListener("click", () => navigator.clipboard.writeText($("#token-text").textContent));

refresh().catch((error) => showError($("#profile-error"), error));
