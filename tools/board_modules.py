"""Which firmware modules a board's configuration uses, for `ksp flash`.

The set is an import closure: from `main.py`, every `import` of a firmware module (at the top of
a module or inside a function, as the firmware loads some lazily) is followed, read from the
source with `ast`, except into a module the configuration does not need (`gates`): the MQTT
mode's agent and umqtt only with an "mqtt" section, the sensor and actuator agents by "agent",
the sealed mode with "kp.key", the SELECT-result reader with a SELECT subscription. Sensor
drivers are loaded by name at run time (`board.MCUBoard.sensor`), so the configured ones are
roots of the closure. Everything else under kspfw/ and lib/ is left out, each with its reason.
"""
from __future__ import annotations

import ast
from pathlib import Path

from .resources import firmware_dir

FIRMWARE = firmware_dir()
PACKAGE = "kspfw"
LIB = "lib"
ENTRY = "main.py"
BOARDS = ("esp32", "rp2")
NOT_BY_AGENTS = "no agent sends graph names, FILTER or SOLUTION MODIFIER options"


def firmware_files() -> list[str]:
    """Every module a board may carry, relative to device_firmware/ (posix paths)."""
    return sorted(p.relative_to(FIRMWARE).as_posix() for top in (PACKAGE, LIB)
                  for p in (FIRMWARE / top).rglob("*.py") if "__pycache__" not in p.parts)


def _module_file(name: str) -> str | None:
    """The file of dotted module `name` on a board's path (/ and /lib), or None (built in)."""
    parts = name.split(".")
    for top in ("", LIB + "/"):
        for rel in (top + "/".join(parts) + ".py", top + "/".join(parts) + "/__init__.py"):
            if (FIRMWARE / rel).is_file():
                return rel
    return None


def imports(rel: str) -> set[str]:
    """The firmware files `rel` imports anywhere in its source (and their packages'
    __init__.py)."""
    tree = ast.parse((FIRMWARE / rel).read_text(encoding="utf-8"), rel)
    package = rel.rsplit("/", 1)[0].replace("/", ".") if "/" in rel else ""
    if package.startswith(LIB + "."):
        package = package[len(LIB) + 1:]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(p for p in up + [base] if p)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import module`
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            hit = _module_file(".".join(parts[:i]))
            if hit is not None:
                found.add(hit)
    found.discard(rel)
    return found


def gates(cfg: dict, board: str) -> dict[str, tuple[bool, str]]:
    """Module -> (whether the checked configuration `cfg` (kspfw.config.check) needs it, why
    not when it does not). Modules not listed go where the imports take them."""
    mqtt = cfg.get("mqtt") is not None
    sensor = cfg["agent"] == "sensor"
    outputs = cfg.get("outputs") or []
    selects = [o for o in outputs if "select" in o]
    subscribes = sensor and not mqtt and bool(cfg.get("period_property")) or bool(selects)
    types = {s["type"] for s in cfg.get("sensors") or []}
    no_mqtt = 'no "mqtt" section (the MQTT telemetry mode)'
    out = {
        "kspfw/telemetry_agent.py": (mqtt, no_mqtt),
        "lib/umqtt/simple.py": (mqtt, no_mqtt),
        "kspfw/sensor_agent.py": (sensor and not mqtt, 'agent is "actuator"' if not sensor
                                  else 'the "mqtt" section: telemetry, not the SIB'),
        "kspfw/actuator_agent.py": (not sensor, 'agent is "sensor"'),
        "kspfw/agent.py": (not mqtt, 'the "mqtt" section: no SIB, no KSP client'),
        "kspfw/secure.py": (cfg.get("kp_key") is not None,
                            'no "kp.key" (messages are not sealed)'),
        "kspfw/results.py": (subscribes, "no SELECT subscription (period_property, an output's "
                                         '"select")' if not mqtt else "no SIB to query"),
        "kspfw/options.py": (False, NOT_BY_AGENTS),
        "kspfw/drivers/__init__.py": (bool(types), "no sensors"),
    }
    for rel in firmware_files():
        name = rel.rsplit("/", 1)[-1][:-3]
        if rel.startswith(PACKAGE + "/drivers/") and name != "__init__":
            if name.startswith("chip_temp_"):
                wanted = name == f"chip_temp_{board}" and "chip_temp" in types
                why = ('no "chip_temp" sensor' if name == f"chip_temp_{board}"
                       else f"the {name[10:]} board's driver (--board {board})")
            else:
                wanted, why = name in types, f'no "{name}" sensor'
            out[rel] = (wanted, why)
    return out


def select(cfg: dict | None, board: str) -> tuple[list[str], dict[str, str]]:
    """(the modules to copy, {module left out: why}) for configuration `cfg` (None: the
    board's own config.json is kept, so every module but the other board's driver)."""
    every = firmware_files()
    if cfg is None:
        left = {rel: why for rel, (wanted, why) in gates({"agent": "sensor"}, board).items()
                if "/chip_temp_" in rel and not rel.endswith(f"_{board}.py")}
        return [rel for rel in every if rel not in left], left
    table = gates(cfg, board)
    roots = [rel for rel, (wanted, _) in table.items() if wanted and "/drivers/" in rel]
    kept: set[str] = set()
    todo = [ENTRY, *roots]
    while todo:
        rel = todo.pop()
        if rel in kept or not table.get(rel, (True, ""))[0]:
            continue
        kept.add(rel)
        todo.extend(imports(rel))
        parent = rel.rsplit("/", 1)[0]
        if parent.startswith(PACKAGE) and (FIRMWARE / parent / "__init__.py").is_file():
            todo.append(parent + "/__init__.py")
    left = {}
    for rel in every:
        if rel not in kept:
            wanted, why = table.get(rel, (True, ""))
            left[rel] = why if not wanted else "imported only by modules left out"
    return [rel for rel in every if rel in kept], left
