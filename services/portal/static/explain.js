// @ts-check
// What a job's page says about why the job is where it is, in sentences: the steps of advice,
// a success despite failed tasks, a wait that can never end, a stop the user asked for. Pure:
// it reads the job's detail (and the cluster's size) and returns text.

// The advice of a failure as separate steps. Steps may arrive joined into one string with "; "
// after their own full stop ("Check X.; Then Y."), which read as ".;" when shown joined.
/** @param {unknown} solution */
export function solutionSteps(solution) {
  const parts = Array.isArray(solution) ? solution : solution ? [solution] : [];
  return parts.flatMap((part) => String(part).split(/(?<=[.!?])\s*;\s*/))
    .map((step) => step.trim()).filter(Boolean);
}

// The advice as one paragraph: each step a sentence.
/** @param {unknown} solution */
export function solutionText(solution) {
  return solutionSteps(solution).map((step) => (/[.!?]$/.test(step) ? step : `${step}.`)).join(" ");
}

/** @param {any} detail */
function tasksOf(detail) {
  return Object.entries(detail.taskRoles || {}).flatMap(([role, status]) =>
    ((status && status.taskStatuses) || []).map((/** @type {any} */ t) => ({ role, ...t })));
}

// A job that succeeded although some of its tasks failed: its completion rule allowed it.
/** @param {any} detail */
export function successDespiteFailures(detail) {
  const s = detail.jobStatus || {};
  if (s.state !== "SUCCEEDED") return null;
  const tasks = tasksOf(detail);
  const named = (/** @type {any[]} */ some) =>
    some.slice(0, 5).map((t) => `${t.role}[${t.taskIndex}]`).join(", ") + (some.length > 5 ? ", …" : "");
  const plural = (/** @type {number} */ n) => `${n} task${n === 1 ? "" : "s"}`;
  const failed = tasks.filter((t) => t.taskState === "FAILED");
  const stopped = tasks.filter((t) => t.taskState === "STOPPED");
  const rule = "enough of its tasks succeeded for its completion rule (a task role's completion.minSucceededInstances)";
  if (failed.length) {
    return `This job succeeded although ${plural(failed.length)} failed (${named(failed)}): ${rule}, ` +
      "so the job ended as succeeded without waiting for the others.";
  }
  if (stopped.length) {
    return `This job succeeded with ${plural(stopped.length)} stopped (${named(stopped)}): ${rule}, ` +
      "so the job ended and its other tasks were stopped.";
  }
  return null;
}

// A waiting job that asks more GPUs than the cluster has: it can never start as it is.
/**
 * @param {any} detail
 * @param {number | null} clusterGpus the GPUs of every node together; null when unknown
 */
export function neverFits(detail, clusterGpus) {
  const s = detail.jobStatus || {};
  if (s.state !== "WAITING" || clusterGpus === null) return null;
  const asked = Number(s.totalGpuNumber || 0);
  if (asked <= clusterGpus) return null;
  return `This job can never start as it is: it asks for ${asked} GPU${asked === 1 ? "" : "s"} in all, ` +
    `and the whole cluster has ${clusterGpus}. Stop it, and submit it again asking for at most ${clusterGpus}.`;
}

// A job its user (or an admin) stopped: said plainly, not as a failure.
/** @param {any} detail */
export function stoppedNotice(detail) {
  const s = detail.jobStatus || {};
  if (s.state !== "STOPPED") return null;
  return "This job was stopped on request (Stop on this page, the job list or the API); " +
    "its tasks were ended. Clone it to run it again.";
}

// The failure rules' advice says "the job is retried within its retry budget" whatever the job's
// budget: said as it is for this job instead. `budget` is the job's jobRetryCount, `retries` the
// retries it has had, `final` whether it has ended; an unknown budget (null) keeps the words.
const RETRIED = /the job is retried within its retry budget/i;

/**
 * @param {string[]} steps
 * @param {{ budget: number | null, retries: number, final: boolean }} job
 * @returns {string[]}
 */
export function trueToBudget(steps, { budget, retries, final }) {
  if (budget === null || !Number.isInteger(budget)) return steps;
  const times = (/** @type {number} */ n) => `${n} time${n === 1 ? "" : "s"}`;
  let said;
  if (budget === 0) {
    said = "The job is not retried: its jobRetryCount is 0, so this first failure ended it. " +
      "To have such a failure retried, set jobRetryCount (for example jobRetryCount: 2) and submit the job again.";
  } else if (retries >= budget) {
    said = `The job was retried ${times(retries)}, its whole retry budget (jobRetryCount ${budget}), ` +
      "and failed each time: fix the error before submitting it again.";
  } else if (final) {
    said = `The job ended after ${retries} of the ${budget} retries its jobRetryCount allows.`;
  } else {
    said = `The job is retried: ${times(retries)} so far, of at most ${budget} (jobRetryCount); ` +
      "if each attempt fails alike, fix that error.";
  }
  return steps.map((step) => {
    const at = step.search(RETRIED);
    if (at < 0) return step;
    const before = step.slice(0, at).replace(/[\s;,]+$/, "");
    return before ? `${/[.!?]$/.test(before) ? before : `${before}.`} ${said}` : said;
  });
}
