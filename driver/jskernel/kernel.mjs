// Notebook-style Node.js kernel for the sandbox driver: JavaScript and
// TypeScript cells in one persistent global scope.
//
// Started by the Go driver as `node kernel.mjs` and speaking the same kernel
// protocol as the Python kernel (driver/pykernel/kernel.py): fd 0 =
// /dev/null, fd 1/2 = the user's raw stdout/stderr pipes, fd 3 = control in
// (first a hello {"nonce"}, then one JSON request per line: {"id", "code",
// "language", "env", "setenv"}: env is set for the request only, setenv
// for good before it, the sandbox's environment), fd 4 = control out (one JSON message per line: ready /
// result / error / done). Before every message that carries "sync": N, the
// marker "\x00\x1eSBX-SYNC:<nonce>:<N>\x1e\x00" is written to the stdout and
// stderr pipes, after all output written before it (see "output" below), so
// the driver can order output against messages.
//
// A cell is parsed with acorn and rewritten so that it runs as the body of
// an async function (top-level await) whose top-level declarations (var,
// let, const, function, class) become globals and so outlive the cell;
// static `import` statements become `await import()` resolved from the
// working directory (node: built-ins, relative paths, node_modules). The
// value of a trailing expression statement is the cell's result. A
// TypeScript cell is first transpiled (the typescript module's
// transpileModule: no type checking), then treated the same way.
//
// SIGINT (timeout, interrupt) stops a cell: its synchronous part runs with
// vm's breakOnSigint, so even a busy loop there ends with an Interrupted
// error; a cell waiting on a promise is abandoned with the same error (its
// pending timers keep running). A busy loop after an `await` cannot be
// interrupted by Node: the driver's grace SIGKILL ends the kernel, and its
// globals are lost (reported as state_lost).
import fs from "node:fs";
import net from "node:net";
import path from "node:path";
import util from "node:util";
import vm from "node:vm";
import { builtinModules, createRequire } from "node:module";
import { fileURLToPath, pathToFileURL } from "node:url";

let cellInterrupt = null; // rejects the running cell's wait on SIGINT
// Installed first: a SIGINT while idle must not kill the kernel.
process.on("SIGINT", () => {
  if (cellInterrupt) cellInterrupt();
});

const CTL_OUT = 4;
const KFILE = fileURLToPath(import.meta.url);
const MAX_PLAIN = 1 << 20;
const kreq = createRequire(import.meta.url);
let NONCE = "";
let sync = 0;
let curId = null;
let cell = 0;
let ts = null; // the typescript module, loaded at the first TypeScript cell

function loadModule(name, dirs) {
  try {
    return kreq(name);
  } catch {}
  for (const d of dirs) {
    try {
      return kreq(d);
    } catch {}
  }
  return null;
}
const MODULE_DIRS = (name) => [
  "/usr/share/nodejs/" + name,
  "/usr/lib/nodejs/" + name,
  "/usr/local/lib/node_modules/" + name,
  "/usr/lib/node_modules/" + name,
];
const acorn = loadModule("acorn", MODULE_DIRS("acorn"));

const pause = new Int32Array(new SharedArrayBuffer(4));
function writeAll(fd, buf) {
  let off = 0;
  while (off < buf.length) {
    try {
      off += fs.writeSync(fd, buf, off, buf.length - off);
    } catch (e) {
      // Only the fallback of openOut writes to a descriptor that may be
      // non-blocking.
      if (e.code !== "EAGAIN") throw e;
      Atomics.wait(pause, 0, 0, 1);
    }
  }
}

// ------------------------------------------------------------------- output
// The markers must follow all of a command's output in its pipe. Node's own
// process.stdout and process.stderr, on a pipe, are libuv streams: they make
// the pipe non-blocking and, once it is full, keep what the code printed in
// a queue in memory that the event loop writes later. A marker written
// meanwhile overtook that queue: `done` came before most of a large output,
// which then went to the next command. So output is written as the Python
// kernel's is (python -u): synchronously, before write() returns.
//
//  - OUT holds private, blocking, close-on-exec descriptors of the two
//    pipes (opened anew through /proc, so that O_NONBLOCK set on fd 1 or 2
//    by anyone does not reach them, and closing fd 1 or 2 does not end them).
//  - process.stdout and process.stderr keep their objects (events,
//    callbacks, cork, isTTY), but their _write writes the chunk to OUT at
//    once, blocking while the pipe is full: nothing is ever queued, and a
//    write's callback (on the next tick) means its bytes are in the pipe.
//  - fd 1 and 2 are made blocking again, as the driver gave them: on the
//    non-blocking pipe a user's fs.writeSync(1, …) of more than the pipe
//    holds wrote a part and returned its length. (Before each command the
//    driver clears O_NONBLOCK again, which a child may have left set.)
//  - send() uncorks the streams, then writes the marker to OUT after them.
function openOut(fd) {
  try {
    // A pipe opened anew is a new open file description of the same pipe;
    // any other file (not the driver's pipes) is written as it is.
    if (fs.fstatSync(fd).isFIFO()) return fs.openSync(`/proc/self/fd/${fd}`, fs.constants.O_WRONLY);
  } catch {}
  return fd;
}
const OUT = [openOut(1), openOut(2)];
const STD = [process.stdout, process.stderr];

STD.forEach((s, i) => {
  s._writev = null; // each chunk through _write, even after uncork()
  s._write = (chunk, encoding, cb) => {
    try {
      writeAll(OUT[i], Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, encoding));
    } catch {} // the driver is gone: the control pipe says so
    cb();
  };
  try {
    if (s._handle && typeof s._handle.setBlocking === "function") s._handle.setBlocking(true);
  } catch {}
});

// flushStd writes out what the user's code left corked; all else is in the
// pipes already.
function flushStd() {
  for (const s of STD) {
    try {
      while (s.writableCorked) s.uncork();
    } catch {}
  }
}

// send writes one sync'ed message for the running request (dropped while
// idle); end marks `done`, after which nothing more is sent for it.
function send(type, fields, end) {
  if (curId === null) return;
  flushStd();
  sync++;
  const msg = JSON.stringify({ type, id: curId, sync, ...fields }) + "\n";
  const marker = Buffer.from(`\x00\x1eSBX-SYNC:${NONCE}:${sync}\x1e\x00`, "latin1");
  for (const fd of OUT) {
    try {
      writeAll(fd, marker);
    } catch {}
  }
  try {
    writeAll(CTL_OUT, Buffer.from(msg, "utf8"));
  } catch {
    process.exit(1); // the driver is gone
  }
  if (end) curId = null;
}

function trunc(s) {
  return s.length <= MAX_PLAIN ? s : s.slice(0, MAX_PLAIN) + "…[truncated]";
}

// Background failures (a timer's callback throwing, a promise nobody
// awaited) are printed, like Node's own REPL does; they never end the kernel.
function background(kind, e) {
  let text;
  try {
    text = e instanceof Error ? e.stack || String(e) : util.inspect(e);
  } catch {
    text = "<unprintable error>";
  }
  try {
    writeAll(OUT[1], Buffer.from(`${kind}: ${text}\n`, "utf8"));
  } catch {}
}
process.on("uncaughtException", (e) => background("Uncaught", e));
process.on("unhandledRejection", (e) => background("Unhandled promise rejection", e));

// ------------------------------------------------------------------ imports
const cwdRequire = () => createRequire(path.join(process.cwd(), "__sandboxd_cell__.js"));

// importFrom resolves a specifier like a script in the working directory
// would: built-ins as they are, relative paths from the cwd, packages from
// node_modules (and Debian's global module directories, through require).
async function importFrom(spec) {
  if (typeof spec !== "string") return import(spec);
  if (spec.startsWith("node:") || builtinModules.includes(spec)) return import(spec);
  if (spec.startsWith("./") || spec.startsWith("../") || spec.startsWith("/")) {
    return import(pathToFileURL(path.resolve(process.cwd(), spec)).href);
  }
  if (/^[a-z][a-z0-9+.-]*:/i.test(spec)) return import(spec); // file:, data:
  let resolved;
  try {
    resolved = cwdRequire().resolve(spec);
  } catch {
    return import(spec);
  }
  return import(pathToFileURL(resolved).href);
}
globalThis.__sandboxd_import__ = importFrom;
if (typeof globalThis.require === "undefined") globalThis.require = cwdRequire();

// ------------------------------------------------------------------ rewrite
// rewrite turns a cell into a script: an async arrow function called at
// once, with top-level declarations made globals and imports made dynamic.
// Line numbers are kept (a replaced statement keeps its newlines), so stack
// traces point at the user's lines.
function rewrite(code) {
  const ast = acorn.parse(code, {
    ecmaVersion: "latest",
    sourceType: "script",
    allowAwaitOutsideFunction: true,
    allowReturnOutsideFunction: true,
    allowImportExportEverywhere: true,
    allowHashBang: true,
  });
  const edits = []; // {start, end, text}, non-overlapping
  const prologue = [];
  const nl = (node) => "\n".repeat((code.slice(node.start, node.end).match(/\n/g) || []).length);
  // blank is the text from a to b as spaces (newlines kept): what is
  // removed keeps the columns of what follows.
  const blank = (a, b) => code.slice(a, b).replace(/[^\n]/g, " ");
  let n = 0;
  const body = ast.body;
  const declare = (node) => {
    if (node.type === "VariableDeclaration") {
      const first = node.declarations[0];
      edits.push({ start: node.start, end: first.start, text: blank(node.start, first.start) });
      for (const d of node.declarations) {
        if (d.id.type !== "Identifier") {
          edits.push({ start: d.start, end: d.start, text: "(" });
          edits.push({ start: d.end, end: d.end, text: ")" });
        } else if (!d.init) {
          const name = d.id.name;
          const keep = node.kind === "var" ? `(typeof ${name} === "undefined" ? undefined : ${name})` : "undefined";
          edits.push({ start: d.end, end: d.end, text: ` = ${keep}` });
        }
      }
      // `let x = 1` then `(a) => ...` on the next line must stay apart.
      if (code[node.end - 1] !== ";") edits.push({ start: node.end, end: node.end, text: ";" });
    } else if (node.type === "FunctionDeclaration") {
      prologue.push(`globalThis[${JSON.stringify(node.id.name)}] = ${node.id.name};`);
    } else if (node.type === "ClassDeclaration") {
      edits.push({ start: node.start, end: node.start, text: `${node.id.name} = ` });
      edits.push({ start: node.end, end: node.end, text: ";" });
    }
  };
  body.forEach((node, i) => {
    switch (node.type) {
      case "ImportDeclaration": {
        const m = `__sandboxd_m${n++}`;
        let text = `const ${m} = await __sandboxd_import__(${JSON.stringify(node.source.value)});`;
        for (const s of node.specifiers) {
          const local = s.local.name;
          if (s.type === "ImportDefaultSpecifier") text += ` ${local} = ("default" in ${m}) ? ${m}.default : ${m};`;
          else if (s.type === "ImportNamespaceSpecifier") text += ` ${local} = ${m};`;
          else {
            const imported = s.imported.type === "Identifier" ? s.imported.name : s.imported.value;
            text += ` ${local} = ${m}[${JSON.stringify(imported)}];`;
          }
        }
        edits.push({ start: node.start, end: node.end, text: text + nl(node) });
        break;
      }
      case "ExportNamedDeclaration":
        if (node.declaration) {
          edits.push({ start: node.start, end: node.declaration.start, text: blank(node.start, node.declaration.start) });
          declare(node.declaration);
        } else {
          edits.push({ start: node.start, end: node.end, text: nl(node) });
        }
        break;
      case "ExportAllDeclaration":
        edits.push({ start: node.start, end: node.end, text: nl(node) });
        break;
      case "ExportDefaultDeclaration":
        edits.push({ start: node.start, end: node.declaration.start, text: blank(node.start, node.declaration.start) });
        if (node.declaration.type === "FunctionDeclaration" || node.declaration.type === "ClassDeclaration") {
          if (node.declaration.id) declare(node.declaration);
        } else if (i === body.length - 1) {
          edits.push({ start: node.declaration.start, end: node.declaration.start, text: "return {__sandboxd_value__: (" });
          edits.push({ start: node.declaration.end, end: node.declaration.end, text: ")};" });
        }
        break;
      case "ExpressionStatement":
        if (i === body.length - 1 && !node.directive) {
          // The statement, not its expression: acorn leaves a parenthesised
          // expression's parentheses out of its range.
          const end = code[node.end - 1] === ";" ? node.end - 1 : node.end;
          edits.push({ start: node.start, end: node.start, text: "return {__sandboxd_value__: (" });
          edits.push({ start: end, end: end, text: ")};" });
        }
        break;
      default:
        declare(node);
    }
  });
  // Back to front; of two insertions at one place, the later one first, so
  // that they end up in the order they were made.
  edits.forEach((e, i) => (e.i = i));
  edits.sort((a, b) => b.start - a.start || b.end - a.end || b.i - a.i);
  let out = code;
  for (const e of edits) out = out.slice(0, e.start) + e.text + out.slice(e.end);
  if (out.startsWith("#!")) out = "//" + out;
  // The wrapper's head has a line of its own (lineOffset -1 hides it), so
  // columns on the cell's first line stay the user's.
  return `(async () => {${prologue.join(" ")}\n${out}\n})()`;
}

function loadTypeScript() {
  if (!ts) ts = loadModule("typescript", MODULE_DIRS("typescript"));
  if (!ts) throw new Error("the TypeScript compiler (typescript module) is not installed");
  return ts;
}

// transpile turns a TypeScript cell into JavaScript; syntax errors are
// reported, types are not checked.
function transpile(code, fname) {
  const t = loadTypeScript();
  const out = t.transpileModule(code, {
    fileName: "cell.ts",
    reportDiagnostics: true,
    compilerOptions: {
      target: t.ScriptTarget.ES2022,
      module: t.ModuleKind.ESNext,
      // Imports a later cell uses must survive even when this one does not.
      isolatedModules: true,
      preserveValueImports: true,
      sourceMap: false,
      inlineSourceMap: false,
    },
  });
  const errs = (out.diagnostics || []).filter((d) => d.category === t.DiagnosticCategory.Error);
  if (errs.length) {
    const d = errs[0];
    let where = fname;
    if (d.file && d.start !== undefined) {
      const { line, character } = d.file.getLineAndCharacterOfPosition(d.start);
      where = `${fname}:${line + 1}:${character + 1}`;
    }
    const e = new SyntaxError(`${t.flattenDiagnosticMessageText(d.messageText, "\n")} (${where})`);
    e.sandboxdTraceback = [`${where}\n`];
    throw e;
  }
  return out.outputText;
}

// ---------------------------------------------------------------- execution
let wrapperFrame = null;
class Interrupted extends Error {}
Object.defineProperty(Interrupted.prototype, "name", { value: "Interrupted" });

async function execCell(code, language) {
  const fname = `<cell-${cell}>`;
  let js = language === "typescript" ? transpile(code, fname) : code;
  let src;
  try {
    src = rewrite(js);
  } catch (e) {
    if (e instanceof SyntaxError && e.loc) {
      const line = js.split("\n")[e.loc.line - 1] || "";
      const err = new SyntaxError(`${e.message.replace(/ \(\d+:\d+\)$/, "")} (${fname}:${e.loc.line}:${e.loc.column + 1})`);
      err.sandboxdTraceback = [`${fname}:${e.loc.line}\n`, `${line}\n`, `${" ".repeat(e.loc.column)}^\n`];
      throw err;
    }
    throw e;
  }
  // The wrapper's closing line (its call) is no frame of the user's.
  wrapperFrame = `(${fname}:${js.split("\n").length + 1}:`;
  const script = new vm.Script(src, { filename: fname, lineOffset: -1, importModuleDynamically: (spec) => importFrom(spec) });
  const stop = new Promise((_, reject) => {
    cellInterrupt = () => reject(new Interrupted("the cell was interrupted (SIGINT)"));
  });
  try {
    let p;
    try {
      p = script.runInThisContext({ breakOnSigint: true, displayErrors: false });
    } catch (e) {
      if (e && e.code === "ERR_SCRIPT_EXECUTION_INTERRUPTED") throw new Interrupted("the cell was interrupted (SIGINT)");
      throw e;
    }
    return await Promise.race([p, stop]);
  } finally {
    cellInterrupt = null;
  }
}

function inspect(v) {
  try {
    return trunc(util.inspect(v, { colors: false, depth: 4, maxArrayLength: 200, maxStringLength: 100000, breakLength: 100 }));
  } catch {
    return "<uninspectable value>";
  }
}

function report(e) {
  let ename = "Error";
  let evalue = "";
  let tb = [];
  if (e instanceof Error) {
    try {
      ename = e.name || (e.constructor && e.constructor.name) || "Error";
      evalue = String(e.message ?? "");
      if (e.sandboxdTraceback) {
        tb = e.sandboxdTraceback;
      } else if (!(e instanceof Interrupted)) {
        const lines = String(e.stack || "").split("\n");
        // The kernel's own frames and Node's internals are not the user's.
        const wrapper = wrapperFrame ? wrapperFrame.slice(1) : null;
        tb = lines
          .filter((l) => !l.includes(KFILE) && !l.includes("node:internal") && !l.includes("node:vm"))
          .filter((l) => !wrapper || !l.trim().startsWith("at " + wrapper))
          .map((l) => l + "\n");
      }
    } catch {
      ename = "Error";
    }
  } else {
    ename = "Uncaught";
    evalue = inspect(e);
  }
  send("error", { ename: trunc(String(ename)), evalue: trunc(evalue), traceback: tb.map(trunc) });
}

function setEnv(env) {
  const saved = new Map();
  for (const [k, v] of Object.entries(env || {})) {
    saved.set(k, Object.prototype.hasOwnProperty.call(process.env, k) ? process.env[k] : undefined);
    process.env[k] = v;
  }
  return saved;
}

function restoreEnv(saved) {
  for (const [k, v] of saved) {
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
}

async function run(req) {
  curId = req.id;
  cell++;
  setEnv(req.setenv); // for good: never restored
  const saved = setEnv(req.env);
  let status = "ok";
  try {
    const out = await execCell(req.code, req.language);
    if (out && typeof out === "object" && "__sandboxd_value__" in out && out.__sandboxd_value__ !== undefined) {
      globalThis._ = out.__sandboxd_value__;
      send("result", { data: { "text/plain": inspect(out.__sandboxd_value__) } });
    }
  } catch (e) {
    status = "error";
    try {
      report(e);
    } catch {}
  }
  restoreEnv(saved);
  // Like Jupyter's execution_count: cells run by this kernel, this one
  // included (JavaScript and TypeScript count together).
  send("done", { status, execution_count: cell }, true);
}

// --------------------------------------------------------------------- main
const ctl = new net.Socket({ fd: 3, readable: true, writable: false });
ctl.setEncoding("utf8");
let pending = "";
const lines = [];
let wake = null;
ctl.on("data", (chunk) => {
  pending += chunk;
  let i;
  while ((i = pending.indexOf("\n")) >= 0) {
    lines.push(pending.slice(0, i));
    pending = pending.slice(i + 1);
  }
  if (wake && lines.length) {
    const w = wake;
    wake = null;
    w();
  }
});
// The driver closed fd 3: quit now, even if timers are pending.
ctl.on("end", () => process.exit(0));
ctl.on("error", () => process.exit(0));

async function nextLine() {
  while (!lines.length) await new Promise((r) => (wake = r));
  return lines.shift();
}

async function main() {
  try {
    const hello = JSON.parse(await nextLine());
    if (typeof hello.nonce !== "string" || !/^[0-9a-f]{16,}$/.test(hello.nonce)) throw new Error("bad nonce");
    NONCE = hello.nonce;
  } catch {
    process.exit(2); // not started by the driver
  }
  if (!acorn) {
    writeAll(OUT[1], Buffer.from("sandboxd kernel: the acorn module (JavaScript parser) is not installed\n"));
    process.exit(3);
  }
  writeAll(CTL_OUT, Buffer.from(JSON.stringify({ type: "ready", pid: process.pid }) + "\n"));
  for (;;) {
    const line = await nextLine();
    if (!line.trim()) continue;
    let req = null;
    try {
      req = JSON.parse(line);
      if (typeof req.id !== "string" || typeof req.code !== "string") throw new Error("'id' and 'code' must be strings");
      for (const key of ["env", "setenv"]) {
        const env = req[key] || {};
        if (typeof env !== "object" || Array.isArray(env) || !Object.values(env).every((v) => typeof v === "string")) {
          throw new Error(`'${key}' must map strings to strings`);
        }
      }
    } catch (e) {
      curId = req && typeof req.id === "string" ? req.id : "";
      send("error", { ename: "ProtocolError", evalue: `bad request: ${e.message}`, traceback: [] });
      send("done", { status: "error" }, true);
      continue;
    }
    await run(req);
  }
}

main();
