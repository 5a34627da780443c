// Unit tests of pinning a cloned job's images (services/portal/static/pinning.js).
import assert from "node:assert/strict";
import { test } from "node:test";

import { digestsByRole, pinEdits } from "../../../services/portal/static/pinning.js";

const A = "localhost/app@sha256:" + "a".repeat(64);
const B = "localhost/app@sha256:" + "b".repeat(64);
const detail = (byRole) => ({
  taskRoles: Object.fromEntries(Object.entries(byRole).map(([role, digests]) => [
    role, { taskStatuses: digests.map((imageDigest, taskIndex) => ({ taskIndex, imageDigest })) },
  ])),
});
const config = {
  prerequisites: [{ name: "data", type: "data" }, { name: "img", type: "dockerimage", uri: "app:latest" }],
  taskRoles: { a: { dockerImage: "img" }, b: { dockerImage: "img" } },
};

test("each role's digest is the first its tasks name", () => {
  assert.deepEqual(digestsByRole(detail({ a: [null, A], b: [B, A] })), { a: A, b: B });
  assert.deepEqual(digestsByRole({}), {});
});

test("a prerequisite every role ran at one digest is pinned at its own index", () => {
  assert.deepEqual(pinEdits(config, { a: A, b: A }), {
    edits: [{ parts: ["prerequisites", 1, "uri"], value: A }],
    unpinned: [],
  });
});

test("one that ran at two digests is left and named; roles without a digest change nothing", () => {
  assert.deepEqual(pinEdits(config, { a: A, b: B }), { edits: [], unpinned: ["img"] });
  assert.deepEqual(pinEdits(config, {}), { edits: [], unpinned: [] });
});
