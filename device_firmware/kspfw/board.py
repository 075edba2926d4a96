"""The real board behind the hal seam (kspfw/hal.py): ESP32 or Raspberry Pi Pico W."""
import gc
import json
import sys
import time

import machine

from .state import FileState

_CHIP_TEMP = "kspfw.drivers.chip_temp_" + ("esp32" if sys.platform == "esp32" else "rp2")


def _driver(name):
    module = __import__(name)
    for part in name.split(".")[1:]:
        module = getattr(module, part)
    return module


class MCUBoard(FileState):
    def __init__(self):
        FileState.__init__(self)
        self.wlan = None

    def sensor(self, spec):
        kind = spec["type"]
        return _driver(_CHIP_TEMP if kind == "chip_temp" else "kspfw.drivers." + kind).make(spec)

    def output(self, spec):
        pin = machine.Pin(spec["pin"], machine.Pin.OUT)
        invert = bool(spec.get("invert"))
        return lambda on: pin.value(bool(on) != invert)

    def free_ram(self):
        gc.collect()
        return gc.mem_free()

    def ticks_ms(self):
        return time.ticks_ms()

    def sleep_ms(self, ms):
        time.sleep_ms(ms)

    def deep_sleep(self, ms):
        machine.deepsleep(ms)

    def load_state(self):
        if sys.platform == "esp32":  # RTC memory survives deep sleep, not a power cut
            raw = machine.RTC().memory()
            if raw:
                try:
                    return json.loads(raw)
                except ValueError:
                    return None
            return None
        return FileState.load_state(self)

    def save_state(self, obj):
        if sys.platform == "esp32":
            machine.RTC().memory(json.dumps(obj).encode())
        else:  # the Pico's deep sleep is a reset; its flash file survives
            FileState.save_state(self, obj)

    def network(self, cfg):
        from .net import wifi

        self.wlan = wifi(cfg["ssid"], cfg["wifi_password"])

    def tls(self, ca):
        """A TLS client context that checks the server against the CA certificate in the file
        `ca` (PEM or DER)."""
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.verify_mode = ssl.CERT_REQUIRED  # MicroPython's default is CERT_NONE
        ctx.load_verify_locations(cafile=ca)
        return ctx

    def set_clock(self):
        """UTC from NTP (the telemetry's times); the clock keeps running if it fails."""
        try:
            import ntptime

            ntptime.settime()
        except (ImportError, OSError) as e:
            print("ksp: NTP failed: %s" % e)

    def utc(self):
        """`time.gmtime()`, or None while the clock is not set (before 2025)."""
        t = time.gmtime()
        return t if t[0] >= 2025 else None

    def connected(self):
        return self.wlan is None or self.wlan.isconnected()
