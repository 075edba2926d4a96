"""The layer rules, read from the imports (ast) of every module, lazy imports included.

- ksp/ imports nothing of the project outside ksp/; its core (every module but the package's
  `__init__`) imports neither of the subpackages `ksp.sparql` and `ksp.reference`, and
  `import ksp.codec` loads no SPARQL module (the `__init__` loads ksp.sparql on first use).
- transports/ never imports sib/; sib/ never imports transports/, except its entry point
  sib/cli.py (the composition root that starts the transports).
- tools/ reaches into no private name of another package (`codec._speedups`, `_decode_*`,
  another benchmark's `_table`): what tools need is public (`ksp.codec.use_speedups`,
  `tools.bench.report`).
- transports/ uses no private name of ksp: it neither overrides nor calls a session's private
  methods, nor reads its private tables; a SIB message layer keeps the public contract
  `ksp.session.SibMessageLayer`.
- bridge/ uses sib's public API only (`BRIDGE_MAY_IMPORT`, each name in its module's
  `__all__`): the persistent-operation engine is `sib.engine`, one for both, not a copy kept
  alike by tests; `sib.engine` is sans-I/O.
- tests/ go through the project's public interfaces: no private name imported or reached
  (`session._cache`), but the few exceptions of `TESTS_MAY_REACH`, each with its reason.
"""
from __future__ import annotations

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = {"ksp", "transports", "sib", "tools", "bridge", "spark_ingest", "device_firmware",
           "tests"}
NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make"}  # public despite the underscore


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(path: pathlib.Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def imports(path: pathlib.Path) -> list[tuple[str, list[str], int]]:
    """(absolute module, imported names, line) for every import statement in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(path).split(".")
                base = base[:len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((module, [a.name for a in node.names], node.lineno))
    return found


def modules(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _top(module: str) -> str:
    return module.split(".")[0]


def _targets(module: str, names: list[str]) -> list[str]:
    """The modules an import statement may load: `from ksp import sparql` loads ksp.sparql."""
    return [module] + [f"{module}.{n}" for n in names]


def test_the_rules_see_imports():
    """The parser finds relative, lazy and aliased imports (else every rule below holds
    vacuously)."""
    found = {(m, tuple(n)) for m, n, _ in imports(ROOT / "tools" / "cli.py")}
    assert ("tools.decode", ("decode_command",)) in found  # inside a function
    found = {m for m, _, _ in imports(ROOT / "ksp" / "codec.py")}
    assert {"ksp.codes", "ksp.model", "ksp"} <= found  # `from . import _speedups` is `ksp`
    assert any(m == "transports.server" for m, _, _ in imports(ROOT / "sib" / "cli.py"))


@pytest.mark.parametrize("path", modules("ksp"), ids=lambda p: str(p.relative_to(ROOT)))
def test_ksp_imports_nothing_of_the_project_outside_ksp(path):
    for module, _, line in imports(path):
        assert _top(module) not in PROJECT - {"ksp"}, f"{path.name}:{line} imports {module}"


@pytest.mark.parametrize("path", [p for p in modules("ksp")
                                  if p.parent.name == "ksp" and p.name != "__init__.py"],
                         ids=lambda p: p.name)
def test_the_ksp_core_does_not_import_its_subpackages(path):
    for module, names, line in imports(path):
        for target in _targets(module, names):
            assert not target.startswith(("ksp.sparql", "ksp.reference")), \
                f"{path.name}:{line} imports {target}"


def test_the_codec_loads_no_sparql_module():
    """`import ksp.codec` (a device, the wire benchmarks) does not load the SPARQL parser: the
    package's `__init__` loads ksp.sparql only when one of its names is used."""
    probe = "import ksp.codec, sys; print(sorted(m for m in sys.modules if 'sparql' in m))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", f"import ksp.codec loads {out.stdout.strip()}"


def test_the_sparql_names_stay_importable_from_ksp():
    """In a fresh interpreter: `ksp.sparql` and every name of `ksp.__all__` are there on first
    use, whichever comes first."""
    probe = ("import ksp; assert ksp.sparql.render_where is ksp.render_sparql_where; "
             "from ksp import *; assert compile_sparql is ksp.sparql.compile; "
             "assert set(ksp.__all__) <= set(dir(ksp)); print('ok')")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("path", modules("transports"), ids=lambda p: p.name)
def test_transports_never_import_sib(path):
    for module, _, line in imports(path):
        assert _top(module) not in {"sib", "tools"}, f"{path.name}:{line} imports {module}"


@pytest.mark.parametrize("path", modules("sib"), ids=lambda p: p.name)
def test_sib_imports_transports_only_in_its_entry_point(path):
    for module, _, line in imports(path):
        if _top(module) == "transports":
            assert path.name == "cli.py", f"{path.name}:{line} imports {module}"
        assert _top(module) != "tools", f"{path.name}:{line} imports {module}"


@pytest.mark.parametrize("path", modules("tools"), ids=lambda p: str(p.relative_to(ROOT)))
def test_tools_use_no_private_name_of_another_module(path):
    """`from X import _name` only where `_name` is a module of X's package (e.g. `_timing`), and
    no `alias._name` on an imported project module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = {}
    for module, names, line in imports(path):
        if _top(module) not in PROJECT:
            continue
        for name in names:
            if name.startswith("_") and not name.startswith("__"):
                is_module = (ROOT / module.replace(".", "/") / f"{name}.py").exists()
                assert is_module, f"{path.name}:{line} imports private {module}.{name}"
            aliases[name] = module
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and node.attr.startswith("_")
                and not node.attr.startswith("__") and node.attr not in NAMEDTUPLE_API):
            raise AssertionError(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")


@pytest.mark.parametrize("module", sorted(
    p.stem for p in (ROOT / "tools" / "bench").glob("*.py")
    if p.stem not in ("__init__", "firmware_probe", "firmware_roles")))  # run inside MicroPython
def test_every_benchmark_module_imports(module):
    """A benchmark nothing runs in the suite still has to load: an import broken by a rename
    (tools/bench/_cli -> report) is found here, not by the next person who measures."""
    importlib.import_module(f"tools.bench.{module}")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


def _defined_names(paths: list[pathlib.Path]) -> set[str]:
    """The private names `paths` define: functions, classes, methods, module globals, and the
    attributes their code sets (`self._x = ...`)."""
    names = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {name for name in names if _private(name)}


KSP_PRIVATE = _defined_names(modules("ksp"))


def private_uses_of_ksp(source: str, own: set[str]) -> list[str]:
    """Where `source` (a module of transports/) reaches into ksp's private names: imports one;
    subclasses a ksp class and overrides or calls its private methods (`super()._x`); or reads
    an attribute `_x` that ksp defines and `own` (transports' own private names) does not."""
    tree = ast.parse(source)
    from_ksp = set()
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.ImportFrom) and node.level == 0
                and _top(node.module or "") == "ksp"):
            for alias in node.names:
                from_ksp.add(alias.asname or alias.name)
                if _private(alias.name):
                    found.append(f"{node.lineno}: imports {node.module}.{alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id in from_ksp for base in node.bases):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and item.name in KSP_PRIVATE:
                    found.append(f"{item.lineno}: {node.name} overrides ksp's {item.name}")
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr in KSP_PRIVATE:
            on_super = (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                        and node.value.func.id == "super")
            if on_super or node.attr not in own:
                found.append(f"{node.lineno}: uses ksp's {node.attr}")
    return found


def test_the_private_name_rule_sees_overrides_and_reaches():
    """A subclass overriding a session's private method, calling it through super() or reading
    its private table is found (else the rule below holds vacuously)."""
    source = ("from ksp.session import UdpSIBSession\n"
              "class S(UdpSIBSession):\n"
              "    def _on_message(self, *args):\n"
              "        super()._on_message(*args)\n"
              "        return len(self.session._executing)\n")
    assert len(private_uses_of_ksp(source, set())) == 3


@pytest.mark.parametrize("path", modules("transports"), ids=lambda p: p.name)
def test_transports_use_no_private_name_of_ksp(path):
    """A transport builds on ksp's public interface (`ksp.session.SibMessageLayer` for a SIB
    message layer), never on its private methods or tables, so the core changes inside
    without breaking an adapter."""
    own = _defined_names(modules("transports"))
    found = private_uses_of_ksp(path.read_text(encoding="utf-8"), own)
    assert not found, f"{path.name}: " + "; ".join(found)
#: The names of `sib` the bridge may import, by module. Each is in its module's `__all__`: the
#: bridge shares the SIB's public API and its engine (`sib.engine`), never its internals.
BRIDGE_MAY_IMPORT = {
    "sib": {"AccessPolicy", "Authenticator", "Histogram", "JOURNAL_FILE", "Journal", "Metrics",
            "Pattern", "RequestError", "TrackedChannel", "canonical", "check_request",
            "results_of"},
    "sib.engine": {"Cascade", "Group", "Groups", "OpKey", "Operation", "Operations",
                   "Restoring", "Rules", "Visit", "indication", "sees"},
    "sib.config": {"ConfigError", "ServingConfig", "anonymous_notice", "check_ranges", "load",
                   "serving_policy"},
    "sib.cli": {"add_capture_flags", "open_capture"},
    "sib.lifecycle": {"claim_data_dir", "run_main", "run_until_stopped", "start_metrics",
                      "stop_metrics"},
    "sib.options": {"apply_keywords"},
    "sib.sepa.secure": {"write_private"},
    "sib.testing": {"LoggedProcess", "SibProcess"},
}


@pytest.mark.parametrize("path", modules("bridge"), ids=lambda p: p.name)
def test_the_bridge_imports_only_the_public_api_of_sib(path):
    for module, names, line in imports(path):
        if _top(module) != "sib":
            continue
        allowed = BRIDGE_MAY_IMPORT.get(module)
        assert allowed is not None, f"{path.name}:{line} imports {module}, not public for it"
        assert names or module == "sib", f"{path.name}:{line}: import names from {module}"
        for name in names:
            assert name in allowed, f"{path.name}:{line} imports {module}.{name}"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):  # after `import sib`
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id == "sib"):
            assert node.attr in BRIDGE_MAY_IMPORT["sib"], f"{path.name}:{node.lineno} uses " \
                                                          f"sib.{node.attr}"


@pytest.mark.parametrize("module", sorted(BRIDGE_MAY_IMPORT))
def test_what_the_bridge_may_import_is_public(module):
    exported = set(importlib.import_module(module).__all__)
    for name in BRIDGE_MAY_IMPORT[module]:
        assert not name.startswith("_") and name in exported, f"{module}.{name}"


def test_the_engine_is_sans_io():
    for module, names, line in imports(ROOT / "sib" / "engine.py"):
        for target in _targets(module, names):
            assert _top(target) not in {"asyncio", "socket", "selectors", "threading", "time",
                                        "transports"}, f"engine.py:{line} imports {target}"


#: Where tests/ may still reach into private names of the project, by test file: the names,
#: and why (a setup no public way reaches, a private unit under test, or a public accessor
#: still to come in a module being reworked). Any other reach fails
#: `test_tests_go_through_public_interfaces`.
TESTS_MAY_REACH = {
    "test_capture.py": {
        ("_Flow", "_reassemble"): "the TCP reassembly unit under a property test; `messages` "
                                  "reaches it only through a capture file"},
    "test_ingest_aggregates.py": {
        ("_write",): "wrapped to count the state files written; no public hook sees them"},
    "test_ingest_arrow_batch.py": {
        ("_Reader", "_Range"): "the source's rows for given messages, without a Spark stream",
        ("_push",): "the SIB's refusal, given: no ksp-sib setting refuses an update of good "
                    "names"},
    "test_ingest_format.py": {
        ("_Reader", "_Range", "_seqs"): "drive the Spark stream reader, its partitions and its "
                                        "checkpoint check without a Spark session"},
    "test_ingest_poison.py": {
        ("_Reader", "_Range"): "drive the Spark stream reader and its partitions without a "
                               "Spark session",
        ("_batch", "_arrow_schema"): "a row Arrow refuses: no message `parse` lets through "
                                     "makes one, so the batch builder is given one",
        ("_refused",): "a reading the SIB refused: no ksp-sib setting refuses an update of "
                       "good names, so the refusal is given"},
    "test_sib_sealed.py": {
        ("_persistent", "_observations"): "accessor pending in transports/coap.py"},
    "test_sib_security.py": {
        ("_pool",): "occupies the verification worker to reach a busy pool: no public way"},
    "test_speedups.py": {
        ("_speedups", "_decode_kp_message", "_decode_sib_message", "_encode", "_RESULT_FORM"):
            "compares the C module with the pure-Python code it replaces, function by "
            "function"},
    "test_transport_coap.py": {
        ("_persistent",): "accessor pending in transports/coap.py (the resources' keys)",
        ("_resources",): "aiocoap's Site lists its resources only in this private table"},
    "test_transport_tcp.py": {
        ("_connections",): "accessor pending in transports/tcp.py",
        ("_Persistent", "_persistent", "_sinks"): "plant the TID a KP kept across a "
                                                  "reconnect: the client cannot adopt one"},
}
ALLOWED_REACHES = {(test, name) for test, reasons in TESTS_MAY_REACH.items()
                   for names in reasons for name in names}
TESTED_PACKAGES = PROJECT - {"tests"}


def _imported_project_names(tree: ast.AST) -> dict[str, tuple[str, str | None]]:
    """Local name -> (project module, name in it or None for the module itself), for every
    `import`/`from … import` of the project."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update({(a.asname or a.name).split(".")[0]: (a.name, None) for a in node.names
                          if _top(a.name) in TESTED_PACKAGES})
        elif isinstance(node, ast.ImportFrom) and node.level == 0 \
                and _top(node.module or "") in TESTED_PACKAGES:
            names.update({a.asname or a.name: (node.module, a.name) for a in node.names})
    return names


def _own_names(path: pathlib.Path) -> set[str]:
    """The private names a test module and the test helpers it imports (`from memory_service
    import …`) define: functions, classes, module globals and `self._x`/`cls._x` attributes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    helpers = {ROOT / "tests" / f"{node.module}.py" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module}
    names = set()
    for source in [path] + sorted(h for h in helpers if h.exists() and h != path):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                names.add(node.attr)
    return {name for name in names if _private(name)}


def _overrides(base: tuple[str, str | None], name: str) -> bool:
    """Whether the project class `base` (module, name) has an attribute `name`."""
    module, attr = base
    target = importlib.import_module(module)
    return attr is not None and hasattr(getattr(target, attr, None), name)


def private_reaches(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, private name) for each reach of a test module into the project: a private name
    imported from a project package (a private module excepted: one test file per module, as
    h11's); `alias._x` on an imported project name; `obj._x` where `_x` is not a private name
    of the tests' own (`_own_names`); and a method of a subclass of a project class that
    overrides one of its private names."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = _own_names(path)
    imported = _imported_project_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 \
                and _top(node.module or "") in TESTED_PACKAGES:
            for alias in node.names:
                module_file = ROOT / node.module.replace(".", "/") / f"{alias.name}.py"
                if _private(alias.name) and not module_file.exists():
                    found.append((node.lineno, alias.name))
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            on_import = isinstance(node.value, ast.Name) and node.value.id in imported
            if on_import or node.attr not in own:
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.ClassDef):
            bases = [imported[b.id] for b in node.bases
                     if isinstance(b, ast.Name) and b.id in imported]
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and _private(item.name) and any(_overrides(b, item.name) for b in bases):
                    found.append((item.lineno, item.name))
    return found


def test_the_reach_rule_sees_private_names(tmp_path):
    """Imports, attribute reads and writes, and overrides are found (else the rule below holds
    vacuously); the test's own helpers' private names and namedtuple's API are not."""
    from ksp.session import KPSession

    hook = min(n for n, v in vars(KPSession).items() if _private(n) and callable(v))
    source = ("from ksp.session import KPSession, _Persistent\n"
              "from ksp import codec\n"
              "class Net:\n"
              "    def __init__(self):\n"
              "        self._flight = []\n"
              "    def _launch(self):\n"
              "        return self._flight, p._replace(a=1)\n"
              "class K(KPSession):\n"
              f"    def {hook}(self): pass\n"
              "def test(kp):\n"
              "    kp._next = 5\n"
              "    return codec._speedups, kp.session._pending, Net()._launch()\n")
    path = tmp_path / "test_probe.py"
    path.write_text(source, encoding="utf-8")
    found = sorted(name for _, name in private_reaches(path))
    assert found == sorted(["_Persistent", "_next", hook, "_pending", "_speedups"])


@pytest.mark.parametrize("path", sorted((ROOT / "tests").glob("*.py")), ids=lambda p: p.name)
def test_tests_go_through_public_interfaces(path):
    """Tests use the project's public attributes, methods, properties, `sizes()` and metrics,
    so they check what a user or operator sees and internals stay free to change; the few
    exceptions are in `TESTS_MAY_REACH`, each with its reason."""
    found = [f"{line}: {name}" for line, name in private_reaches(path)
             if (path.name, name) not in ALLOWED_REACHES]
    assert not found, f"{path.name} reaches into private names: " + "; ".join(found)


def test_every_allowed_reach_is_still_there():
    """An exception no test needs any more is dropped from `TESTS_MAY_REACH`."""
    used = {(path.name, name) for path in (ROOT / "tests").glob("*.py")
            for _, name in private_reaches(path)}
    assert not ALLOWED_REACHES - used, sorted(ALLOWED_REACHES - used)
