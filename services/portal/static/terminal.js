// @ts-check
// A shell in a running task, in the job page: xterm.js (the npm package, pinned in
// package-lock.json and served from its install under /static/v.../lib/xterm/) over the API's
// exec WebSocket (`pai job exec -it`'s), through the portal's own address. Messages: binary frames
// whose first byte names the stream (0 input, 1 output, 2 errors), text frames of JSON
// ({"type": "started" | "exit" | "error" | "resize"}), as libs/web/exec_stream.py says.

const STDIN = 0;
// The shell the task has: bash where its image has one, else sh.
const SHELL = ["/bin/sh", "-c", "if command -v bash >/dev/null 2>&1; then exec bash; else exec sh; fi"];

/** @type {Promise<any> | null} */
let xterm = null;

function loadXterm() {
  if (!xterm) {
    const css = document.createElement("link");
    css.rel = "stylesheet";
    css.href = new URL("lib/xterm/css/xterm.css", import.meta.url).href;
    document.head.append(css);
    xterm = import(new URL("lib/xterm/lib/xterm.mjs", import.meta.url).href);
  }
  return xterm;
}

/**
 * Opens a terminal in `box` on task `role`[`index`] of job `job` (USER~NAME); `say` tells how it
 * goes. Returns a function that closes it.
 * @param {HTMLElement} box
 * @param {{ job: string, role: string, index: string | number, csrf: string, say: (text: string) => void }} where
 * @returns {Promise<() => void>}
 */
export async function openTerminal(box, { job, role, index, csrf, say }) {
  const { Terminal } = await loadXterm();
  // As many columns as the page's width holds (about 9 pixels each), 40 at the least.
  const width = (box.parentElement || box).clientWidth;
  const cols = Math.max(40, Math.min(200, Math.floor((width - 16) / 9)));
  const term = new Terminal({ cols, rows: 24, cursorBlink: true, scrollback: 2000 });
  box.replaceChildren();
  term.open(box);
  const [user, ...name] = job.split("~");
  const query = new URLSearchParams([...SHELL.map((part) => ["command", part]),
    ["tty", "true"], ["rows", String(term.rows)], ["cols", String(term.cols)], ["csrf", csrf]]);
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const path = `/api/v2/jobs/${encodeURIComponent(user)}~${encodeURIComponent(name.join("~"))}` +
    `/tasks/${encodeURIComponent(role)}/${encodeURIComponent(String(index))}/exec`;
  const socket = new WebSocket(`${scheme}://${location.host}${path}?${query}`);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();
  let opened = false;
  say(`connecting to ${role}[${index}]…`);
  socket.addEventListener("open", () => {
    opened = true;
    box.dataset.terminal = "open";
    say(`a shell in ${role}[${index}]`);
    term.focus();
  });
  socket.addEventListener("message", (event) => {
    if (typeof event.data !== "string") {
      const bytes = new Uint8Array(event.data);
      if (bytes.length > 1) term.write(bytes.subarray(1));
      return;
    }
    let said = null;
    try { said = JSON.parse(event.data); } catch { return; }
    if (said && said.type === "exit") say(`the shell ended (exit code ${said.code})`);
    else if (said && said.type === "error") say(String(said.message || "the shell could not start"));
  });
  socket.addEventListener("close", () => {
    box.dataset.terminal = "closed";
    if (!opened) say(`no shell in ${role}[${index}]: the task does not run, or it may not be entered by you`);
  });
  const input = term.onData((/** @type {string} */ data) => {
    if (socket.readyState !== WebSocket.OPEN) return;
    const bytes = encoder.encode(data);
    const frame = new Uint8Array(bytes.length + 1);
    frame[0] = STDIN;
    frame.set(bytes, 1);
    socket.send(frame);
  });
  const resized = term.onResize((/** @type {{cols: number, rows: number}} */ size) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "resize", rows: size.rows, cols: size.cols }));
  });
  return () => {
    input.dispose();
    resized.dispose();
    socket.close();
    term.dispose();
    box.replaceChildren();
    delete box.dataset.terminal;
  };
}
