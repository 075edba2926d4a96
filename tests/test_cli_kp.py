"""The command-line KP (`ksp query/update/sub/rule/graph`, tools/kp_cli.py) as a user runs it:
real `ksp` processes against a real `ksp-sib`; every error one line on stderr, no traceback,
and the right exit status."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from sib.access import hash_password
from sib.testing import SibProcess

# slow: ksp and ksp-sib processes
pytestmark = pytest.mark.slow

EX = "http://example.org/"
SELECT = f"SELECT ?o WHERE {{ <{EX}s> <{EX}p> ?o }}"


def ksp(*args: str, env: dict | None = None, input: str | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.cli", *args], capture_output=True,
                          text=True, timeout=timeout, input=input,
                          env={**os.environ, **(env or {})})


def ok(*args: str, **kw) -> str:
    out = ksp(*args, **kw)
    assert out.returncode == 0, out.stderr
    return out.stdout


def one_line_error(out: subprocess.CompletedProcess, status: int, *words: str) -> None:
    assert out.returncode == status, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    for word in words:
        assert word in out.stderr


@pytest.fixture(scope="module")
def sib():
    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "0", "--coap-port", "-1") as s:
        yield s


@pytest.fixture
def env(sib, tmp_path):
    return {"KSP_SIB": f"udp://127.0.0.1:{sib.ports['udp']}", "KSP_STATE_DIR": str(tmp_path)}


def test_update_then_query_in_every_format(sib, env):
    ok("update", f'INSERT DATA {{ <{EX}s> <{EX}p> 21.5, "hi"@en }}', env=env)
    lines = [json.loads(x) for x in ok("query", SELECT, "-o", "json", env=env).splitlines()]
    assert {(x["o"]["value"], x["o"].get("xml:lang")) for x in lines} == {("21.5", None),
                                                                        ("hi", "en")}
    assert sorted(ok("query", SELECT, "-o", "csv", env=env).splitlines()) == [
        "21.5", "hi", "o"]
    table = ok("query", SELECT, "-o", "table", env=env).splitlines()
    assert table[0] == "?o" and '"hi"@en' in table
    # the same over TCP, with -t and -p replacing the URL's parts; SPARQL from stdin
    out = ok("query", "-", "-t", "tcp", "-p", str(sib.ports["tcp"]), "-o", "json", env=env,
             input=f"ASK {{ <{EX}s> ?p ?o }}")
    assert json.loads(out) == {"boolean": True}
    nt = ok("query", f"CONSTRUCT {{ <{EX}s> ?p ?o }} WHERE {{ <{EX}s> ?p ?o }}", "-o", "nt",
            env=env)
    assert f'<{EX}s> <{EX}p> "hi"@en .' in nt.splitlines()


def test_text_naming_no_graph_means_the_default_graph_unless_every_graph(env):
    """SPARQL's reading: a query or DELETE that names no graph reads or deletes the default
    graph only; `--every-graph` gives KSP's (every graph, wire format 7.6)."""
    s, p = f"<{EX}dg-s>", f"<{EX}dg-p>"
    ok("update", f"INSERT DATA {{ {s} {p} 1 }}", env=env)
    ok("update", f"INSERT DATA {{ GRAPH <{EX}dg-g> {{ {s} {p} 2 }} }}", env=env)
    select = f"SELECT ?o WHERE {{ {s} {p} ?o }}"
    assert ok("query", select, "-o", "csv", env=env).split() == ["o", "1"]
    assert sorted(ok("query", "--every-graph", select, "-o", "csv", env=env).split()) == [
        "1", "2", "o"]
    assert ok("query", f"SELECT ?o FROM <{EX}dg-g> WHERE {{ {s} {p} ?o }}", "-o", "csv",
              env=env).split() == ["o", "2"]
    ok("update", f"DELETE WHERE {{ {s} {p} ?o }}", env=env)  # the default graph's only
    assert sorted(ok("query", "--every-graph", select, "-o", "csv", env=env).split()) == [
        "2", "o"]
    ok("update", "--every-graph", f"DELETE WHERE {{ {s} {p} ?o }}", env=env)
    assert ok("query", "--every-graph", select, "-o", "csv", env=env).split() == ["o"]


def test_prefixes_from_a_jsap_and_a_toml_file(env, tmp_path):
    jsap, toml = tmp_path / "app.jsap", tmp_path / "prefixes.toml"
    jsap.write_text(json.dumps({"namespaces": {"ex": EX}}))
    toml.write_text(f'[prefixes]\nex = "{EX}"\n')
    ok("update", "INSERT DATA { ex:a ex:p ex:b }", "--prefixes", str(jsap), env=env)
    out = ok("query", "SELECT ?o WHERE { ex:a ex:p ?o }", "--prefixes", str(toml), "-o", "csv",
             env=env)
    assert out.splitlines() == ["o", f"{EX}b"]


def test_sub_prints_each_change_and_terminates_at_the_sib(sib, env):
    query = f"SELECT ?o WHERE {{ <{EX}sub> <{EX}p> ?o }}"
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "sub", query, "-o", "json",
                             "-C", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})
    try:
        sib.wait_for("SELECT_PERSISTENT started")
        ok("update", f"INSERT DATA {{ <{EX}sub> <{EX}p> 7 }}", env=env)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    initial, change = map(json.loads, out.splitlines())  # one record per state, empty included
    assert initial["seq"] is None and initial["results"] == {"bindings": []}
    assert initial["head"] == {"vars": ["o"]} and initial["tid"] == change["tid"]
    assert change["seq"] == 1
    assert [b["o"]["value"] for b in change["results"]["bindings"]] == ["7"]
    sib.wait_for("persistent operation ended")


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_sub_every_state_one_record_empty_ones_included(sib, env, fmt):
    """After DELETE WHERE a script sees the value go away: the empty state is a record too,
    each naming its tid and sequence number (CSV: one header, a row count per state)."""
    s = f"<{EX}sub-{fmt}>"
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "sub",
                             f"SELECT ?o WHERE {{ {s} <{EX}p> ?o }}", "-o", fmt, "-C", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    try:
        first = [proc.stdout.readline()]  # the initial state is out: subscribed
        if fmt == "csv":
            first.append(proc.stdout.readline())
            assert first[0] == "tid,seq,rows,o\n" and first[1].endswith(",,0,\n"), first
        ok("update", f"INSERT DATA {{ {s} <{EX}p> 1, 2 }}", env=env)
        ok("update", f"DELETE WHERE {{ {s} <{EX}p> ?o }}", env=env)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    if fmt == "json":
        states = [json.loads(x) for x in lines]
        assert [(x["seq"], len(x["results"]["bindings"])) for x in states] == [(1, 2), (2, 0)], out
    elif fmt == "csv":
        tid = first[1].split(",")[0]
        assert sorted(lines) == sorted([f"{tid},1,2,1", f"{tid},1,2,2", f"{tid},2,0,"]), out
    else:
        heads = [x.split(" ", 2)[2] for x in lines if x.startswith("# ")]
        assert heads[0].endswith("seq 1, 2 rows") and heads[1].endswith("seq 2, 0 rows")


def test_sub_ends_on_ctrl_c_with_a_terminate(sib, env):
    proc = subprocess.Popen([sys.executable, "-m", "tools.cli", "sub", SELECT, "-o", "table"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    try:
        assert proc.stdout.readline().startswith("# ")  # the initial state's heading
        sib.wait_for("SELECT_PERSISTENT started")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0 and "Traceback" not in err
    sib.wait_for("persistent operation ended")


def test_rules_install_list_remove(sib, env):
    rule = f"INSERT {{ ?s <{EX}copy> ?o }} WHERE {{ ?s <{EX}q> ?o }}"
    kp = ["-i", "rules-kp"]
    env = {**env, "KSP_PASSWORD": "any"}
    tid = int(ok("rule", "install", rule, *kp, env=env))
    (listed,) = ok("rule", "list", *kp, env=env).splitlines()
    assert listed.split("\t")[0] == str(tid) and rule in listed
    ok("update", f"INSERT DATA {{ <{EX}r> <{EX}q> 1 }}", env=env)  # the rule fires
    copied = f"SELECT ?o WHERE {{ <{EX}r> <{EX}copy> ?o }}"
    assert ok("query", copied, "-o", "csv", env=env).splitlines() == ["o", "1"]
    assert ok("rule", "remove", *kp, env=env).strip() == f"removed {tid}"
    assert ok("rule", "list", *kp, env=env) == ""
    ok("update", f"INSERT DATA {{ <{EX}r> <{EX}q> 2 }}", env=env)  # no rule any more
    assert ok("query", copied, "-o", "csv", env=env).splitlines() == ["o", "1"]
    one_line_error(ksp("rule", "install", rule, env=env), 2, "KP ID")


def test_graph_management_and_error_statuses(env):
    g = f"{EX}graph"
    ok("graph", "create", g, env=env)
    ok("graph", "copy", "default", g, env=env)
    ok("graph", "drop", g, env=env)
    one_line_error(ksp("graph", "drop", g, env=env), 1, "NO_SUCH_GRAPH")
    one_line_error(ksp("query", "SELEC ?x", env=env), 2, "SPARQL syntax error")
    one_line_error(ksp("query", "ASK { ?s ?p ?o }", "-s", "udp://127.0.0.1:70000", env=env), 2,
                   "port 70000: not a port number (1 to 65535)")
    one_line_error(ksp("query", "ASK { ?s ?p ?o }", "-s", "nohostport", env=env), 2, "--sib")


def test_unreachable_sib_names_its_address(env):
    from sib.testing import free_port

    port = free_port("tcp")
    one_line_error(ksp("query", "ASK { ?s ?p ?o }", "-s", f"tcp://127.0.0.1:{port}", env=env),
                   1, f"tcp://127.0.0.1:{port}")
    url = f"udp://127.0.0.1:{free_port()}"  # the OS says so at once (ICMP): named once
    out = ksp("query", "ASK { ?s ?p ?o }", "-s", url, "--timeout", "20", env=env)
    one_line_error(out, 1, "nothing listens there")
    assert out.stderr.count(url) == 1, out.stderr


def test_credentials_from_a_file_or_the_environment(tmp_path):
    conf = tmp_path / "sib.toml"
    conf.write_text('[sib]\nmemory = true\nudp_port = 0\ntcp_port = -1\ncoap_port = -1\n'
                    '[access]\nanonymous = "none"\n[[access.kp]]\nid = "cli"\n'
                    f'password_hash = "{hash_password("s3cret")}"\nread = ["*"]\n')
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    with SibProcess("--config", str(conf)) as sib:
        env = {"KSP_SIB": f"udp://127.0.0.1:{sib.ports['udp']}"}
        assert ok("query", "ASK { ?s ?p ?o }", "-i", "cli", "--password-file", str(secret),
                  "-o", "json", env=env).strip() == '{"boolean": false}'
        one_line_error(ksp("query", "ASK { ?s ?p ?o }", "-i", "cli", env={
            **env, "KSP_PASSWORD": "wrong"}), 1, "ACCESS_DENIED")
        one_line_error(ksp("query", "ASK { ?s ?p ?o }", env=env), 1, "ACCESS_DENIED")


def test_versions():
    assert ok("--version").startswith("ksp ")
    out = subprocess.run([sys.executable, "-m", "sib.cli", "--version"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("ksp-sib ")


# -- errors a user can act on: one line, the right exit status, nothing left behind ----------


def sib_cli(*args: str, cwd=None, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sib.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd, input=input,
                          env={**os.environ, "PYTHONPATH": os.getcwd()})


@pytest.mark.parametrize("args, toml, words", [
    (["--udp-port", "70000"], "", "udp_port = 70000"),
    ([], "[sib]\nudp_port = 70000\n", "udp_port = 70000"),
    ([], '[sib]\nlog_level = "verbose"\n', "log_level = 'verbose'"),
    ([], '[limits]\nmax_queued = 0\n', "max_queued = 0"),
    ([], '[access]\n[[access.kp]]\nid = "x"\npassword_hash = "hunter2"\n', "password_hash"),
])
def test_bad_settings_exit_2_in_one_line_and_create_nothing(tmp_path, args, toml, words):
    conf = tmp_path / "sib.toml"
    conf.write_text(toml)
    out = sib_cli("--config", str(conf), *args, cwd=tmp_path)
    one_line_error(out, 2, words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sib.toml"]  # no ./ksp-data


def test_a_port_in_use_is_named_with_its_flag_and_leaves_no_data_directory(tmp_path):
    """A KSP port or the gate's in use: one line naming the listener, the port, the flag that
    moves it and -1 that turns it off; no data directory left behind."""
    import socket

    with SibProcess("--memory", "--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1") as s:
        port = s.ports["udp"]
        out = sib_cli("--udp-port", str(port), "--tcp-port", "-1", "--coap-port", "-1",
                      cwd=tmp_path)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert (f"UDP port {port} on 127.0.0.1: Address already in use (--udp-port N takes "
                "another port, --udp-port -1 turns it off)") in out.stderr
        assert not (tmp_path / "ksp-data").exists()
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        out = sib_cli("--udp-port", "0", "--tcp-port", "-1", "--coap-port", "-1",
                      "--metrics-port", "-1", "--sepa-ws-port", "-1", "--sepa-http-port",
                      str(port), cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert (f"SEPA gate's HTTP port {port} on 127.0.0.1: Address already in use "
            "(--sepa-http-port N takes another port, --sepa-http-port -1 turns it off)"
            ) in out.stderr.splitlines()[-1]
    assert not (tmp_path / "ksp-data").exists()


def test_ksp_sib_says_its_defaults_subcommands_and_wrong_flags_in_words(tmp_path):
    """--help shows the default ports and the subcommands; --data-dir with --memory is a usage
    error (which store was meant?); a TLS file that is not there is named; `ksp decode` of what
    is not hex says which character."""
    out = sib_cli("--help")
    assert out.returncode == 0
    for words in ("default 7000", "default 7001", "default 5683", "default 8000",
                  "default 9000", "ksp-sib hash-password", "ksp-sib new-key",
                  "ksp-sib register-token", "ksp-sib jsap", "ksp-sib systemd-unit"):
        assert words in " ".join(out.stdout.split()), words
    out = sib_cli("--memory", "--data-dir", str(tmp_path / "x"), cwd=tmp_path)
    assert out.returncode == 2 and "not allowed with argument --memory" in out.stderr
    missing = tmp_path / "cert.pem"
    one_line_error(sib_cli("--memory", "--tls-cert", str(missing), "--tls-key", str(missing),
                           cwd=tmp_path), 2, f"[tls]: {missing}: No such file or directory")
    out = ksp("decode", "zz12")
    assert out.returncode == 2 and out.stdout == (
        "error: 'zz12': 'z' (digit 1) is not hexadecimal: a message is given as hex digits, "
        "two a byte\n")


def test_a_second_sib_on_the_same_data_directory_is_told_so(tmp_path):
    data = str(tmp_path / "data")
    with SibProcess("--data-dir", data, "--udp-port", "0", "--tcp-port", "-1",
                    "--coap-port", "-1") as first:
        out = sib_cli("--data-dir", data, "--udp-port", "0", "--tcp-port", "-1",
                      "--coap-port", "-1")
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert f"another ksp-sib (pid {first.proc.pid}) holds the data directory" in out.stderr
        assert first.stop() == 0


def test_hash_password_help_and_empty_password():
    out = sib_cli("hash-password", "--help")
    assert out.returncode == 0 and "usage: ksp-sib hash-password" in out.stdout
    assert "scrypt$" not in out.stdout
    one_line_error(sib_cli("hash-password", input="\n"), 1, "empty password")
    out = sib_cli("hash-password", input="s3cret\n")
    from sib.access import verify_password

    assert out.returncode == 0 and verify_password("s3cret", out.stdout.strip())


def test_kp_names_in_the_logs(tmp_path):
    conf = tmp_path / "sib.toml"
    conf.write_text('[sib]\nmemory = true\nudp_port = 0\ntcp_port = -1\ncoap_port = -1\n'
                    '[[access.kp]]\nid = "greenhouse-fan"\n'
                    f'password_hash = "{hash_password("pw")}"\nread = ["*"]\n')
    with SibProcess("--config", str(conf)) as sib:
        env = {"KSP_SIB": f"udp://127.0.0.1:{sib.ports['udp']}", "KSP_PASSWORD": "pw"}
        ok("query", "ASK { ?s ?p ?o }", "-i", "greenhouse-fan", env=env)
        assert "(greenhouse-fan) connected over udp" in sib.wait_for("connected over udp")


def test_one_sib_syntax_for_every_command(sib):
    """`--sib udp://HOST:PORT` and `--sib HOST:PORT` (UDP) mean the same SIB to `ksp query`
    and to `ksp simulate-board` (a board's two readings stored either way); a board's other
    scheme is a usage error at once, not a host name looked up for ever."""
    port = sib.ports["udp"]
    for given in (f"udp://127.0.0.1:{port}", f"127.0.0.1:{port}"):
        assert ok("query", "ASK { ?s ?p ?o }", "--sib", given, "-o", "json")
        done = ksp("simulate-board", "--sib", given, "--period", "0.1", "--values", "21.5",
                   "--readings", "2", timeout=120)
        assert done.returncode == 0 and done.stdout.count(": in the SIB:") >= 2, done.stderr
    out = ksp("simulate-board", "--sib", f"tcp://127.0.0.1:{port}")
    assert out.returncode == 2 and "a board speaks KSP over UDP" in out.stderr.splitlines()[-1]


def test_simulate_board_and_flash_check_their_settings(tmp_path):
    out = ksp("simulate-board", "--sib", "nohostport")  # argparse: usage, then one error line
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "--sib: 'nohostport': expected HOST:PORT" in out.stderr.splitlines()[-1]
    bad = tmp_path / "board.json"
    bad.write_text('{"agent": "sensor", "sib": {"host": "10.0.0.2", "port": "80a"}}')
    out = ksp("flash", "/dev/null", "--board", "esp32", "--config", str(bad), "--dry-run",
              "--build", str(tmp_path / "build"))
    assert out.returncode == 2 and "sib.port" in out.stdout and "Traceback" not in out.stderr
    assert not (tmp_path / "build").exists()  # nothing built for a board that cannot start
    out = ksp("flash", "/dev/null", "--board", "esp32", "--config", str(tmp_path / "no.json"),
              "--dry-run", "--build", str(tmp_path / "build"))
    assert out.returncode == 2 and out.stdout == "" and out.stderr == (
        f"error: --config {tmp_path / 'no.json'}: no such file (the config.json to copy to "
        "the board; device_firmware/config.example.json is a start)\n")


def test_decode_into_a_closed_pipe_and_the_readme_example():
    import re
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    hexes = re.findall(r"ksp decode ([0-9a-f]{16,})", readme)
    assert hexes
    for text in hexes:
        assert ok("decode", text).splitlines()[-1] == ")"
    # every `ksp decode` line of the README runs as written (options included)
    lines = re.findall(r"^\.venv/bin/ksp (decode (?:--\S+ (?:[A-Z]+ )?)*[0-9a-f]+)\s*$", readme,
                       re.M)
    assert any("--from-sib" in line for line in lines)
    for line in lines:
        out = ok(*line.split())
        assert out.splitlines()[-1] == ")" and ("Response(" in out or "Request(" in out)
    proc = subprocess.Popen(f"{sys.executable} -m tools.cli decode {hexes[0]} | head -1",
                            shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = proc.communicate(timeout=60)
    assert out.startswith(f"{len(hexes[0]) // 2} bytes") and "Traceback" not in err


def test_query_all_fetches_a_result_cut_to_a_datagram(env):
    n = 1250  # ~66 bytes a row: more than one datagram (65,507 bytes) holds
    for start in range(0, n, 250):  # a Graph field carries 255 triples at most
        rows = " ".join(f'<{EX}big> <{EX}v> "{"y" * 60}{i:04}" .'
                        for i in range(start, start + 250))
        ok("update", f"INSERT DATA {{ {rows} }}", env=env)
    query = f"SELECT ?v WHERE {{ <{EX}big> <{EX}v> ?v }}"
    cut = ksp("query", query, "-o", "csv", env=env)
    assert cut.returncode == 0 and "the SIB cut the result; --all fetches the rest" in cut.stderr
    whole = ok("query", query, "-o", "csv", "--all", env=env).splitlines()
    assert len(whole) == 1 + n and len(set(whole)) == 1 + n


# -- one wording per fault, in the user's terms --------------------------------------------------

ASK = "ASK { ?s ?p ?o }"


def error_line(out: subprocess.CompletedProcess, status: int) -> str:
    assert out.returncode == status, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    return out.stderr.strip()


def test_bad_ports_have_one_wording_wherever_given(env):
    for args, port in ((["-s", "udp://127.0.0.1:abc"], "abc"),
                       (["-s", "udp://127.0.0.1:99999"], "99999"),
                       (["-p", "70000"], "70000"), (["-p", "0"], "0"), (["-p", "x1"], "x1")):
        assert error_line(ksp("query", ASK, *args, env=env), 2) == (
            f"ksp query: port {port}: not a port number (1 to 65535)")


def test_nothing_listening_has_one_wording_on_every_transport(env):
    from sib.testing import free_port

    for scheme in ("udp", "tcp", "coap"):
        url = f"{scheme}://127.0.0.1:{free_port('tcp' if scheme == 'tcp' else 'udp')}"
        assert error_line(ksp("query", ASK, "-s", url, "--timeout", "30", env=env), 1) == (
            f"ksp query: {url}: nothing listens there (no SIB running, or none taking "
            f"{scheme} on this port)")


def test_tls_to_a_plain_port_is_named(sib, env):
    url = f"tcps://127.0.0.1:{sib.ports['tcp']}"
    assert error_line(ksp("query", ASK, "-s", url, env=env), 1) == (
        f"ksp query: {url}: the TLS handshake failed: no TLS there (a plain tcp:// port?)")


def test_sparql_of_the_wrong_kind_or_none(env):
    assert error_line(ksp("query", "SELEC * WHERE { ?s ?p ?o }", env=env), 2) == (
        "ksp query: SPARQL syntax error (line 1, column 1): expected SELECT, ASK or "
        "CONSTRUCT, found 'SELEC'")
    assert error_line(ksp("query", f"PREFIX ex: <{EX}>\nSELEC ?x", env=env), 2) == (
        "ksp query: SPARQL syntax error (line 2, column 1): expected SELECT, ASK or "
        "CONSTRUCT, found 'SELEC'")
    no_sparql = "no SPARQL: give it as an argument, with -f FILE, or on stdin"
    for command in ("query", "update", "sub"):  # stdin empty (not a terminal): the same words
        assert error_line(ksp(command, env=env, input=""), 2) == f"ksp {command}: {no_sparql}"
    assert error_line(ksp("query", f"INSERT DATA {{ <{EX}a> <{EX}b> 1 }}", env=env), 2) == (
        "ksp query: INSERT DATA is an update, not a query: run it with `ksp update`")
    assert error_line(ksp("sub", f"DELETE WHERE {{ <{EX}a> ?p ?o }}", env=env), 2) == (
        "ksp sub: DELETE is an update, not a query: run it with `ksp update`, or "
        "`ksp rule install` to keep it at the SIB")
    assert error_line(ksp("update", SELECT, env=env), 2) == (
        "ksp update: SELECT is a query, not an update: run it with `ksp query` (or `ksp sub` "
        "to follow its changes)")


def test_timeouts_must_be_positive_and_say_what_was_waited_for(env):
    import socket

    for bad in ("0", "-1", "inf"):
        assert error_line(ksp("query", ASK, "--timeout", bad, env=env), 2) == (
            f"ksp query: --timeout {float(bad):g}: must be a number of seconds above 0")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:  # takes, never answers
        silent.bind(("127.0.0.1", 0))
        url = f"udp://127.0.0.1:{silent.getsockname()[1]}"
        line = error_line(ksp("query", ASK, "-s", url, "--timeout", "1", env=env), 1)
    assert line.startswith(f"ksp query: {url}: waited ") and line.endswith(
        " s for the SIB's answer (--timeout 1); likely nothing listens there, a firewall "
        "drops udp, or a proxy does not forward it")


def test_a_kp_id_without_a_password_is_a_usage_error(env):
    env = {k: v for k, v in env.items()}
    os_env = {k: v for k, v in os.environ.items() if k != "KSP_PASSWORD"}
    out = subprocess.run([sys.executable, "-m", "tools.cli", "query", ASK, "-i", "me"],
                         capture_output=True, text=True, timeout=60, input="",
                         env={**os_env, **env})
    assert error_line(out, 2) == (
        "ksp query: no password given for -i me: set $KSP_PASSWORD, give --password-file "
        "FILE, or run on a terminal to be asked")
