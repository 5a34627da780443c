// @ts-check
// A safe subset of Markdown, turned into DOM nodes (never into HTML text): headings, paragraphs,
// emphasis, inline code, fenced code, lists, block quotes, tables, rules and links. Raw HTML in
// the source stays text; links keep only http(s), mailto and same-site addresses. Item
// descriptions are written by any user, so nothing in them may run or style the page.
import { el } from "./common.js";

const SAFE_URL = /^(https?:\/\/|mailto:|\/(?!\/)|#|\.{0,2}\/?[A-Za-z0-9_.~-])/i;

export function safeHref(url) {
  const trimmed = String(url || "").trim();
  if (/^[a-z][a-z0-9+.-]*:/i.test(trimmed) && !/^(https?|mailto):/i.test(trimmed)) return null;
  return SAFE_URL.test(trimmed) ? trimmed : null;
}

// Inline text: `code`, **strong**, *em* / _em_, [text](url), with backslash escapes.
export function inline(text) {
  const out = [];
  let plain = "";
  const flush = () => { if (plain) { out.push(plain); plain = ""; } };
  let i = 0;
  while (i < text.length) {
    const rest = text.slice(i);
    let m;
    if (rest[0] === "\\" && rest.length > 1 && /[\\`*_[\]()#+\-.!|<>]/.test(rest[1])) {
      plain += rest[1]; i += 2; continue;
    }
    if ((m = /^(`+)([\s\S]*?[^`])\1(?!`)/.exec(rest))) {
      flush(); out.push(el("code", {}, m[2].trim())); i += m[0].length; continue;
    }
    // Underscores inside a word (snake_case, __dunder__) are not emphasis.
    const wordBefore = i > 0 && /[A-Za-z0-9]/.test(text[i - 1]);
    if ((m = /^\*\*(?=\S)([\s\S]*?\S)\*\*/.exec(rest)) || (!wordBefore && (m = /^__(?=\S)([\s\S]*?\S)__(?![A-Za-z0-9])/.exec(rest)))) {
      flush(); out.push(el("strong", {}, inline(m[1]))); i += m[0].length; continue;
    }
    if ((m = /^\*(?=\S)([\s\S]*?\S)\*/.exec(rest)) || (!wordBefore && (m = /^_(?=\S)([\s\S]*?\S)_(?![A-Za-z0-9])/.exec(rest)))) {
      flush(); out.push(el("em", {}, inline(m[1]))); i += m[0].length; continue;
    }
    if ((m = /^\[([^\]]+)\]\(([^)\s]+)(?:\s+"[^"]*")?\)/.exec(rest))) {
      flush();
      const href = safeHref(m[2]);
      out.push(href ? el("a", { href, rel: "noopener noreferrer nofollow" }, inline(m[1])) : inline(m[1]));
      i += m[0].length;
      continue;
    }
    if ((m = /^https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/.exec(rest)) && (i === 0 || /\s/.test(text[i - 1]))) {
      flush(); out.push(el("a", { href: m[0], rel: "noopener noreferrer nofollow" }, m[0])); i += m[0].length; continue;
    }
    plain += rest[0];
    i += 1;
  }
  flush();
  return out;
}

function cells(line) {
  let body = line.trim();
  if (body.startsWith("|")) body = body.slice(1);
  if (body.endsWith("|") && !body.endsWith("\\|")) body = body.slice(0, -1);
  return body.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+-]*)\s*$/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const BULLET = /^\s{0,3}([-*+])\s+(.*)$/;
const NUMBERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

// The whole document as a list of block elements.
export function render(source) {
  const lines = String(source || "").replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  const startsBlock = (line, next) =>
    FENCE.test(line) || HEADING.test(line) || RULE.test(line) || BULLET.test(line) || NUMBERED.test(line) ||
    QUOTE.test(line) || (line.includes("|") && next !== undefined && TABLE_RULE.test(next));
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) { i += 1; continue; }
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const code = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) { code.push(lines[i]); i += 1; }
      i += 1;
      blocks.push(el("pre", { class: "md-code", "data-lang": m[2] || null }, el("code", {}, code.join("\n"))));
      continue;
    }
    if ((m = HEADING.exec(line))) {
      // Descriptions sit under the page's own headings: # becomes h3, ## h4 and so on.
      const level = Math.min(6, m[1].length + 2);
      blocks.push(el(`h${level}`, {}, inline(m[2])));
      i += 1;
      continue;
    }
    if (RULE.test(line)) { blocks.push(el("hr")); i += 1; continue; }
    if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      const head = cells(line);
      const rows = [];
      i += 2;
      while (i < lines.length && lines[i].trim() && lines[i].includes("|")) { rows.push(cells(lines[i])); i += 1; }
      blocks.push(el("div", { class: "table-wrap" }, el("table", {},
        el("thead", {}, el("tr", {}, head.map((c) => el("th", { scope: "col" }, inline(c))))),
        el("tbody", {}, rows.map((r) => el("tr", {}, head.map((_, k) => el("td", {}, inline(r[k] ?? "")))))))));
      continue;
    }
    if (QUOTE.test(line)) {
      const quoted = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) { quoted.push(m[1]); i += 1; }
      blocks.push(el("blockquote", {}, render(quoted.join("\n"))));
      continue;
    }
    if (BULLET.test(line) || NUMBERED.test(line)) {
      const ordered = !BULLET.test(line);
      const pattern = ordered ? NUMBERED : BULLET;
      const items = [];
      while (i < lines.length) {
        if ((m = pattern.exec(lines[i]))) { items.push(m[2]); i += 1; continue; }
        // A continuation line (indented, not a new block) belongs to the item before it.
        if (items.length && lines[i].trim() && /^\s+/.test(lines[i]) && !startsBlock(lines[i].trim(), lines[i + 1])) {
          items[items.length - 1] += " " + lines[i].trim(); i += 1; continue;
        }
        break;
      }
      const start = ordered ? Number(NUMBERED.exec(line)[1]) : null;
      blocks.push(el(ordered ? "ol" : "ul", { start: ordered && start !== 1 ? String(start) : null },
        items.map((text) => el("li", {}, inline(text)))));
      continue;
    }
    const para = [line.trim()];
    i += 1;
    while (i < lines.length && lines[i].trim() && !startsBlock(lines[i], lines[i + 1])) { para.push(lines[i].trim()); i += 1; }
    blocks.push(el("p", {}, inline(para.join(" "))));
  }
  return blocks;
}
