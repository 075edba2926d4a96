"""ESP32 on-chip temperature (°C): `esp32.mcu_temperature()` (S2/S3/C3/C6), else the original
ESP32's `raw_temperature()` in °F."""
import esp32


def make(spec):
    mcu = getattr(esp32, "mcu_temperature", None)
    if mcu is not None:
        return lambda: float(mcu())
    return lambda: (esp32.raw_temperature() - 32) / 1.8
