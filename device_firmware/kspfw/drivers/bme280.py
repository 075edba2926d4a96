"""Bosch BME280 over I2C, compact: forced mode, the datasheet's compensation formulas (§4.2.3,
floating-point variant). spec: sda, scl, optional addr (0x76) and quantity: "temperature" (°C),
"pressure" (hPa) or "humidity" (%RH)."""
import struct
import time

from machine import I2C, Pin


class BME280:
    def __init__(self, i2c, addr=0x76):
        self.i2c, self.addr = i2c, addr
        if self._read(0xD0, 1)[0] != 0x60:
            raise OSError(19, "no BME280 at 0x%02x" % addr)
        c = self._read(0x88, 24)
        self.t = struct.unpack("<Hhh", c[0:6])
        self.p = struct.unpack("<Hhhhhhhhh", c[6:24])
        h = self._read(0xA1, 1) + self._read(0xE1, 7)
        e4, e5, e6 = h[4], h[5], h[6]
        self.h = (h[0], struct.unpack("<h", h[1:3])[0], h[3],
                  (e4 << 4) | (e5 & 0x0F) if e4 < 0x80 else ((e4 - 256) << 4) | (e5 & 0x0F),
                  (e6 << 4) | (e5 >> 4) if e6 < 0x80 else ((e6 - 256) << 4) | (e5 >> 4),
                  struct.unpack("<b", h[7:8])[0])

    def _read(self, reg, n):
        return self.i2c.readfrom_mem(self.addr, reg, n)

    def read(self):
        """(temperature °C, pressure hPa, humidity %RH) from one forced measurement."""
        self.i2c.writeto_mem(self.addr, 0xF2, b"\x01")  # humidity x1
        self.i2c.writeto_mem(self.addr, 0xF4, b"\x25")  # temperature x1, pressure x1, forced
        time.sleep_ms(10)
        d = self._read(0xF7, 8)
        adc_p = (d[0] << 12) | (d[1] << 4) | (d[2] >> 4)
        adc_t = (d[3] << 12) | (d[4] << 4) | (d[5] >> 4)
        adc_h = (d[6] << 8) | d[7]
        t1, t2, t3 = self.t
        v1 = (adc_t / 16384 - t1 / 1024) * t2
        v2 = (adc_t / 131072 - t1 / 8192) ** 2 * t3
        fine = v1 + v2
        p1, p2, p3, p4, p5, p6, p7, p8, p9 = self.p
        v1 = fine / 2 - 64000
        v2 = v1 * v1 * p6 / 32768 + v1 * p5 * 2
        v2 = v2 / 4 + p4 * 65536
        v1 = (p3 * v1 * v1 / 524288 + p2 * v1) / 524288
        v1 = (1 + v1 / 32768) * p1
        pressure = 0.0
        if v1:
            pr = (1048576 - adc_p - v2 / 4096) * 6250 / v1
            pressure = (pr + (p9 * pr * pr / 2147483648 + pr * p8 / 32768 + p7) / 16) / 100
        h1, h2, h3, h4, h5, h6 = self.h
        hu = fine - 76800
        hu = (adc_h - (h4 * 64 + h5 / 16384 * hu)) * (
            h2 / 65536 * (1 + h6 / 67108864 * hu * (1 + h3 / 67108864 * hu)))
        hu = hu * (1 - h1 * hu / 524288)
        return fine / 5120, pressure, min(100.0, max(0.0, hu))


def make(spec):
    dev = BME280(I2C(0, sda=Pin(spec["sda"]), scl=Pin(spec["scl"])), spec.get("addr", 0x76))
    index = ("temperature", "pressure", "humidity").index(spec.get("quantity", "temperature"))
    return lambda: dev.read()[index]
