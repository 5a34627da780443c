// @ts-check
// Profile: e-mail, password, groups, storages, application tokens (named, with an expiry;
// created, copied once, revoked). An error about one field is shown at that field.
import { $, api, el, fill, fmtTime, showError } from "./common.js";
import { clearFieldErrors, showApiFieldError, showFieldError } from "./field-errors.js";

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
  const listed = await api("/tokens");
  // `details` names each token and says when it expires; an older API lists the texts only.
  const details = listed.details || listed.tokens.map((t) => {
    const c = claims(t);
    return { token: t, name: "", application: Boolean(c.application), createdTime: c.iat * 1000, expiresTime: c.exp ? c.exp * 1000 : null };
  });
  fill($("#tokens"), details.map((d) => {
    const t = d.token;
    return el("tr", { "data-token-name": d.name || "" },
      el("th", { scope: "row" }, d.name || (d.application ? "(unnamed)" : "–")),
      el("td", {}, d.expiresTime ? fmtTime(d.expiresTime) : "never"),
      el("td", {}, d.application ? "application" : "sign-in"),
      el("td", {}, fmtTime(d.createdTime)),
      el("td", {}, el("code", {}, `${t.slice(0, 12)}…${t.slice(-6)}`)),
      el("td", {}, el("button", { type: "button", class: "danger", "aria-label": `Revoke ${d.name || "token"}`, onclick: () => revoke(t) }, "Revoke")));
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

$("#email-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = /** @type {HTMLFormElement} */ (e.target);
  clearFieldErrors(form);
  try {
    await api("/users/me", { method: "PUT", body: { data: { email: $("#email").value.trim() }, patch: true } });
    fill($("#profile-error"));
    await refresh();
  } catch (error) {
    if (!showApiFieldError(form, error)) showError($("#profile-error"), error);
  }
});
// OpenPAI's own route: PUT /api/v2/users/me with the old password. The platform then ends every
// other sign-in and token of the user; this one stays.
$("#password-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = /** @type {HTMLFormElement} */ (e.target);
  const status = $("#password-status");
  const oldPassword = $("#old-password").value;
  const newPassword = $("#new-password").value;
  status.className = "";
  status.textContent = "";
  clearFieldErrors(form);
  if (newPassword !== $("#new-password-again").value) {
    showFieldError(form, "newPasswordAgain", "The two new passwords differ; type the same one twice.");
    return;
  }
  try {
    await api("/users/me", { method: "PUT", body: { data: { oldPassword, newPassword }, patch: true } });
    status.className = "ok";
    status.textContent = "Your password is changed. Your other sign-ins and tokens have ended; this one stays.";
    /** @type {HTMLFormElement} */ (e.target).reset();
    refresh().catch(() => {});
  } catch (error) {
    const wrong = error.code === "IncorrectPasswordError" ? "The current password is not right; the password is unchanged." : undefined;
    if (showApiFieldError(form, error, {}, wrong)) return;
    status.className = "error";
    status.textContent = wrong || `The password is unchanged: ${error.message}`;
  }
});
$("#token-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const form = /** @type {HTMLFormElement} */ (e.target);
  clearFieldErrors(form);
  const name = $("#token-name").value.trim();
  if (!name) {
    showFieldError(form, "name", "Name the token after what will use it, such as nightly-ci.");
    return;
  }
  const seconds = $("#token-expiry").value;
  try {
    const { token } = await api("/tokens/application", { method: "POST", body: { name, ...(seconds ? { expiration: Number(seconds) } : {}) } });
    $("#token-text").textContent = token;
    $("#new-token-value").classList.remove("hidden");
    form.reset();
    fill($("#profile-error"));
    await refresh();
  } catch (error) {
    if (!showApiFieldError(form, error)) showError($("#profile-error"), error);
  }
});
$("#copy-token").addEventListener("click", () => navigator.clipboard.writeText($("#token-text").textContent));

refresh().catch((error) => showError($("#profile-error"), error));
