// @ts-check
// When an open job list reads the jobs again: the rules over the platform's events, and a
// coalescer, so a busy cluster never costs more than one list read per interval (REST allows
// each user a limited number of job lists a minute). Pure: no DOM, no network; time comes in.

// The events that can change what a job list shows (its rows, their state, retries, times). The
// event stream is asked for these only.
export const LIST_EVENT_TYPES = [
  "job.submitted", "job.scheduled", "job.pending", "job.preempting", "job.retrying", "job.completed",
  "job.stop_requested", "task.started",
];

// Orderings by what never changes once a job is submitted: a job not on the page cannot move
// onto it unless it is new.
const STABLE_ORDERS = new Set(["submissionTime", "jobName", "username", "vc", "totalTaskNumber", "totalGpuNumber", "jobPriority"]);

/**
 * Whether a list showing `shown` (job id -> state) must be read again after `event`.
 * `event` is the platform's event (type, job_id), or null when the stream does not say what
 * happened (it connected again, or the portal compared lists itself): then always.
 * @param {{type?: string, job_id?: string} | null} event
 * @param {Map<string, string>} shown
 * @param {{order: string, filters: Record<string, string>}} view
 * @returns {boolean}
 */
export function listMoved(event, shown, view) {
  if (!event || typeof event.type !== "string") return true;
  if (event.type === "job.submitted") return true;
  if (!LIST_EVENT_TYPES.includes(event.type)) return false;
  const field = view.order.split(",")[0];
  // A job elsewhere can enter the page when the page is chosen by state or ordered by a field
  // that changes as jobs run.
  const mayEnter = Boolean(view.filters.state) || !STABLE_ORDERS.has(field);
  const state = event.job_id ? shown.get(event.job_id) : undefined;
  if (state === undefined) return mayEnter;
  // A task's start changes the list only for the first task: the job goes from waiting to running.
  if (event.type === "task.started") return state === "WAITING";
  return true;
}

/**
 * Coalesces requests to read: at most one read every `gapMs`, never two at once, and one more
 * after `settleMs` of quiet (an event can arrive before REST's read model has applied it).
 * `now` and `later` are the clock and the timer (setTimeout in the page, a fake one in tests).
 * @param {() => Promise<void>} read
 * @param {{gapMs: number, settleMs: number, now: () => number, later: (fn: () => void, ms: number) => any, cancel: (handle: any) => void}} options
 */
export function coalescer(read, { gapMs, settleMs, now, later, cancel }) {
  let last = -Infinity;
  let running = false;
  let wanted = false;
  /** @type {any} */
  let timer = null;
  /** @type {any} */
  let settle = null;

  function kick() {
    if (running || timer !== null || !wanted) return;
    const wait = last + gapMs - now();
    if (wait > 0) { timer = later(() => { timer = null; kick(); }, wait); return; }
    wanted = false;
    running = true;
    last = now();
    read().catch(() => {}).finally(() => { running = false; kick(); });
  }

  return {
    // Something changed: read soon, and once more when things are quiet.
    request() {
      wanted = true;
      kick();
      if (settle !== null) cancel(settle);
      settle = later(() => { settle = null; wanted = true; kick(); }, settleMs);
    },
    // Read at once (the user changed the page), still never two at a time.
    now() {
      wanted = true;
      if (timer !== null) { cancel(timer); timer = null; }
      last = -Infinity;
      kick();
    },
  };
}
