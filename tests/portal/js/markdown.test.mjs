// Unit tests of the portal's pure JavaScript (node's own test runner: `node --test tests/portal/js`):
// markdown.js, which turns item descriptions written by any user into DOM nodes, and common.js's
// formatting. The modules run in browsers only, so a small stand-in document records the nodes
// they build; the browser tests (tests/portal/test_*.py) cover them in Chromium.
import assert from "node:assert/strict";
import { test } from "node:test";

class FakeNode {}

class FakeText extends FakeNode {
  constructor(text) { super(); this.text = text; }
  get html() { return this.text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;"); }
}

class FakeElement extends FakeNode {
  constructor(tag) { super(); this.tag = tag; this.attributes = new Map(); this.children = []; this.style = {}; }
  set className(value) { this.attributes.set("class", value); }
  set textContent(value) { this.children = [new FakeText(String(value))]; }
  setAttribute(name, value) { this.attributes.set(name, String(value)); }
  addEventListener() {}
  append(...nodes) { this.children.push(...nodes); }
  get html() {
    const attrs = [...this.attributes].map(([name, value]) => ` ${name}="${value}"`).join("");
    return `<${this.tag}${attrs}>${this.children.map((child) => child.html).join("")}</${this.tag}>`;
  }
}

globalThis.Node = FakeNode;
globalThis.document = {
  readyState: "complete",
  body: { dataset: {} },
  createElement: (tag) => new FakeElement(tag),
  createTextNode: (text) => new FakeText(text),
  getElementById: () => null,
  querySelector: () => null,
};

const { render, safeHref } = await import("../../../services/portal/static/markdown.js");
const { fmtDuration, forPeople, spanTitle } = await import("../../../services/portal/static/common.js");

const html = (source) => render(source).map((node) => node.html).join("");

test("links keep only http(s), mailto and same-site addresses", () => {
  for (const url of ["https://example.com/a", "http://x.test", "mailto:a@b.test", "/jobs", "#part", "./readme", "docs/a.md"]) {
    assert.equal(safeHref(url), url, url);
  }
  for (const url of ["javascript:alert(1)", " JaVaScRiPt:alert(1)", "data:text/html,<b>", "vbscript:x", "//evil.example", "", null]) {
    assert.equal(safeHref(url), null, String(url));
  }
});

test("raw HTML stays text, and a refused link keeps only its words", () => {
  assert.equal(html("<script>alert(1)</script>"), "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>");
  assert.equal(html("[click](javascript:steal)"), "<p>click</p>");
  assert.equal(
    html("see [docs](https://example.com)"),
    '<p>see <a href="https://example.com" rel="noopener noreferrer nofollow">docs</a></p>',
  );
});

test("headings sit under the page's own: # is h3", () => {
  assert.equal(html("# Title\n## Part"), "<h3>Title</h3><h4>Part</h4>");
  assert.equal(html("###### deep"), "<h6>deep</h6>");
});

test("emphasis, code, and underscores inside words", () => {
  assert.equal(html("**bold** *em* `a*b`"), "<p><strong>bold</strong> <em>em</em> <code>a*b</code></p>");
  assert.equal(html("snake_case_name and __dunder__"), "<p>snake_case_name and <strong>dunder</strong></p>");
  assert.equal(html("\\*not em\\*"), "<p>*not em*</p>");
});

test("blocks: fenced code, lists, quotes, tables, rules", () => {
  assert.equal(html("```python\nx = '<b>'\n```"), '<pre class="md-code" data-lang="python"><code>x = \'&lt;b&gt;\'</code></pre>');
  assert.equal(html("3. three\n4. four\n   more"), '<ol start="3"><li>three</li><li>four more</li></ol>');
  assert.equal(html("- a\n- b"), "<ul><li>a</li><li>b</li></ul>");
  assert.equal(html("> quoted\n> *text*"), "<blockquote><p>quoted <em>text</em></p></blockquote>");
  assert.equal(
    html("| a | b |\n|---|---|\n| 1 |"),
    '<div class="table-wrap"><table><thead><tr><th scope="col">a</th><th scope="col">b</th></tr></thead>' +
      "<tbody><tr><td>1</td><td></td></tr></tbody></table></div>",
  );
  assert.equal(html("one\n\n---\n\ntwo\nlines"), "<p>one</p><hr></hr><p>two lines</p>");
});

test("durations read as the largest two units", () => {
  assert.equal(fmtDuration(0, 5000), "–");
  assert.equal(fmtDuration(1000, 1000), "0s");
  assert.equal(fmtDuration(1000, 126_000), "2m 5s");
  assert.equal(fmtDuration(1000, 1000 + 3_660_000 + 59_000), "1h 1m");
  assert.equal(fmtDuration(5000, 1000), "0s", "an end before the start is no time");
});

test("the API's pointers to its own routes stay out of what people read", () => {
  assert.equal(forPeople("No item 7 you may see; `GET /marketplace/api/items` lists them."), "No item 7 you may see.");
  assert.equal(forPeople("Job x is not found."), "Job x is not found.");
  assert.equal(forPeople("Name a storage your groups grant (GET /api/v2/storages), or ask an admin."),
    "Name a storage your groups grant, or ask an admin.");
});

test("a chart's heading says the last 6 hours only when the history reaches that far", () => {
  const now = Date.now() / 1000;
  assert.equal(spanTitle("Use", [[[now - 7 * 3600, 1], [now, 2]]], 6), "Use over the last 6 hours");
  assert.equal(spanTitle("Use", [[[now - 600, 1], [now, 2]]], 6), "Use over the last 10 minutes (all the history kept so far)");
  assert.equal(spanTitle("Use", [], 6), "Use (no samples yet)");
});
