// @ts-check
// What the marketplace's pages share: how an item's audience reads, its address, and the
// "Save as template" form of the submit page and of a job's page.
import { el, fill, market, session } from "./common.js";

export function visibilityText(item) {
  if (item.isPrivate) return "only the author";
  if (item.isPublic) return item.status === "approved" ? "everyone" : `everyone, once approved (${item.status})`;
  return `groups ${(item.groupList || []).join(", ")}`;
}

export function itemLink(item) {
  return "/marketplace-item.html?" + new URLSearchParams({ id: item.id });
}

// A "Save as template" button that opens a small form under `anchor`; `protocol()` gives the job
// YAML to publish and `suggestedName()` the item's first name.
export function saveAsTemplate(anchor, protocol, suggestedName) {
  const box = el("section", { class: "panel hidden", id: "save-template", "aria-labelledby": "save-title" });
  const open = el("button", { type: "button", class: "secondary", id: "save-as-template", "aria-expanded": "false", "aria-controls": "save-template" }, "Save as template");
  anchor.after(box);
  const status = el("p", { id: "save-status", role: "status", class: "muted" });
  const groupsField = el("div", { class: "field hidden", id: "t-groups-field" },
    el("label", { for: "t-groups" }, "Groups (comma separated; you must belong to each)"),
    el("input", { type: "text", id: "t-groups", name: "groups" }));
  const formBox = el("form", { id: "save-form", novalidate: true },
    el("div", { class: "row" },
      el("div", { class: "field" }, el("label", { for: "t-name" }, "Template name"), el("input", { type: "text", id: "t-name", name: "name", required: true })),
      el("div", { class: "field" }, el("label", { for: "t-visibility" }, "Who may see it"),
        el("select", { id: "t-visibility", name: "visibility" },
          el("option", { value: "private" }, "only me"),
          el("option", { value: "group" }, "my groups…"),
          el("option", { value: "public" }, "everyone (after an admin approves it)")))),
    groupsField,
    el("div", { class: "field" }, el("label", { for: "t-summary" }, "Summary"), el("input", { type: "text", id: "t-summary", name: "summary" })),
    el("div", { class: "field" }, el("label", { for: "t-description" }, "Description (Markdown)"), el("textarea", { id: "t-description", name: "description", rows: "4" })),
    el("div", { class: "row" },
      el("div", { class: "field" }, el("label", { for: "t-tags" }, "Tags (comma separated)"), el("input", { type: "text", id: "t-tags", name: "tags" })),
      el("div", { class: "field" }, el("label", { for: "t-categories" }, "Categories (comma separated)"), el("input", { type: "text", id: "t-categories", name: "categories" }))),
    el("div", { class: "actions" },
      el("button", { type: "submit", id: "save-template-submit" }, "Save template"),
      el("button", { type: "button", class: "secondary", id: "save-cancel" }, "Cancel")),
    status);
  fill(box, el("h2", { id: "save-title" }, "Save as template"), formBox);
  const list = (value) => String(value || "").split(",").map((s) => s.trim()).filter(Boolean);
  formBox.elements.visibility.addEventListener("change", () =>
    groupsField.classList.toggle("hidden", formBox.elements.visibility.value !== "group"));
  open.addEventListener("click", async () => {
    box.classList.remove("hidden");
    open.setAttribute("aria-expanded", "true");
    if (!formBox.elements.name.value) formBox.elements.name.value = suggestedName() || "";
    formBox.elements.name.focus();
  });
  formBox.querySelector("#save-cancel").addEventListener("click", () => {
    box.classList.add("hidden");
    open.setAttribute("aria-expanded", "false");
  });
  formBox.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = formBox.elements;
    const visibility = f.visibility.value;
    const body = {
      name: f.name.value.trim(),
      type: "template",
      summary: f.summary.value.trim(),
      description: f.description.value,
      protocol: await protocol(),
      tags: list(f.tags.value),
      categories: list(f.categories.value),
      isPrivate: visibility === "private",
      isPublic: visibility === "public",
      groupList: visibility === "group" ? list(f.groups.value) : [],
    };
    status.textContent = "Saving…";
    try {
      await session();
      const item = await market("/items", { method: "POST", body });
      fill(status, "Saved: ", el("a", { href: itemLink(item), id: "saved-link" }, item.name),
        item.status === "pending" ? " (waits for an administrator's approval before others see it)" : "");
    } catch (error) {
      const field = error.body && error.body.field ? ` (${error.body.field})` : "";
      status.textContent = `Not saved: ${error.message}${field}`;
    }
  });
  return open;
}
