"""DHT22 (AM2302) on one GPIO, through MicroPython's `dht` module; spec "quantity":
"temperature" (°C, default) or "humidity" (%RH)."""
import dht
from machine import Pin


def make(spec):
    sensor = dht.DHT22(Pin(spec["pin"]))
    humidity = spec.get("quantity") == "humidity"

    def read():
        sensor.measure()  # OSError on a checksum or timeout failure
        return float(sensor.humidity() if humidity else sensor.temperature())

    return read
