// @ts-check
// A task's log as the job page follows it: pieces read from the API by byte offset, each added
// once however the reads overlap, and the lines a search keeps. Pure: no DOM, no fetch.

/**
 * @typedef {object} LogPiece
 * @property {string} content the piece's text
 * @property {number} offset the byte where it starts
 * @property {number} [nextOffset] the byte after it (where the next read starts)
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// What a piece adds to a log shown up to byte `shownEnd`, and where the shown log then ends. A
// piece read twice (two reads asked from the same offset) adds nothing the second time; one that
// starts before the shown end adds only its bytes past it; one that starts past it (a gap: the
// log was read from elsewhere) adds nothing, and the next read asks from the shown end again.
/**
 * @param {number} shownEnd
 * @param {LogPiece} piece
 * @returns {{ text: string, end: number }}
 */
export function unseen(shownEnd, piece) {
  const content = piece.content || "";
  const start = Number(piece.offset || 0);
  const bytes = encoder.encode(content);
  const end = Number.isFinite(piece.nextOffset) ? Number(piece.nextOffset) : start + bytes.length;
  if (start > shownEnd || end <= shownEnd) return { text: "", end: shownEnd };
  if (start === shownEnd) return { text: content, end };
  return { text: decoder.decode(bytes.slice(shownEnd - start)), end };
}

// The lines of `text` that contain `query` (letters of either case alike); all of it for an empty
// query. A line cut at the end of what has arrived is a line too.
/**
 * @param {string} text
 * @param {string} query
 * @returns {{ text: string, count: number }}
 */
export function matchingLines(text, query) {
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  if (!query) return { text, count: lines.length };
  const wanted = query.toLowerCase();
  const kept = lines.filter((line) => line.toLowerCase().includes(wanted));
  return { text: kept.map((line) => `${line}\n`).join(""), count: kept.length };
}

// A file name for a downloaded log: the job, the task and the output, in characters any system
// keeps in a name.
/**
 * @param {string} job
 * @param {string} role
 * @param {string | number} index
 * @param {string} file
 */
export function logFileName(job, role, index, file) {
  return `${job}-${role}-${index}-${file}.log`.replace(/[^A-Za-z0-9._-]+/g, "_");
}
