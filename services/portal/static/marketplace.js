// @ts-check
// The marketplace: items the user may see, searched and filtered by type, tag and category.
import { $, el, fill, market, showError } from "./common.js";
import { itemLink, visibilityText } from "./market-share.js";

const PAGE = 24;
const form = $("#filters");
// What the page shows, in one place: the page of items (its first item's offset).
const state = {
  offset: 0,
};

function card(item) {
  return el("li", { class: "market-card", "data-item": item.id, "data-name": item.name },
    el("div", { class: "market-card-head" },
      el("span", { class: `kind kind-${item.type}` }, item.type === "data" ? "data" : "template"),
      el("h2", {}, el("a", { href: itemLink(item) }, item.name))),
    el("p", { class: "summary" }, item.summary || "No summary."),
    el("p", { class: "muted meta" },
      `by ${item.author} · ${visibilityText(item)} · `,
      el("span", { "aria-label": `${item.starNumber} stars` }, `★ ${item.starNumber}`), " · ",
      `${item.useNumber} use${item.useNumber === 1 ? "" : "s"}`),
    el("ul", { class: "chips", "aria-label": "Tags" }, (item.tags || []).map((t) => el("li", {}, t))));
}

function query() {
  const data = new FormData(form);
  const params = { offset: String(state.offset), limit: String(PAGE) };
  for (const [key, value] of data.entries()) if (String(value).trim()) params[key] = String(value).trim();
  return params;
}

async function load() {
  const params = query();
  try {
    const { data, headers } = await market("/items?" + new URLSearchParams(params), { withHeaders: true });
    const total = Number(headers.get("X-Total-Count") || data.length);
    fill($("#items"), data.map(card));
    $("#count").textContent = total === 0 ? "Nothing matches." :
      `${state.offset + 1}–${state.offset + data.length} of ${total} item${total === 1 ? "" : "s"}`;
    $("#prev").disabled = state.offset === 0;
    $("#next").disabled = state.offset + data.length >= total;
    fill($("#list-error"));
    const url = new URL(location.href);
    url.search = new URLSearchParams(Object.entries(params).filter(([k]) => k !== "limit" && !(k === "offset" && params.offset === "0"))).toString();
    history.replaceState(null, "", url);
  } catch (error) {
    showError($("#list-error"), error);
  }
}

async function options(path, select, chosen) {
  const labels = await market(path).catch(() => []);
  const names = labels.map((l) => l.name);
  if (chosen && !names.includes(chosen)) names.push(chosen);
  fill(select, el("option", { value: "" }, "all"),
    labels.map((l) => el("option", { value: l.name }, `${l.name} (${l.count})`)),
    chosen && !labels.some((l) => l.name === chosen) ? el("option", { value: chosen }, chosen) : null);
  select.value = chosen || "";
}

async function start() {
  const given = new URLSearchParams(location.search);
  for (const name of ["keyword", "type", "visibility"]) if (given.get(name)) form.elements[name].value = given.get(name);
  state.offset = Number(given.get("offset") || 0) || 0;
  await Promise.all([options("/tags", $("#tag"), given.get("tag")), options("/categories", $("#category"), given.get("category"))]);
  form.addEventListener("submit", (event) => { event.preventDefault(); state.offset = 0; load(); });
  for (const select of form.querySelectorAll("select")) select.addEventListener("change", () => { state.offset = 0; load(); });
  $("#prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); load(); });
  $("#next").addEventListener("click", () => { state.offset += PAGE; load(); });
  await load();
  document.body.dataset.ready = "true";
}

start().catch((error) => { showError($("#list-error"), error); document.body.dataset.ready = "true"; });
