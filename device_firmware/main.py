"""Board entry point (MicroPython runs main.py after boot): read config.json, bring up Wi-Fi and
the link to the SIB, run the configured agent. Every bad setting is printed on the console."""
import gc
import time

from kspfw.board import MCUBoard


def settings(board):
    """config.json through kspfw.config's checks (None when a setting is bad), which are then
    unloaded."""
    from kspfw import config

    try:
        return config.load("config.json", board.free_ram())
    except config.ConfigError:
        return None
    finally:
        config.unload()


def make_link(cfg):
    from kspfw.net import Link

    return Link(cfg["host"], cfg["port"], cfg["transport"] == "tcp", cfg["max_size"])


def main():
    board = MCUBoard()
    gc.collect()
    cfg = settings(board)
    if cfg is None:
        print("ksp: fix config.json and reset the board")
        while True:
            time.sleep(60)
    if cfg["mqtt"]:  # a sensor publishing telemetry to an MQTT broker, no SIB
        from kspfw.telemetry_agent import TelemetryAgent, run

        m = cfg["mqtt"]
        print("ksp: sensor agent, telemetry to MQTT %s:%d" % (m["host"], m["port"]))
        run(TelemetryAgent(cfg, board))
        return
    if cfg["agent"] == "sensor":
        from kspfw.sensor_agent import SensorAgent as Kind
    else:
        from kspfw.actuator_agent import ActuatorAgent as Kind
    agent = Kind(cfg, board)
    print("ksp: %s agent, SIB %s:%d/%s, max response %d bytes" % (
        cfg["agent"], cfg["host"], cfg["port"], cfg["transport"], cfg["max_size"]))
    from kspfw.agent import run

    run(agent, make_link)


main()
