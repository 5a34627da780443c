// @ts-check
// One marketplace item: its description (Markdown, rendered safely), its job, who may see it,
// stars and uses; Use opens the submit page with its job, Star toggles the user's star.
import { $, el, fill, market, session, showError } from "./common.js";
import { render } from "./markdown.js";
import { visibilityText } from "./market-share.js";

const id = new URLSearchParams(location.search).get("id") || "";
const path = `/items/${encodeURIComponent(id)}`;
// What the page shows, in one place: the item, who is looking, whether they starred it.
const state = {
  /** @type {any} */
  item: null,
  /** @type {any} */
  me: null,
  starred: false,
};

function term(label, value, attrs = {}) {
  return [el("dt", {}, label), el("dd", attrs, value === "" || value === null || value === undefined ? "–" : value)];
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}

function show() {
  document.title = `${state.item.name} · PAI`;
  fill($("#item-title"), el("h2", { class: "inline" }, state.item.name), " ",
    el("span", { class: `kind kind-${state.item.type}` }, state.item.type === "data" ? "data" : "template"));
  $("#item-summary").textContent = state.item.summary || "";
  const status = state.item.status + (state.item.statusReason ? `: ${state.item.statusReason}` : "");
  fill($("#about"),
    term("Author", state.item.author),
    term("Visible to", visibilityText(state.item), { id: "visible-to" }),
    term("Status", status, { id: "status" }),
    term("Stars", String(state.item.starNumber), { id: "stars" }),
    term("Uses", String(state.item.useNumber), { id: "uses" }),
    term("Tags", (state.item.tags || []).join(", ")),
    term("Categories", (state.item.categories || []).join(", ")),
    state.item.type === "data" ? term("Data", `${state.item.dataType}: ${state.item.dataUrl}`) : [],
    term("Created", when(state.item.createdAt)),
    term("Updated", when(state.item.updatedAt)));
  const description = render(state.item.description || "");
  fill($("#description"), description.length ? description : el("p", { class: "muted" }, "No description."));
  $("#protocol").textContent = state.item.protocol || "";
  $("#yaml-panel").classList.toggle("hidden", !state.item.protocol);
  $("#use").href = "/submit.html?" + new URLSearchParams({ market: state.item.id });
  $("#star").textContent = state.starred ? `★ Starred (${state.item.starNumber})` : `☆ Star (${state.item.starNumber})`;
  $("#star").setAttribute("aria-pressed", String(state.starred));
  $("#delete").classList.toggle("hidden", !(state.me.admin || state.me.user === state.item.author));
  $("#review").classList.toggle("hidden", !(state.me.admin && state.item.isPublic && state.item.status === "pending"));
  document.body.dataset.status = state.item.status;
}

async function refresh() {
  state.item = await market(path);
  state.starred = await market(`/users/${encodeURIComponent(state.me.user)}/starItems/${encodeURIComponent(id)}`)
    .then(() => true, () => false);
  show();
}

async function act(button, work, done) {
  button.disabled = true;
  try {
    await work();
    await refresh();
    if (done) $("#action-status").textContent = done;
  } catch (error) {
    $("#action-status").textContent = error.message;
  } finally {
    button.disabled = false;
  }
}

async function start() {
  state.me = await session();
  try {
    await refresh();
  } catch (error) {
    showError($("#item-error"), error.status === 404 ? new Error("There is no such item, or you may not see it.") : error);
    for (const node of document.querySelectorAll("main .toolbar, main section, #item-summary")) node.classList.add("hidden");
    document.body.dataset.ready = "true";
    return;
  }
  const starPath = () => `/users/${encodeURIComponent(state.me.user)}/starItems/${encodeURIComponent(id)}`;
  $("#star").addEventListener("click", (e) =>
    act(e.currentTarget, () => market(starPath(), { method: state.starred ? "DELETE" : "PUT" })));
  $("#delete").addEventListener("click", (e) => {
    if (!confirm(`Delete ${state.item.name}? This cannot be undone.`)) return;
    act(e.currentTarget, async () => {
      await market(path, { method: "DELETE" });
      location.href = "/marketplace.html";
    });
  });
  const review = (status) => (e) => act(e.currentTarget, async () => {
    const reason = $("#reason").value.trim();
    if (status === "rejected" && !reason) throw new Error("Say why in the reason field before rejecting.");
    await market(path, { method: "PUT", body: status === "rejected" ? { status, statusReason: reason } : { status } });
  }, status === "approved" ? "Approved: everyone signed in now sees it." : "Rejected; the author sees the reason.");
  $("#approve").addEventListener("click", review("approved"));
  $("#reject").addEventListener("click", review("rejected"));
  document.body.dataset.ready = "true";
}

start().catch((error) => { showError($("#item-error"), error); document.body.dataset.ready = "true"; });
