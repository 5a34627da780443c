// Unit tests of what a job's page says about its job (services/portal/static/explain.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { neverFits, solutionSteps, solutionText, stoppedNotice, successDespiteFailures } from "../../../services/portal/static/explain.js";

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
