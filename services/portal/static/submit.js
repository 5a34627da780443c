// @ts-check
// The submit page: a form and a YAML editor kept in sync both ways, checked by the API's own
// validator (through /portal/validate) before anything is submitted.
import { $, api, el, fill, market, portal } from "./common.js";
import { saveAsTemplate } from "./market-share.js";

const RUNTIME_PLUGINS = "com.microsoft.pai.runtimeplugin";
const DEFAULT_JOB = `protocolVersion: 2
name: my-job
type: job
jobRetryCount: 0
prerequisites:
  - type: dockerimage
    name: image
    uri: python:3.11-slim
taskRoles:
  main:
    instances: 1
    dockerImage: image
    resourcePerInstance:
      cpu: 1
      memoryMB: 1024
      gpu: 0
    commands:
      - echo hello
defaults:
  virtualCluster: default
`;

// What the page holds, in one place: the job as the form edits it, the problems the last check
// found, what the form last drew (roles, image paths), and how many checks began.
const state = {
  /** @type {any} */
  config: {},
  /** @type {any[]} */
  problems: [],
  rolesShown: "",
  imagePaths: "",
  // each check's number: an answer older than the newest is dropped
  checksStarted: 0,
};
const editor = $("#yaml");
const gutter = $("#gutter");

// ---------------------------------------------------------------- paths in the config

function getPath(obj, path) {
  let cur = obj;
  for (const part of splitPath(path)) {
    if (cur === null || cur === undefined) return undefined;
    cur = cur[part];
  }
  return cur;
}

function setPath(obj, path, value) {
  const parts = splitPath(path);
  let cur = obj;
  parts.slice(0, -1).forEach((part, i) => {
    if (cur[part] === null || typeof cur[part] !== "object") cur[part] = typeof parts[i + 1] === "number" ? [] : {};
    cur = cur[part];
  });
  const last = parts[parts.length - 1];
  if (value === undefined || value === "") delete cur[last];
  else cur[last] = value;
}

function splitPath(path) {
  const parts = [];
  for (const piece of path.split(".")) {
    const m = piece.match(/^([^[]*)((\[\d+\])*)$/);
    if (!m) { parts.push(piece); continue; }
    if (m[1]) parts.push(m[1]);
    for (const idx of m[2].matchAll(/\[(\d+)\]/g)) parts.push(Number(idx[1]));
  }
  return parts;
}

function imageIndex(role) {
  const name = getPath(state.config, `taskRoles.${role}.dockerImage`);
  const pre = Array.isArray(state.config.prerequisites) ? state.config.prerequisites : [];
  return pre.findIndex((p) => p && p.type === "dockerimage" && p.name === name);
}

// ---------------------------------------------------------------- the form from the config

function roleBox(role) {
  const id = (s) => `r-${role}-${s}`.replace(/[^A-Za-z0-9_-]/g, "_");
  const field = (label, key, attrs = {}) =>
    el("div", { class: "field" }, el("label", { for: id(key) }, label),
      el("input", { type: "text", id: id(key), "data-path": `taskRoles.${role}.${key}`, ...attrs }));
  const img = imageIndex(role);
  return el("fieldset", { class: "role-box", "data-role": role },
    el("legend", {}, `Task role ${role}`),
    el("div", { class: "row" },
      field("Instances", "instances", { type: "number", min: "1", "data-type": "int" }),
      el("div", { class: "field" }, el("label", { for: id("image") }, "Docker image"),
        el("input", { type: "text", id: id("image"),
          "data-path": img >= 0 ? `prerequisites[${img}].uri` : `taskRoles.${role}.dockerImage`,
          "data-alt-path": `taskRoles.${role}.dockerImage` }))),
    el("div", { class: "row" },
      field("CPU", "resourcePerInstance.cpu", { type: "number", min: "0", "data-type": "num" }),
      field("Memory (MB)", "resourcePerInstance.memoryMB", { type: "number", min: "0", "data-type": "int" }),
      field("GPU", "resourcePerInstance.gpu", { type: "number", min: "0", "data-type": "int" }),
      field("SKU count", "resourcePerInstance.skuNum", { type: "number", min: "0", "data-type": "int" })),
    el("div", { class: "row" },
      field("Ports (name=count, …)", "resourcePerInstance.ports", { "data-type": "ports" }),
      field("Task retries", "taskRetryCount", { type: "number", min: "0", "data-type": "int" }),
      field("Min succeeded", "completion.minSucceededInstances", { type: "number", "data-type": "int" }),
      field("Min failed", "completion.minFailedInstances", { type: "number", "data-type": "int" })),
    el("div", { class: "field" }, el("label", { for: id("commands") }, "Commands (one a line)"),
      el("textarea", { id: id("commands"), rows: "4", "data-path": `taskRoles.${role}.commands`, "data-type": "lines" })),
    el("button", { type: "button", class: "danger", "data-remove": role }, `Remove ${role}`));
}

function toText(value, type) {
  if (value === undefined || value === null) return "";
  if (type === "lines") return Array.isArray(value) ? value.join("\n") : String(value);
  if (type === "map") return typeof value === "object" ? Object.entries(value).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("\n") : String(value);
  if (type === "ports") return typeof value === "object" ? Object.entries(value).map(([k, v]) => `${k}=${v}`).join(", ") : String(value);
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

function fromText(text, type) {
  if (text.trim() === "") return undefined;
  if (type === "int") return /^-?\d+$/.test(text.trim()) ? Number(text) : text;
  if (type === "num") return /^-?\d+(\.\d+)?$/.test(text.trim()) ? Number(text) : text;
  if (type === "lines") return text.split("\n").filter((l) => l.trim() !== "");
  if (type === "map") {
    const out = {};
    for (const line of text.split("\n")) {
      const i = line.indexOf(":");
      if (i > 0) out[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    return out;
  }
  if (type === "ports") {
    const out = {};
    for (const part of text.split(",")) {
      const [k, v] = part.split("=").map((s) => s.trim());
      if (k) out[k] = /^\d+$/.test(v || "") ? Number(v) : v;
    }
    return out;
  }
  return text;
}

function plugins() {
  const list = getPath(state.config, `extras.${RUNTIME_PLUGINS}`);
  return Array.isArray(list) ? list : [];
}

function showForm() {
  const roles = Object.keys(state.config.taskRoles && typeof state.config.taskRoles === "object" ? state.config.taskRoles : {});
  if (roles.join("\u0000") !== state.rolesShown || imagesChanged()) {
    fill($("#roles"), roles.map(roleBox));
    state.rolesShown = roles.join("\u0000");
  }
  for (const input of /** @type {NodeListOf<HTMLInputElement>} */ (document.querySelectorAll("#job-form [data-path]"))) {
    if (input === document.activeElement) continue;
    input.value = toText(getPath(state.config, input.dataset.path), input.dataset.type);
  }
  $("#f-ssh").checked = plugins().some((p) => p && p.plugin === "ssh");
  const storage = plugins().find((p) => p && p.plugin === "teamwise_storage");
  if (document.activeElement !== $("#f-storage")) {
    $("#f-storage").value = ((storage && storage.parameters && storage.parameters.storageConfigNames) || []).join(", ");
  }
  const vc = getPath(state.config, "defaults.virtualCluster") || "default";
  const select = $("#f-vc");
  if (![...select.options].some((o) => o.value === vc)) select.append(el("option", { value: vc }, vc));
  select.value = vc;
  showProblems();
}

function imagesChanged() {
  const now = Object.keys(state.config.taskRoles || {}).map(imageIndex).join(",");
  const changed = now !== state.imagePaths;
  state.imagePaths = now;
  return changed;
}

// ---------------------------------------------------------------- problems at field and line

function showProblems() {
  for (const f of document.querySelectorAll(".field.invalid")) {
    f.classList.remove("invalid");
    f.querySelector(".problem")?.remove();
    f.querySelector("[aria-invalid]")?.removeAttribute("aria-invalid");
  }
  const inputs = [...document.querySelectorAll("#job-form [data-path]")];
  for (const problem of state.problems) {
    const input = fieldFor(problem.path, inputs);
    if (!input) continue;
    const box = input.closest(".field");
    box.classList.add("invalid");
    input.setAttribute("aria-invalid", "true");
    const pid = `${input.id}-problem`;
    if (!box.querySelector(".problem")) box.append(el("div", { class: "problem", id: pid }, problem.message));
    input.setAttribute("aria-describedby", pid);
  }
  const lines = new Set(state.problems.map((p) => p.line).filter(Boolean));
  const count = Math.max(1, editor.value.split("\n").length);
  fill(gutter, Array.from({ length: count }, (_, i) =>
    lines.has(i + 1) ? el("span", { class: "bad-line" }, `${i + 1}\n`) : `${i + 1}\n`));
  fill($("#problems"), state.problems.length === 0 ? [el("li", { class: "ok" }, "No problems found.")] :
    state.problems.map((p) => el("li", { "data-path": p.path },
      p.line ? el("button", { type: "button", onclick: () => jumpTo(p.line) }, `line ${p.line}`) : "",
      p.line ? ": " : "", `${p.path || "(document)"}: ${p.message}`, p.hint ? ` — ${p.hint}` : "")));
}

function fieldFor(path, inputs) {
  let best = null;
  for (const input of inputs) {
    for (const p of [input.dataset.path, input.dataset.altPath]) {
      if (!p) continue;
      if (path === p || path.startsWith(p + ".") || path.startsWith(p + "[")) {
        if (!best || p.length > best[1].length) best = [input, p];
      }
    }
  }
  return best && best[0];
}

function jumpTo(line) {
  const lines = editor.value.split("\n");
  const start = lines.slice(0, line - 1).reduce((n, l) => n + l.length + 1, 0);
  editor.focus();
  editor.setSelectionRange(start, start + (lines[line - 1] || "").length);
}

// ---------------------------------------------------------------- sync

// Each check is numbered (state.checksStarted): an answer that comes back after a newer check
// began is about text the user has since changed, and never overwrites what the newer one shows.

async function check() {
  const mine = ++state.checksStarted;
  const answer = await portal("/portal/validate", editor.value, "text/yaml");
  if (mine !== state.checksStarted) return answer.valid;
  state.problems = answer.problems;
  if (answer.config && typeof answer.config === "object" && !Array.isArray(answer.config)) state.config = answer.config;
  showForm();
  return answer.valid;
}

function debounce(fn, ms) {
  let t = null;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}

const fromEditor = debounce(() => check().catch(report), 300);

const fromForm = debounce(async () => {
  try {
    editor.value = await portal("/portal/render", JSON.stringify(state.config), "application/json");
    await check();
  } catch (error) { report(error); }
}, 250);

function onFormInput(event) {
  const input = event.target;
  if (input.dataset.path) {
    setPath(state.config, input.dataset.path, fromText(input.value, input.dataset.type));
  } else if (input.dataset.plugin) {
    const rest = plugins().filter((p) => p && p.plugin !== (input.dataset.plugin === "ssh" ? "ssh" : "teamwise_storage"));
    if (input.dataset.plugin === "ssh" && input.checked) rest.push({ plugin: "ssh", parameters: { jobssh: true } });
    if (input.dataset.plugin === "storage" && input.value.trim()) {
      rest.push({ plugin: "teamwise_storage", parameters: { storageConfigNames: input.value.split(",").map((s) => s.trim()).filter(Boolean) } });
    }
    setPath(state.config, `extras.${RUNTIME_PLUGINS}`, rest.length ? rest : undefined);
    if (state.config.extras && Object.keys(state.config.extras).length === 0) delete state.config.extras;
  }
  fromForm();
}

function report(error) {
  $("#submit-status").textContent = error.message || String(error);
}

// ---------------------------------------------------------------- actions

async function submit() {
  const status = $("#submit-status");
  status.textContent = "Checking…";
  if (!(await check())) {
    status.textContent = `Not submitted: ${state.problems.length} problem(s); see the marked fields and lines.`;
    return;
  }
  status.textContent = "Submitting…";
  try {
    const answer = await api("/jobs", { method: "POST", body: editor.value, type: "text/yaml" });
    location.href = "/job-detail.html?" + new URLSearchParams({ username: answer.username, jobName: answer.name });
  } catch (error) {
    if (error.body && Array.isArray(error.body.problems)) {
      state.problems = error.body.problems.map(withLine);
      showProblems();
    }
    status.textContent = `Not submitted: ${error.message}`;
  }
}

function withLine(problem) {
  const m = /\(line (\d+)\)/.exec(problem.message || "");
  return { ...problem, line: m ? Number(m[1]) : null };
}

function exportYaml() {
  const blob = new Blob([editor.value], { type: "text/yaml" });
  const link = el("a", { href: URL.createObjectURL(blob), download: `${state.config.name || "job"}.yaml` });
  document.body.append(link);
  link.click();
  link.remove();
}

async function start() {
  editor.addEventListener("input", fromEditor);
  editor.addEventListener("scroll", () => { gutter.scrollTop = editor.scrollTop; });
  $("#job-form").addEventListener("input", onFormInput);
  $("#job-form").addEventListener("change", (e) => { if (e.target.tagName === "SELECT" || e.target.type === "checkbox") onFormInput(e); });
  $("#job-form").addEventListener("click", (e) => {
    const role = e.target.dataset && e.target.dataset.remove;
    if (!role) return;
    delete state.config.taskRoles[role];
    fromForm();
  });
  $("#add-role").addEventListener("click", () => {
    state.config.taskRoles = state.config.taskRoles || {};
    let n = Object.keys(state.config.taskRoles).length + 1;
    while (state.config.taskRoles[`role${n}`]) n += 1;
    const image = (state.config.prerequisites || []).find((p) => p && p.type === "dockerimage");
    state.config.taskRoles[`role${n}`] = { instances: 1, dockerImage: image ? image.name : "image",
      resourcePerInstance: { cpu: 1, memoryMB: 1024, gpu: 0 }, commands: ["echo hello"] };
    fromForm();
  });
  $("#import-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    editor.value = await file.text();
    await check();
    $("#submit-status").textContent = `Imported ${file.name}.`;
  });
  $("#export").addEventListener("click", exportYaml);
  $("#check").addEventListener("click", () => check().catch(report));
  $("#submit").addEventListener("click", () => submit().catch(report));

  const vcs = await api("/virtual-clusters").catch(() => ({}));
  fill($("#f-vc"), Object.keys(vcs || {}).sort().map((vc) => el("option", { value: vc }, vc)));

  $("#submit").after(saveAsTemplate(document.querySelector("main .toolbar"), async () => editor.value, () => state.config.name));

  const given = new URLSearchParams(location.search);
  const clone = given.get("clone");
  const item = given.get("market");
  if (item) {
    // "Use" on a marketplace item: its job, which names the item in extras.submitFrom so the
    // item's use count follows; a fresh name, since job names are unique per user.
    const { protocol } = await market(`/items/${encodeURIComponent(item)}/job`);
    editor.value = protocol;
    await check();
    state.config.name = `${state.config.name || "job"}-${Date.now().toString(36)}`;
    editor.value = await portal("/portal/render", JSON.stringify(state.config), "application/json");
    await check();
    $("#submit-status").textContent = "The job of the marketplace item: change what you need, then submit.";
  } else if (clone) {
    const [user, ...rest] = clone.split("~");
    let text = await api(`/jobs/${encodeURIComponent(user)}~${encodeURIComponent(rest.join("~"))}/config`, { raw: true });
    editor.value = text;
    await check();
    state.config.name = `${state.config.name}-clone-${Date.now().toString(36)}`;
    fromForm();
  } else {
    editor.value = DEFAULT_JOB;
    await check();
  }
  document.body.dataset.ready = "true";
}

start().catch(report);
