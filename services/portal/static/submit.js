// @ts-check
// The submit page: a form and a YAML editor kept in sync both ways, checked by the API's own
// validator (through /portal/validate) before anything is submitted.
import { $, ApiError, api, el, fill, forPeople, market, portal } from "./common.js";
import { saveAsTemplate } from "./market-share.js";
import { digestsByRole, pinEdits } from "./pinning.js";

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

/**
 * A change the form made, for the editor's text: a value set at a path (undefined: removed), or a
 * key of the map at the path renamed (a task role's name).
 * @typedef {{parts: (string|number)[], value?: any, rename?: {from: string, to: string}}} Edit
 */

// Where a task role's name is a key: its own section, and the extensions that name roles.
/** @param {any} config @returns {(string|number)[][]} */
function roleMaps(config) {
  /** @type {(string|number)[][]} */
  const maps = [["taskRoles"]];
  (Array.isArray(config.deployments) ? config.deployments : []).forEach((/** @type {any} */ d, /** @type {number} */ i) => {
    if (d && d.taskRoles && typeof d.taskRoles === "object") maps.push(["deployments", i, "taskRoles"]);
  });
  for (const ext of ["hivedScheduler", "gpuShare"]) {
    const named = config.extras && config.extras[ext];
    if (named && named.taskRoles && typeof named.taskRoles === "object") maps.push(["extras", ext, "taskRoles"]);
  }
  return maps;
}

// The map at `parts` with one key renamed, in its place among the others.
/** @param {any} obj @param {(string|number)[]} parts @param {{from: string, to: string}} rename */
function renameKey(obj, parts, { from, to }) {
  const parent = parts.slice(0, -1).reduce((cur, part) => (cur && typeof cur === "object" ? cur[part] : undefined), obj);
  const last = parts[parts.length - 1];
  const map = parent && parent[last];
  if (!map || typeof map !== "object" || !(from in map)) return;
  parent[last] = Object.fromEntries(Object.entries(map).map(([k, v]) => [k === from ? to : k, v]));
}

const ROLE_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

// What the page holds, in one place: the job as the form edits it, the problems the last check
// found, what the form last drew (roles, image paths), and how many checks began.
const state = {
  /** @type {any} */
  config: {},
  /** @type {any[]} */
  problems: [],
  /** @type {{path: string, message: string}[]} what a valid job asks that the platform will not do */
  warnings: [],
  rolesShown: "",
  imagePaths: "",
  // each check's number: an answer older than the newest is dropped
  checksStarted: 0,
  // the platform (a dry run) found nothing wrong with the text checked last
  checkedByPlatform: false,
  /** @type {Edit[]} the form's changes not yet in the editor */
  edits: [],
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
  setParts(obj, splitPath(path), value);
}

/** @param {any} obj @param {(string|number)[]} parts @param {any} value */
function setParts(obj, parts, value) {
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
    el("div", { class: "field" }, el("label", { for: id("name") }, "Role name (letters, digits and _)"),
      el("input", { type: "text", id: id("name"), value: role, "data-role-name": role, autocomplete: "off" })),
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

// OpenPAI's runtime plugins sit under one flat key with dots in it, `extras` ->
// `com.microsoft.pai.runtimeplugin`, never under nested objects com -> microsoft -> pai.
function plugins() {
  const extras = state.config.extras;
  const list = extras && typeof extras === "object" ? extras[RUNTIME_PLUGINS] : undefined;
  return Array.isArray(list) ? list : [];
}

function setPlugins(list) {
  const extras = state.config.extras && typeof state.config.extras === "object" ? state.config.extras : {};
  if (list.length) extras[RUNTIME_PLUGINS] = list;
  else delete extras[RUNTIME_PLUGINS];
  if (Object.keys(extras).length) state.config.extras = extras;
  else delete state.config.extras;
}

const STORAGE_PLUGINS = new Set(["teamwise_storage", "storage"]);

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
  const storage = plugins().find((p) => p && STORAGE_PLUGINS.has(p.plugin));
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
  for (const note of document.querySelectorAll("#job-form .field .warning")) note.remove();
  const inputs = [...document.querySelectorAll("#job-form [data-path], #job-form [data-alt-path]")];
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
  for (const warning of state.warnings) {
    const input = fieldFor(warning.path, inputs);
    const box = input && input.closest(".field");
    if (!box || box.querySelector(".problem")) continue;
    const wid = `${input.id}-warning`;
    box.append(el("div", { class: "warning", id: wid }, warning.message));
    input.setAttribute("aria-describedby", wid);
  }
  const lines = new Set(state.problems.map((p) => p.line).filter(Boolean));
  const count = Math.max(1, editor.value.split("\n").length);
  fill(gutter, Array.from({ length: count }, (_, i) =>
    lines.has(i + 1) ? el("span", { class: "bad-line" }, `${i + 1}\n`) : `${i + 1}\n`));
  const none = state.checkedByPlatform ? "No problems found; the platform would accept this job." :
    "No problems found in the job (Check asks the platform too: virtual cluster, storages, nodes).";
  fill($("#problems"), state.problems.length === 0 ? [el("li", { class: "ok" }, none)] :
    state.problems.map((p) => el("li", { "data-path": p.path },
      p.line ? el("button", { type: "button", onclick: () => jumpTo(p.line) }, `line ${p.line}`) : "",
      p.line ? ": " : "", `${p.path || "(document)"}: ${p.message}`, p.hint ? ` — ${p.hint}` : "")),
  state.warnings.map((w) => el("li", { class: "warn", "data-path": w.path }, `Warning: ${w.path}: ${w.message}`)));
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
  state.warnings = Array.isArray(answer.warnings) ? answer.warnings : [];
  state.checkedByPlatform = false;
  if (answer.config && typeof answer.config === "object" && !Array.isArray(answer.config)) {
    state.config = answer.config;
    // Edits the form made since the checked text was written are not in it yet: keep them.
    for (const { parts, value, rename } of state.edits) {
      if (rename) renameKey(state.config, parts, rename);
      else setParts(state.config, parts, value);
    }
  }
  showForm();
  return answer.valid;
}

function debounce(fn, ms) {
  let t = null;
  return (...args) => { clearTimeout(t); t = setTimeout(() => fn(...args), ms); };
}

const fromEditor = debounce(() => check().catch(report), 300);

// The npm package `yaml` (pinned in package-lock.json, served from its install under
// /static/v.../lib/yaml/): the editor's document is edited in place, so a change in the form
// keeps the user's comments, block scalars and number forms. Without it (npm packages not
// installed) the portal renders the whole job again, as plain YAML.
/** @type {Promise<any>} */
const yamlLib = import(new URL("lib/yaml/index.js", import.meta.url).href).catch(() => null);

// A change the form made, to apply to the editor's text: the path's parts and the new value
// (undefined: remove it).
/** @param {(string|number)[]} parts @param {any} value */
function edit(parts, value) {
  state.edits.push({ parts, value });
  fromForm();
}

/** @param {string} text @param {Edit[]} edits */
async function edited(text, edits) {
  const YAML = await yamlLib;
  if (YAML) {
    const doc = YAML.parseDocument(text);
    if (doc.errors.length === 0 && YAML.isMap(doc.contents)) {
      for (const { parts, value, rename } of edits) {
        if (rename) {
          const map = doc.getIn(parts, true);
          const pair = YAML.isMap(map) ? map.items.find((/** @type {any} */ p) => (YAML.isScalar(p.key) ? p.key.value : p.key) === rename.from) : null;
          if (pair && YAML.isScalar(pair.key)) pair.key.value = rename.to;
          else if (pair) pair.key = doc.createNode(rename.to);
        } else if (value === undefined) { if (doc.hasIn(parts)) doc.deleteIn(parts); }
        else doc.setIn(parts, value !== null && typeof value === "object" ? doc.createNode(value) : value);
      }
      return doc.toString();
    }
  }
  return portal("/portal/render", JSON.stringify(state.config), "application/json");
}

// The form's edits reach the editor one batch at a time, in order: a batch reads the text the
// previous one wrote. Submit, Check and Export apply what is pending first, so an edit made just
// before a click is in what the click sends.
/** @type {Promise<void>} */
let applying = Promise.resolve();
/** @type {ReturnType<typeof setTimeout> | undefined} */
let formTimer;

function applyEdits() {
  clearTimeout(formTimer);
  applying = applying.catch(() => {}).then(async () => {
    const edits = state.edits;
    state.edits = [];
    if (edits.length) editor.value = await edited(editor.value, edits);
  });
  return applying;
}

function fromForm() {
  clearTimeout(formTimer);
  formTimer = setTimeout(() => applyEdits().then(check).catch(report), 250);
}

// A task role renamed in the form (on change: once the name is typed): its section and every
// map that names it, in place. A name the protocol refuses, or another role's, stays a problem
// at the field until corrected.
function renameRole(input) {
  const from = input.dataset.roleName;
  const to = input.value.trim();
  const box = input.closest(".field");
  box.querySelector(".problem")?.remove();
  box.classList.remove("invalid");
  input.removeAttribute("aria-invalid");
  if (to === from) return;
  const roles = state.config.taskRoles || {};
  const wrong = !ROLE_NAME.test(to) ? "A task role's name starts with a letter or _ and has only letters, digits and _ (for example trainer or worker_2)." :
    to in roles ? `Another task role is named ${to}: choose another name.` : "";
  if (wrong) {
    box.classList.add("invalid");
    input.setAttribute("aria-invalid", "true");
    box.append(el("div", { class: "problem", id: `${input.id}-problem` }, wrong));
    input.setAttribute("aria-describedby", `${input.id}-problem`);
    return;
  }
  for (const parts of roleMaps(state.config)) {
    renameKey(state.config, parts, { from, to });
    state.edits.push({ parts, rename: { from, to } });
  }
  fromForm();
  showForm();
}

function onFormInput(event) {
  const input = event.target;
  if (input.dataset.roleName !== undefined) {
    if (event.type === "change") renameRole(input);
    return;
  }
  if (input.dataset.path) {
    const value = fromText(input.value, input.dataset.type);
    setPath(state.config, input.dataset.path, value);
    edit(splitPath(input.dataset.path), value === "" ? undefined : value);
  } else if (input.dataset.plugin) {
    const ssh = input.dataset.plugin === "ssh";
    const list = [...plugins()];
    const at = list.findIndex((p) => p && (ssh ? p.plugin === "ssh" : STORAGE_PLUGINS.has(p.plugin)));
    let entry = null;
    if (ssh && input.checked) entry = at >= 0 ? list[at] : { plugin: "ssh", parameters: { jobssh: true } };
    const names = ssh ? [] : input.value.split(",").map((s) => s.trim()).filter(Boolean);
    if (!ssh && names.length) {
      const old = at >= 0 ? list[at] : { plugin: "teamwise_storage" };
      entry = { ...old, parameters: { ...(old.parameters || {}), storageConfigNames: names } };
    }
    // The plugin keeps its place in the list (and any parameters the form does not show).
    if (at >= 0 && entry) list[at] = entry;
    else if (at >= 0) list.splice(at, 1);
    else if (entry) list.push(entry);
    setPlugins(list);
    edit(["extras", RUNTIME_PLUGINS], list.length ? list : undefined);
    if (!state.config.extras) edit(["extras"], undefined);
  }
}

function report(error) {
  $("#submit-status").textContent = error.message || String(error);
}

// The platform's own checks of a submission (the VC and storages the user may use, a node the
// tasks fit, the name free), asked of REST as a dry run: nothing is stored. The answer's refusals
// become problems at their fields, in the words a submission would use.
async function platformCheck() {
  const mine = state.checksStarted;
  /** @type {any[]} */
  let problems = [];
  /** @type {any[] | null} */
  let warnings = null;
  try {
    const answer = await api("/jobs?dryRun=true", { method: "POST", body: editor.value, type: "text/yaml" });
    if (answer && Array.isArray(answer.warnings)) warnings = answer.warnings;
  } catch (error) {
    if (!(error instanceof ApiError) || error.status === 429 || error.status >= 500) throw error;
    const body = error.body || {};
    const refusals = Array.isArray(body.refusals) ? body.refusals : [body];
    problems = refusals.flatMap((r) => Array.isArray(r.problems) && r.problems.length ?
      r.problems.map(withLine) : [{ path: r.path || "", message: r.message, hint: r.hint && forPeople(r.hint), line: null }]);
  }
  if (mine !== state.checksStarted) return null;
  state.problems = problems;
  if (warnings) state.warnings = warnings;
  state.checkedByPlatform = problems.length === 0;
  showProblems();
  return problems.length === 0;
}

async function checkAll() {
  const status = $("#submit-status");
  status.textContent = "Checking…";
  await applyEdits();
  if (!(await check())) { status.textContent = `${state.problems.length} problem(s) in the job.`; return; }
  const fine = await platformCheck();
  if (fine === null) return;
  const warned = state.warnings.length ? `, with ${state.warnings.length} warning(s): see them under Problems` : "";
  status.textContent = fine ? `The platform would accept this job${warned}.` :
    `The platform would refuse this job: ${state.problems.length} problem(s).`;
}

// ---------------------------------------------------------------- actions

async function submit() {
  const status = $("#submit-status");
  status.textContent = "Checking…";
  await applyEdits();
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

async function exportYaml() {
  await applyEdits();
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
  $("#job-form").addEventListener("change", (e) => {
    if (e.target.tagName === "SELECT" || e.target.type === "checkbox" || e.target.dataset.roleName !== undefined) onFormInput(e);
  });
  $("#job-form").addEventListener("click", (e) => {
    const role = e.target.dataset && e.target.dataset.remove;
    if (!role) return;
    delete state.config.taskRoles[role];
    edit(["taskRoles", role], undefined);
  });
  $("#add-role").addEventListener("click", () => {
    state.config.taskRoles = state.config.taskRoles || {};
    let n = Object.keys(state.config.taskRoles).length + 1;
    while (state.config.taskRoles[`role${n}`]) n += 1;
    const image = (state.config.prerequisites || []).find((p) => p && p.type === "dockerimage");
    state.config.taskRoles[`role${n}`] = { instances: 1, dockerImage: image ? image.name : "image",
      resourcePerInstance: { cpu: 1, memoryMB: 1024, gpu: 0 }, commands: ["echo hello"] };
    edit(["taskRoles", `role${n}`], state.config.taskRoles[`role${n}`]);
    // Its name first: a role is named for what it does (trainer, evaluator).
    showForm();
    const name = /** @type {HTMLInputElement | null} */ (document.querySelector(`[data-role-name="role${n}"]`));
    if (name) { name.focus(); name.select(); }
  });
  $("#import-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    editor.value = await file.text();
    await check();
    $("#submit-status").textContent = `Imported ${file.name}.`;
  });
  $("#export").addEventListener("click", () => exportYaml().catch(report));
  $("#check").addEventListener("click", () => checkAll().catch(report));
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
    editor.value = await edited(editor.value, [{ parts: ["name"], value: state.config.name }]);
    await check();
    $("#submit-status").textContent = "The job of the marketplace item: change what you need, then submit.";
  } else if (clone) {
    const [user, ...rest] = clone.split("~");
    let text = await api(`/jobs/${encodeURIComponent(user)}~${encodeURIComponent(rest.join("~"))}/config`, { raw: true });
    editor.value = text;
    await check();
    state.config.name = `${state.config.name}-clone-${Date.now().toString(36)}`;
    /** @type {{ parts: (string | number)[], value: string }[]} */
    let pins = [];
    let said = "";
    if (given.get("pin") === "images") {
      // The images its tasks ran, by digest: the clone runs the same bits.
      const detail = await api(`/jobs/${encodeURIComponent(user)}~${encodeURIComponent(rest.join("~"))}`);
      const { edits, unpinned } = pinEdits(state.config, digestsByRole(detail));
      pins = edits;
      said = edits.length ? `Images pinned to the digests the job ran (${edits.length}).` : "The job names no image digest to pin: its tasks ran on the host.";
      if (unpinned.length) said += ` Not pinned, its roles ran different digests: ${unpinned.join(", ")}.`;
    }
    editor.value = await edited(editor.value, [{ parts: ["name"], value: state.config.name }, ...pins]);
    await check();
    if (said) $("#submit-status").textContent = said;
  } else {
    editor.value = DEFAULT_JOB;
    await check();
  }
  document.body.dataset.ready = "true";
}

start().catch(report);
