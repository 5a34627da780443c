// Unit tests of the job list's live updates (services/portal/static/list-updates.js): which events
// make an open list read the jobs again, and the coalescer that keeps a busy cluster's events to
// one read per interval, under a fake clock.
import assert from "node:assert/strict";
import { test } from "node:test";

import { coalescer, listMoved } from "../../../services/portal/static/list-updates.js";

const NEWEST = { order: "submissionTime,DESC", filters: {} };
const shown = new Map([["a", "WAITING"], ["b", "RUNNING"]]);

test("a new job, or a stream that says nothing, means reading again", () => {
  assert.equal(listMoved({ type: "job.submitted", job_id: "z" }, shown, NEWEST), true);
  assert.equal(listMoved(null, shown, NEWEST), true);
  assert.equal(listMoved({}, shown, NEWEST), true);
});

test("a shown job's change is read; a job elsewhere is not, unless it can enter the page", () => {
  assert.equal(listMoved({ type: "job.completed", job_id: "b" }, shown, NEWEST), true);
  assert.equal(listMoved({ type: "job.completed", job_id: "z" }, shown, NEWEST), false);
  assert.equal(listMoved({ type: "job.completed", job_id: "z" }, shown, { order: "state,ASC", filters: {} }), true);
  assert.equal(listMoved({ type: "job.completed", job_id: "z" }, shown, { ...NEWEST, filters: { state: "RUNNING" } }), true);
});

test("only a task's start that makes a waiting job run changes the list", () => {
  assert.equal(listMoved({ type: "task.started", job_id: "a" }, shown, NEWEST), true);
  assert.equal(listMoved({ type: "task.started", job_id: "b" }, shown, NEWEST), false);
  assert.equal(listMoved({ type: "task.completed", job_id: "a" }, shown, NEWEST), false);
  assert.equal(listMoved({ type: "job.tagged", job_id: "a" }, shown, NEWEST), false);
});

function fakeClock() {
  let time = 0;
  const timers = new Map();
  let next = 1;
  return {
    now: () => time,
    later: (fn, ms) => { timers.set(next, { at: time + ms, fn }); return next++; },
    cancel: (handle) => { timers.delete(handle); },
    // Run time forward to `until`, firing timers in order.
    async advance(until) {
      for (;;) {
        const due = [...timers.entries()].filter(([, t]) => t.at <= until).sort((x, y) => x[1].at - y[1].at)[0];
        if (!due) break;
        timers.delete(due[0]);
        time = due[1].at;
        due[1].fn();
        await new Promise((done) => setImmediate(done));
      }
      time = until;
    },
  };
}

test("events every 100 ms for 30 s make one read per gap, and one more once quiet", async () => {
  const clock = fakeClock();
  const reads = [];
  const c = coalescer(async () => { reads.push(clock.now()); }, { gapMs: 1500, settleMs: 1000, ...clock });
  for (let t = 0; t < 30000; t += 100) {
    await clock.advance(t);
    c.request();
  }
  await clock.advance(40000);
  assert.ok(reads.length <= 30000 / 1500 + 2, `${reads.length} reads`);
  assert.ok(reads.length >= 15, `${reads.length} reads: the list still follows`);
  for (let i = 1; i < reads.length; i++) assert.ok(reads[i] - reads[i - 1] >= 1500, `reads ${reads[i - 1]} and ${reads[i]}`);
  assert.ok(reads[reads.length - 1] >= 29900 + 1000, "a read after the last event settled");
});

test("a read never overlaps another, and the user's own change is read at once", async () => {
  const clock = fakeClock();
  let running = 0, most = 0, count = 0;
  /** @type {(() => void)[]} */
  const finish = [];
  const c = coalescer(() => new Promise((done) => {
    running++; count++; most = Math.max(most, running);
    finish.push(() => { running--; done(); });
  }), { gapMs: 1500, settleMs: 1000, ...clock });
  c.now();
  c.now();
  await clock.advance(5000);
  assert.equal(count, 1);
  finish.shift()();
  await new Promise((done) => setImmediate(done));
  assert.equal(count, 2, "the second change is read once the first read is done");
  assert.equal(most, 1);
});
