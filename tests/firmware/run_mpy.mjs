// Run a Python script inside real MicroPython (the WebAssembly build from npm) under Node.
//
//   node tests/firmware/run_mpy.mjs [--heap BYTES] [--copy HOSTDIR:MPDIR]...
//                                    [--fetch MPFILE:HOSTFILE]... [--step NAME] SCRIPT [ARGS...]
//
// Each --copy puts a host directory tree into MicroPython's in-memory filesystem (e.g. the
// firmware at /fw, the golden vectors at /vectors); SCRIPT runs as __main__ with sys.argv set
// to [SCRIPT, ...ARGS]. Its stdout and stderr pass through; each --fetch copies a file the
// script wrote back to the host (MicroPython's stdout goes out byte by byte, slow for MBs). The exit code is 0 when the script
// ends normally, 1 when it raises (the traceback is printed on stderr).
// With --step NAME, the function NAME the script defined is then called from JavaScript until
// it returns a false value: this build's gc.collect() only asks for a collection, which runs
// when control is back in JavaScript, so each call starts with only live objects on the heap
// (gc.mem_alloc() at its start is the live heap; inside one call it counts garbage too).
import { readFileSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadMicroPython } from "@micropython/micropython-webassembly-pyscript/micropython.mjs";

const argv = process.argv.slice(2);
let heap = 64 * 1024 * 1024;
const copies = [];
const fetches = [];
let step = null;
while (argv.length && argv[0].startsWith("--")) {
  const flag = argv.shift();
  if (flag === "--heap") heap = Number(argv.shift());
  else if (flag === "--copy") copies.push(argv.shift());
  else if (flag === "--fetch") fetches.push(argv.shift());
  else if (flag === "--step") step = argv.shift();
  else throw new Error(`unknown option ${flag}`);
}
if (!argv.length) throw new Error("usage: run_mpy.mjs [--heap N] [--copy HOST:MP]... SCRIPT [ARGS]");
const [script, ...args] = argv;

const mp = await loadMicroPython({
  heapsize: heap,
  linebuffer: false,
  stdout: (bytes) => process.stdout.write(bytes),
  stderr: (bytes) => process.stderr.write(bytes),
});

function mkdirs(path) {
  let cur = "";
  for (const part of path.split("/").filter(Boolean)) {
    cur += "/" + part;
    try { mp.FS.mkdir(cur); } catch (e) { /* exists */ }
  }
}

function copyTree(host, target) {
  mkdirs(target);
  for (const name of readdirSync(host)) {
    if (name === "__pycache__" || name.startsWith(".")) continue;
    const src = join(host, name);
    const dst = `${target}/${name}`;
    if (statSync(src).isDirectory()) copyTree(src, dst);
    else mp.FS.writeFile(dst, readFileSync(src));
  }
}

for (const spec of copies) {
  const i = spec.lastIndexOf(":");
  copyTree(spec.slice(0, i), spec.slice(i + 1));
}
mp.FS.writeFile("/__main_script__.py", readFileSync(script));
mp.globals.set("_argv", [script, ...args]);
let code = 0;
try {
  mp.runPython(
    "import sys\nsys.argv[:] = list(_argv)\ndel _argv\n" +
    "_g = {'__name__': '__main__'}\n" +
    "exec(open('/__main_script__.py').read(), _g)\n");
  if (step !== null) {
    const fn = mp.globals.get("_g")[step];
    while (fn()) { /* the heap is collected between calls */ }
  }
} catch (err) {
  process.stderr.write(String(err && err.message ? err.message : err) + "\n");
  code = 1;
}
for (const spec of fetches) {
  const i = spec.indexOf(":");
  try {
    writeFileSync(spec.slice(i + 1), mp.FS.readFile(spec.slice(0, i)));
  } catch (err) {
    process.stderr.write(`cannot fetch ${spec.slice(0, i)}: ${err}\n`);
    code = 1;
  }
}
process.stdout.write("", () => process.exit(code));
