// @ts-check
// One marketplace item: its description (Markdown, rendered safely), its job, who may see it,
// stars and uses; Use opens the submit page with its job, Star toggles the user's star.
import { $, el, fill, market, session, showError } from "./common.js";
import { render } from "./markdown.js";
import { visibilityText } from "./market-share.js";

const id = new URLSearchParams(location.search).get("id") || "";
const path = `/items/${encodeURIComponent(id)}`;
let item = null;
let me = null;
let starred = false;

function term(label, value, attrs = {}) {
  return [el("dt", {}, label), el("dd", attrs, value === "" || value === null || value === undefined ? "–" : value)];
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "–";
}

function show() {
  document.title = `${item.name} · PAI`;
  fill($("#item-title"), el("h2", { class: "inline" }, item.name), " ",
    el("span", { class: `kind kind-${item.type}` }, item.type === "data" ? "data" : "template"));
  $("#item-summary").textContent = item.summary || "";
  const status = item.status + (item.statusReason ? `: ${item.statusReason}` : "");
  fill($("#about"),
    term("Author", item.author),
    term("Visible to", visibilityText(item), { id: "visible-to" }),
    term("Status", status, { id: "status" }),
    term("Stars", String(item.starNumber), { id: "stars" }),
    term("Uses", String(item.useNumber), { id: "uses" }),
    term("Tags", (item.tags || []).join(", ")),
    term("Categories", (item.categories || []).join(", ")),
    item.type === "data" ? term("Data", `${item.dataType}: ${item.dataUrl}`) : [],
    term("Created", when(item.createdAt)),
    term("Updated", when(item.updatedAt)));
  const description = render(item.description || "");
  fill($("#description"), description.length ? description : el("p", { class: "muted" }, "No description."));
  $("#protocol").textContent = item.protocol || "";
  $("#yaml-panel").classList.toggle("hidden", !item.protocol);
  $("#use").href = "/submit.html?" + new URLSearchParams({ market: item.id });
  $("#star").textContent = starred ? `★ Starred (${item.starNumber})` : `☆ Star (${item.starNumber})`;
  $("#star").setAttribute("aria-pressed", String(starred));
  $("#delete").classList.toggle("hidden", !(me.admin || me.user === item.author));
  $("#review").classList.toggle("hidden", !(me.admin && item.isPublic && item.status === "pending"));
  document.body.dataset.status = item.status;
}

async function refresh() {
  item = await market(path);
  starred = await market(`/users/${encodeURIComponent(me.user)}/starItems/${encodeURIComponent(id)}`)
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
  me = await session();
  try {
    await refresh();
  } catch (error) {
    showError($("#item-error"), error.status === 404 ? new Error("There is no such item, or you may not see it.") : error);
    for (const node of document.querySelectorAll("main .toolbar, main section, #item-summary")) node.classList.add("hidden");
    document.body.dataset.ready = "true";
    return;
  }
  const starPath = () => `/users/${encodeURIComponent(me.user)}/starItems/${encodeURIComponent(id)}`;
  $("#star").addEventListener("click", (e) =>
    act(e.currentTarget, () => market(starPath(), { method: starred ? "DELETE" : "PUT" })));
  $("#delete").addEventListener("click", (e) => {
    if (!confirm(`Delete ${item.name}? This cannot be undone.`)) return;
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
