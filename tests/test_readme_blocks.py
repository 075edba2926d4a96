"""Every command block of the README files runs as written, so the docs cannot drift from the
code.

Each fenced ```sh / ```bash / ```console block (and an unlabeled one that starts with a
command) of README.md and the folders' READMEs is one test, found anew on every run. A block
runs in one bash process, its README's commands verbatim, from a scratch copy of the tree under
test whose `.venv/bin/` runs this interpreter on that copy; inside network, PID and mount
namespaces of its own (`unshare`), so the README's fixed ports (7000, 8000, 1883, ...) are free
and whatever a block leaves running ends with it. Each command must succeed (`set -e`).

What a reader does around the commands is said in three tables: `GIVEN` (what they have at
hand before a block: a SIB started by the README's own line, a broker, a certificate),
`RUN_AS` (a command the README runs in a terminal of its own until Ctrl-C, or one that reads
stdin, or what the prose says to do before it) and `SKIPPED` (what cannot run here, and why).
"""
from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOT_DOCS = {"node_modules", "tests", "build", "docs", "typings"}  # READMEs there are not ours
SHELL = {"sh", "bash", "shell", "console"}
TIMEOUT = 600  # seconds for one block, everything included (Spark under load)
READY_SECONDS = 180  # for a command in its own terminal to be up (Spark's JVM, under load)
STOP_SECONDS = 120  # for it to end after Ctrl-C (a Spark batch under way)


def readmes() -> list[Path]:
    """README.md files of the tree, the top level's first (none under NOT_DOCS or dot dirs)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in NOT_DOCS)
        if "README.md" in files:
            found.append(Path(folder) / "README.md")
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def is_command(lines: list[str]) -> bool:
    """An unlabeled block is a command block when its first line that is not a comment starts
    with a program: the venv's, the scripts', or one on PATH (a diagram or a listing is not)."""
    first = next((line for line in lines if line.strip() and not line.startswith("#")), "")
    word = first.split()[0] if first.split() else ""
    return word.startswith((".venv/", "scripts/", "./")) or bool(word and shutil.which(word))


@dataclass(frozen=True)
class Block:
    """One command block: `id` is README path, `#`, the heading's anchor (and `/k` for the
    k-th command block under the same heading, from 1); `commands` are its logical lines
    (a command continued over several lines, or a comment line)."""

    id: str
    commands: tuple[str, ...]


def commands(text: str) -> tuple[str, ...]:
    """The block's text as bash reads it: one entry per command (continued lines joined with
    their newlines, as written)."""
    out, pending = [], ""
    for line in text.splitlines():
        pending += line + "\n"
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        if pending.rstrip("\n").endswith("\\"):
            continue
        out.append(pending.rstrip("\n"))
        pending = ""
    assert not pending, f"unterminated command: {pending!r}"
    return tuple(c for c in out if c.strip())


def fenced(text: str):
    """(heading above, language, body) of each fenced block of a Markdown text."""
    heading, fence, body = "", None, []
    for line in text.splitlines():
        if fence is None and line.startswith("```"):
            fence, body = line[3:].strip(), []
        elif fence is not None and line.startswith("```"):
            yield heading, fence, "\n".join(body) + "\n"
            fence = None
        elif fence is not None:
            body.append(line)
        elif m := re.match(r"#+ (.+)$", line):
            heading = m.group(1)


def command_blocks(name: str, text: str) -> list[Block]:
    """The command blocks of the Markdown `text` of README `name` (console blocks: the lines
    after a `$ ` prompt)."""
    found, seen = [], {}
    for heading, lang, body in fenced(text):
        if lang == "console" or (not lang and body.lstrip().startswith("$ ")):
            body = "\n".join(line[2:] for line in body.splitlines() if line.startswith("$ "))
        elif lang not in SHELL and not (not lang and is_command(body.splitlines())):
            continue
        anchor = slug(heading)
        k = seen[anchor] = seen.get(anchor, -1) + 1
        found.append(Block(f"{name}#{anchor}" + (f"/{k}" if k else ""), commands(body)))
    return found


def blocks() -> list[Block]:
    return [b for path in readmes()
            for b in command_blocks(path.relative_to(ROOT).as_posix(), path.read_text())]


BLOCKS = blocks()
BY_ID = {b.id: b for b in BLOCKS}


def readme_command(block_id: str, start: str) -> str:
    """The README's own command line in that block that starts with `start`."""
    (line,) = [c for c in BY_ID[block_id].commands if c.startswith(start)]
    return line


# ---- how a reader runs what the README shows --------------------------------------------

@dataclass(frozen=True)
class Terminal:
    """A command that runs until Ctrl-C, in a terminal of its own: started in the background
    (its own process group, output to a log), awaited until its output matches `ready`, and
    stopped with Ctrl-C (SIGINT to its group) after the block's last command, the latest
    started first — or, `at_once`, as soon as it is up (the block lists ways to start the same
    server). After Ctrl-C it must exit 0."""

    ready: str
    at_once: bool = False


@dataclass(frozen=True)
class Stdin:
    """What the reader types on the command's standard input."""

    text: str


@dataclass(frozen=True)
class First:
    """What the README's prose says to start before this command, in a terminal of its
    own."""

    command: str
    terminal: Terminal


SIB_LINE = readme_command("README.md#running-the-sib", ".venv/bin/ksp-sib --memory ").split(
    "#")[0].strip()  # `.venv/bin/ksp-sib --memory`: "With a SIB running (... below)"
SIB_UP = Terminal("SIB ready")
SIB = (SIB_LINE, SIB_UP)
# Debian's broker as its service runs it, on 1883 (`user root`: the namespace has no
# `mosquitto` user to drop to, as in spark_ingest.testing.Mosquitto)
MOSQUITTO = ("printf 'listener 1883 127.0.0.1\\nallow_anonymous true\\nuser root\\n' "
             "> ~/mosquitto.conf && mosquitto -c ~/mosquitto.conf",
             Terminal(r"mosquitto version .* running"))

MQTT_MODE = "device_firmware/README.md#mqtt-mode-telemetry-for-ksp-ingest"

# block id: what the reader has before its first command, in order: a command, or a command
# and how it runs in its own terminal
GIVEN: dict[str, list[str | tuple[str, Terminal]]] = {
    "README.md#a-kp-on-the-command-line": [SIB],
    "README.md#running-the-sib": [
        "mount -t tmpfs ksp-var-lib /var/lib  # a gateway host's /var/lib, this namespace's own",
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
        "-keyout key.pem -out cert.pem 2>/dev/null  # the host's certificate"],
    "README.md#running-the-sib/1": [SIB],
    "README.md#telemetry-into-parquet-and-the-sib": [MOSQUITTO, SIB],
    "README.md#telemetry-into-parquet-and-the-sib/1": [MOSQUITTO],
    "spark_ingest/README.md#spark_ingest": [MOSQUITTO, SIB],
    MQTT_MODE: [MOSQUITTO],
    "tools/wireshark/README.md#ksp-in-wireshark-and-tshark": [
        "cp tests/captures/greenhouse.pcapng gh.pcapng  # the README's first comment"],
}

# (block id, start of a command): how that command is run
RUN_AS: dict[tuple[str, str], Terminal | Stdin | First] = {
    ("README.md#a-kp-on-the-command-line", ".venv/bin/ksp sub "): Terminal(r'"seq": null'),
    ("README.md#running-the-sib", ".venv/bin/ksp-sib --memory "): Terminal("SIB ready", True),
    ("README.md#running-the-sib", ".venv/bin/ksp-sib --data-dir"): Terminal("SIB ready", True),
    ("README.md#running-the-sib", ".venv/bin/ksp-sib --config"): Terminal("SIB ready", True),
    ("README.md#running-the-sib", ".venv/bin/ksp-sib --tls-cert"): Terminal("SIB ready", True),
    ("README.md#running-the-sib", ".venv/bin/ksp-sib hash-password"): Stdin("a passphrase"),
    ("README.md#running-the-sib/2", ".venv/bin/ksp demo greenhouse --dashboard"):
        Terminal(r"Dashboard: http://127\.0\.0\.1:[0-9]+/dashboard", True),
    ("README.md#devices-in-front-of-a-sepa-broker", ".venv/bin/ksp-sib"): SIB_UP,
    ("README.md#devices-in-front-of-a-sepa-broker", ".venv/bin/ksp-bridge"):
        Terminal("bridge ready"),
    ("README.md#telemetry-into-parquet-and-the-sib", ".venv/bin/ksp-ingest"):
        Terminal("ingest ready"),
    ("README.md#capture-decode-replay", ".venv/bin/ksp replay"):
        First(SIB_LINE, SIB_UP),  # "Step 3 runs against a SIB started afresh"
    ("spark_ingest/README.md#spark_ingest", ".venv/bin/ksp-ingest"): Terminal("ingest ready"),
    (MQTT_MODE, ".venv/bin/ksp simulate-board"): Terminal("published", True),
    ("device_firmware/README.md#try-it-without-a-board", ".venv/bin/ksp-sib"): SIB_UP,
    ("device_firmware/README.md#try-it-without-a-board", ".venv/bin/ksp simulate-board"):
        Terminal("in the SIB", True),
}

# block id, or (block id, start of a command): why it is not run here
SKIPPED: dict[str | tuple[str, str], str] = {
    "README.md#quick-start": "scripts/run and scripts/test bootstrap .venv/ (pip, npm, apt "
                             "packages) and scripts/test is the whole suite, this test "
                             "included: CI runs them as its entry points",
    ("README.md#running-the-sib", ".venv/bin/ksp bench sib"):
        "a benchmark: minutes at full load; its tables are docs/benchmarks.md's",
    "spark_ingest/README.md#a-broker-that-wants-tls-and-a-password":
        "a placeholder broker (broker.example:8883) and password (…); tests/test_ingest.py "
        "runs these flags against a TLS mosquitto",
    "spark_ingest/README.md#receivers-on-other-machines-shards":
        "needs several machines (broker, recv1, recv2) and a placeholder secret (…); "
        "tests/test_ingest.py runs shards on this one",
}


# ---- the script of one block -------------------------------------------------------------

HELPERS = r"""
set -e -m  # every command must succeed; background jobs in process groups of their own
trap 'echo "README command failed (exit $?): $BASH_COMMAND" >&2' ERR
LOGS=%(logs)s
started() {  # NAME REGEX: a command in its own terminal is up once its log matches
  local deadline=$((SECONDS + %(ready)d)) pid=$!
  disown; echo "$pid" > "$LOGS/$1.pid"
  until grep -Eqs -- "$2" "$LOGS/$1.log"; do
    if [ -e "$LOGS/$1.rc" ]; then
      echo "terminal $1 ended (exit $(cat "$LOGS/$1.rc")) before it was up:" >&2
      cat "$LOGS/$1.log" >&2; return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "terminal $1: no /$2/ in its output after %(ready)d s" >&2; return 1
    fi
    sleep 0.2
  done
}
ctrl_c() {  # NAME: Ctrl-C in that terminal; it must end, with exit status 0
  local deadline=$((SECONDS + %(stop)d))
  kill -INT -- "-$(cat "$LOGS/$1.pid")"
  until [ -e "$LOGS/$1.rc" ]; do
    if [ $SECONDS -ge $deadline ]; then echo "terminal $1: still running %(stop)d s after Ctrl-C" >&2
      return 1; fi
    sleep 0.2
  done
  if [ "$(cat "$LOGS/$1.rc")" != 0 ]; then
    echo "terminal $1 exited $(cat "$LOGS/$1.rc") after Ctrl-C:" >&2; cat "$LOGS/$1.log" >&2
    return 1
  fi
}
"""


# what the README left running in the background (`... &`) gets Ctrl-C, as a reader ends it
ENDING = """for job in $(jobs -p); do kill -INT -- "-$job" 2>/dev/null || true; done
wait || true"""


def script(block: Block, logs: Path) -> str:
    """The bash script that runs `block` as a reader would."""
    lines = [HELPERS % {"logs": shlex.quote(str(logs)), "ready": READY_SECONDS,
                      "stop": STOP_SECONDS}]
    open_terminals: list[str] = []
    count = itertools.count(1)

    def terminal(command: str, how: Terminal) -> None:
        name = f"terminal-{next(count)}"
        # its exit status lands in NAME.rc at once (written aside, then renamed)
        lines.append("( set +e; export PYTHONUNBUFFERED=1  # line by line, as on a tty\n"
                     f"{command}\n"
                     f'echo $? > "$LOGS/{name}.rc~"; mv "$LOGS/{name}.rc~" "$LOGS/{name}.rc"\n'
                     f') > "$LOGS/{name}.log" 2>&1 < /dev/null &')
        lines.append(f"started {name} {shlex.quote(how.ready)}")
        if how.at_once:
            lines.append(f"ctrl_c {name}")
        else:
            open_terminals.append(name)

    for given in GIVEN.get(block.id, []):
        if isinstance(given, tuple):
            terminal(*given)
        else:
            lines.append(given)
    for command in block.commands:
        how = next((v for (b, start), v in RUN_AS.items()
                    if b == block.id and command.startswith(start)), None)
        skipped = next((v for k, v in SKIPPED.items()
                        if isinstance(k, tuple) and k[0] == block.id
                        and command.startswith(k[1])), None)
        if skipped:
            lines.append(f": not run here: {shlex.quote(skipped)}")
        elif isinstance(how, Terminal):
            terminal(command, how)
        elif isinstance(how, Stdin):
            lines.append(f"printf '%s\\n' {shlex.quote(how.text)} | {{\n{command}\n}}")
        elif isinstance(how, First):
            terminal(how.command, how.terminal)
            lines.append(command)
        else:
            lines.append(command)
    lines += [f"ctrl_c {name}" for name in reversed(open_terminals)]
    lines.append(ENDING)
    return "\n".join(lines) + "\n"


# ---- where it runs -----------------------------------------------------------------------

# root needs no user namespace (and in one, mosquitto could not drop its privileges)
UNSHARE = ["unshare", *(["--user", "--map-root-user"] if os.geteuid() else []), "--net",
           "--mount", "--pid", "--fork", "--mount-proc", "--kill-child"]


def namespaces_unavailable() -> str | None:
    """Why a block cannot run in namespaces of its own here, or None."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return "needs unshare (util-linux) and ip (iproute2)"
    out = subprocess.run([*UNSHARE, "ip", "link", "set", "lo", "up"], capture_output=True,
                         text=True, timeout=60)
    if out.returncode:
        return ("needs user, network, mount and PID namespaces (unshare -rnmpf) for the "
                f"README's fixed ports: {out.stderr.strip()}")
    return None


def checkout(dest: Path) -> Path:
    """A scratch copy of the tree under test (what a block writes stays there), with a
    `.venv/bin/` whose programs run this interpreter on the copy: `python` and the console
    scripts of pyproject.toml."""
    skip = shutil.ignore_patterns(".git", ".venv", "node_modules", "build", "typings", "w3c",
                                  "__pycache__", ".pytest_cache", "*.egg-info")
    shutil.copytree(ROOT, dest, ignore=skip, symlinks=True)
    bin_ = dest / ".venv" / "bin"
    bin_.mkdir(parents=True)
    env = f'PYTHONPATH={shlex.quote(str(dest))} exec {shlex.quote(sys.executable)}'
    programs = {"python": ""}
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, func = target.split(":")
        if module.split(".")[0] == "ksp_tools":  # the installed name of the checkout's tools/
            module = "tools" + module[len("ksp_tools"):]
        programs[name] = " -c " + shlex.quote(f"import sys; sys.argv[0] = {name!r}; "
                                              f"from {module} import {func}; "
                                              f"sys.exit({func}())")
    for name, args in programs.items():
        (bin_ / name).write_text(f'#!/bin/sh\n{env}{args} "$@"\n')
        (bin_ / name).chmod(0o755)
    return dest


def run(block: Block, tmp: Path) -> tuple[int, str]:
    """Run the block; its exit status and everything it and its terminals printed."""
    cwd, logs, home = checkout(tmp / "ksp-gateway"), tmp / "terminals", tmp / "home"
    logs.mkdir()
    home.mkdir()
    (tmp / "block.sh").write_text(script(block, logs))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KSP_", "PYTHON"))}
    (tmp / "tmp").mkdir()
    env |= {"HOME": str(home), "TMPDIR": str(tmp / "tmp"), "PYTHONDONTWRITEBYTECODE": "1"}
    with open(tmp / "output", "w+") as output:
        try:
            rc = subprocess.run(
                [*UNSHARE, "bash", "-c", 'ip link set lo up && exec bash "$0"',
                 str(tmp / "block.sh")], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=output, stderr=subprocess.STDOUT, timeout=TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            rc = -1
            output.write(f"\n[the block was still running after {TIMEOUT} s]\n")
        output.seek(0)
        text = output.read()
    for log in sorted(logs.glob("*.log")):
        text += f"\n--- terminal {log.stem} ---\n{log.read_text()}"
    return rc, text


@pytest.fixture(scope="module")
def namespaces() -> None:
    reason = namespaces_unavailable()
    if reason:
        pytest.skip(reason)


def test_every_readme_with_commands_is_found():
    assert {b.id.split("#")[0] for b in BLOCKS} >= {
        "README.md", "device_firmware/README.md", "spark_ingest/README.md",
        "tools/wireshark/README.md"}
    assert "sib/README.md" not in {b.id.split("#")[0] for b in BLOCKS}  # a diagram, unlabeled


def test_the_tables_name_only_blocks_and_commands_that_exist():
    """A renamed heading or an edited command shows here, not as a silently skipped block."""
    for key in [*GIVEN, *(k for k in SKIPPED if isinstance(k, str))]:
        assert key in BY_ID, f"no command block {key!r} (blocks: {sorted(BY_ID)})"
    for block_id, start in [*RUN_AS, *(k for k in SKIPPED if isinstance(k, tuple))]:
        assert block_id in BY_ID, f"no command block {block_id!r}"
        matching = [c for c in BY_ID[block_id].commands if c.startswith(start)]
        assert len(matching) == 1, f"{block_id}: {len(matching)} commands start {start!r}"


def test_command_blocks_are_found_by_language_and_heading():
    text = ("# Top\n```sh\na\n```\n```python\nx = 1\n```\n## Two words!\n```\n"
            "transports ──▶ sib\n```\n```console\n$ b --flag\noutput\n$ c\n```\n"
            "```\n# a comment\n.venv/bin/ksp query\n```\n```bash\n# sh in sh\n```\n")
    assert command_blocks("X.md", text) == [
        Block("X.md#top", ("a",)), Block("X.md#two-words", ("b --flag", "c")),
        Block("X.md#two-words/1", ("# a comment", ".venv/bin/ksp query")),
        Block("X.md#two-words/2", ("# sh in sh",))]


def test_a_block_is_split_into_the_commands_bash_reads():
    assert commands("a 'x\ny'  # c\n\n# note\nb \\\n  c\n") == (
        "a 'x\ny'  # c", "# note", "b \\\n  c")


@pytest.mark.slow  # a bash in namespaces
def test_a_failing_command_fails_its_block_and_is_named(namespaces, tmp_path):
    rc, output = run(Block("synthetic#block", ("true", "ls gh.pcapng", "echo not reached")),
                     tmp_path)
    assert rc != 0 and "README command failed (exit 2): ls gh.pcapng" in output
    assert "not reached" not in output


@pytest.mark.parametrize("block", [
    pytest.param(b, marks=[pytest.mark.slow]  # ksp-sib, ksp-bridge, mosquitto, Spark
                 + ([pytest.mark.spark] if any("ksp-ingest" in c for c in b.commands) else []),
                 id=b.id) for b in BLOCKS])
def test_the_block_runs_as_written(block, namespaces, tmp_path):
    if block.id in SKIPPED:
        pytest.skip(SKIPPED[block.id])
    rc, output = run(block, tmp_path)
    assert rc == 0, f"{block.id} (exit {rc}):\n{output[-6000:]}"
