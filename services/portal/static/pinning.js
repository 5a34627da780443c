// @ts-check
// A job run again on the same bits: the image digests its tasks ran (imageDigest in the job's
// detail, where a container engine ran them), and the edits that pin its docker image
// prerequisites to them. Pure: a detail and a config in, edits out (libs/protocol/pinning.py
// does the same for `pai job clone --pin-images`).

/**
 * Each task role's image digest, from the first of its tasks that names one.
 * @param {any} detail
 * @returns {Record<string, string>}
 */
export function digestsByRole(detail) {
  /** @type {Record<string, string>} */
  const found = {};
  for (const [role, status] of Object.entries((detail && detail.taskRoles) || {})) {
    for (const task of (status && status.taskStatuses) || []) {
      if (typeof task.imageDigest === "string" && task.imageDigest && !(role in found)) found[role] = task.imageDigest;
    }
  }
  return found;
}

/**
 * Edits (YAML paths and values) pinning each role's dockerimage prerequisite to its digest. A
 * prerequisite two roles ran at different digests is left as it is and named in `unpinned`.
 * @param {any} config the job's protocol as an object
 * @param {Record<string, string>} digests
 * @returns {{ edits: { parts: (string | number)[], value: string }[], unpinned: string[] }}
 */
export function pinEdits(config, digests) {
  const prerequisites = Array.isArray(config && config.prerequisites) ? config.prerequisites : [];
  /** @type {Map<string, Set<string>>} */
  const wanted = new Map();
  for (const [role, spec] of Object.entries((config && config.taskRoles) || {})) {
    const digest = digests[role];
    const name = spec && spec.dockerImage;
    if (!digest || typeof name !== "string") continue;
    if (!wanted.has(name)) wanted.set(name, new Set());
    wanted.get(name)?.add(digest);
  }
  const edits = [];
  const unpinned = [];
  for (const [name, found] of wanted) {
    const index = prerequisites.findIndex((p) => p && p.type === "dockerimage" && p.name === name);
    if (index < 0) continue;
    if (found.size === 1) edits.push({ parts: ["prerequisites", index, "uri"], value: [...found][0] });
    else unpinned.push(name);
  }
  return { edits, unpinned };
}
