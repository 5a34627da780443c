// Unit tests of the job page's log view (services/portal/static/log-view.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { logFileName, matchingLines, unseen } from "../../../services/portal/static/log-view.js";

test("a piece from the shown end is added whole, and the end moves past it", () => {
  assert.deepEqual(unseen(0, { content: "one\n", offset: 0, nextOffset: 4 }), { text: "one\n", end: 4 });
  assert.deepEqual(unseen(4, { content: "two\n", offset: 4 }), { text: "two\n", end: 8 });
});

test("a piece read twice adds nothing the second time", () => {
  const piece = { content: "one\ntwo\n", offset: 0, nextOffset: 8 };
  const first = unseen(0, piece);
  assert.deepEqual(unseen(first.end, piece), { text: "", end: 8 });
});

test("a piece that overlaps the shown log adds only its bytes past the end, counted as bytes", () => {
  // "é" is two bytes: offsets count bytes, as the API does.
  const piece = { content: "é1\né2\n", offset: 0, nextOffset: 8 };
  assert.deepEqual(unseen(4, piece), { text: "é2\n", end: 8 });
});

test("a piece past the shown end (a gap) adds nothing and keeps the end", () => {
  assert.deepEqual(unseen(4, { content: "later\n", offset: 10, nextOffset: 16 }), { text: "", end: 4 });
});

test("the API's next offset wins over the text's length (a character cut at a piece's edge)", () => {
  assert.deepEqual(unseen(0, { content: "ab\ufffd", offset: 0, nextOffset: 3 }), { text: "ab\ufffd", end: 3 });
});

test("a search keeps the lines containing the text, either case, and counts them", () => {
  const log = "Epoch 1 loss 0.9\nwarning: slow disk\nEpoch 2 loss 0.5\npartial";
  assert.deepEqual(matchingLines(log, "epoch"), { text: "Epoch 1 loss 0.9\nEpoch 2 loss 0.5\n", count: 2 });
  assert.deepEqual(matchingLines(log, "PART"), { text: "partial\n", count: 1 });
  assert.deepEqual(matchingLines(log, "nothing"), { text: "", count: 0 });
  assert.deepEqual(matchingLines(log, ""), { text: log, count: 4 });
  assert.deepEqual(matchingLines("a\nb\n", ""), { text: "a\nb\n", count: 2 });
});

test("a downloaded log is named by job, task and output in safe characters", () => {
  assert.equal(logFileName("my job", "main", 0, "stdout"), "my_job-main-0-stdout.log");
  assert.equal(logFileName("a/b", "w", 3, "all"), "a_b-w-3-all.log");
});
