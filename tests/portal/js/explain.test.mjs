// Unit tests of what a job's page says about its job (services/portal/static/explain.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { neverFits, solutionSteps, solutionText, stoppedNotice, successDespiteFailures, trueToBudget } from "../../../services/portal/static/explain.js";

test("steps joined after their full stops read as sentences, never as '.;'", () => {
  assert.deepEqual(solutionSteps(["Check the path.; Submit again."]), ["Check the path.", "Submit again."]);
  assert.equal(solutionText(["Check the path.; Submit again."]), "Check the path. Submit again.");
  assert.equal(solutionText(["a step without a stop", "Another."]), "a step without a stop. Another.");
  assert.equal(solutionText([]), "");
  assert.equal(solutionText(undefined), "");
  assert.ok(!solutionText(["One.; Two.; Three."]).includes(";"));
});

const job = (state, tasks, extra = {}) => ({
  jobStatus: { state, ...extra },
  taskRoles: { worker: { taskStatuses: tasks.map((taskState, taskIndex) => ({ taskIndex, taskState })) } },
});

test("a success with failed tasks names them and the completion rule", () => {
  const said = successDespiteFailures(job("SUCCEEDED", ["SUCCEEDED", "FAILED"]));
  assert.match(said, /1 task failed \(worker\[1\]\)/);
  assert.match(said, /minSucceededInstances/);
  assert.equal(successDespiteFailures(job("SUCCEEDED", ["SUCCEEDED"])), null);
  assert.match(successDespiteFailures(job("SUCCEEDED", ["SUCCEEDED", "STOPPED", "STOPPED"])), /2 tasks stopped \(worker\[1\], worker\[2\]\)/);
  assert.equal(successDespiteFailures(job("FAILED", ["FAILED"])), null);
});

test("a wait for more GPUs than the cluster has is said to be endless", () => {
  assert.match(neverFits(job("WAITING", [], { totalGpuNumber: 8 }), 2), /can never start.*8 GPUs.*has 2/);
  assert.equal(neverFits(job("WAITING", [], { totalGpuNumber: 2 }), 2), null);
  assert.equal(neverFits(job("WAITING", [], { totalGpuNumber: 8 }), null), null, "unknown size: nothing said");
  assert.equal(neverFits(job("RUNNING", [], { totalGpuNumber: 8 }), 2), null);
});

test("a stopped job is told as a stop, not a failure", () => {
  assert.match(stoppedNotice(job("STOPPED", [])), /stopped on request/);
  assert.equal(stoppedNotice(job("FAILED", [])), null);
});

test("the retry budget is said as the job has it, never 'retried within its budget' when it has none", () => {
  const steps = solutionSteps(["Read the last lines of the task's log for the first error.; The job is retried within its retry budget; if each attempt fails alike, fix that error."]);
  const none = trueToBudget(steps, { budget: 0, retries: 0, final: true });
  assert.equal(none[0], "Read the last lines of the task's log for the first error.");
  assert.match(none[1], /^The job is not retried: its jobRetryCount is 0/);
  assert.ok(!none.join(" ").includes("within its retry budget"));
  const spent = trueToBudget(steps, { budget: 2, retries: 2, final: true });
  assert.match(spent[1], /retried 2 times, its whole retry budget \(jobRetryCount 2\)/);
  const going = trueToBudget(steps, { budget: 3, retries: 1, final: false });
  assert.match(going[1], /1 time so far, of at most 3/);
  assert.match(trueToBudget(steps, { budget: 3, retries: 1, final: true })[1], /ended after 1 of the 3 retries/);
  // A clause after other advice keeps that advice as its own sentence.
  const joined = trueToBudget(["Read the task's events for the cause; the job is retried within its retry budget."], { budget: 0, retries: 0, final: true });
  assert.match(joined[0], /^Read the task's events for the cause\. The job is not retried/);
  // Unknown budget, or no such sentence: the words stay.
  assert.deepEqual(trueToBudget(steps, { budget: null, retries: 0, final: true }), steps);
  assert.deepEqual(trueToBudget(["Fix the image name."], { budget: 0, retries: 0, final: true }), ["Fix the image name."]);
});
