"""The sensor drivers' own logic on CPython, behind the hardware seam: a simulated I²C bus
holding a BME280's registers (the bus is the board's part; the register decoding and the
datasheet compensation are the driver's), known answers from Bosch's worked example."""
from __future__ import annotations

import struct
import sys
import time
import types

import pytest

from firmware import harness

harness.import_path()


class RegisterBus:
    """An I²C bus with one device whose registers are a bytearray (what `machine.I2C` gives the
    driver: `readfrom_mem` / `writeto_mem`)."""

    def __init__(self, addr: int, registers: dict[int, bytes]) -> None:
        self.addr = addr
        self.mem = bytearray(256)
        for reg, data in registers.items():
            self.mem[reg:reg + len(data)] = data
        self.writes: list[tuple[int, bytes]] = []

    def readfrom_mem(self, addr: int, reg: int, n: int) -> bytes:
        if addr != self.addr:
            raise OSError(19, "ENODEV")
        return bytes(self.mem[reg:reg + n])

    def writeto_mem(self, addr: int, reg: int, data: bytes) -> None:
        self.writes.append((reg, bytes(data)))


@pytest.fixture
def bme280(monkeypatch):
    machine = types.ModuleType("machine")
    machine.I2C = machine.Pin = object  # only `make` builds them; the tests pass the bus
    monkeypatch.setitem(sys.modules, "machine", machine)
    monkeypatch.setattr(time, "sleep_ms", lambda ms: None, raising=False)
    sys.modules.pop("kspfw.drivers.bme280", None)
    from kspfw.drivers import bme280 as module
    return module


# Bosch's worked example (BMP280 datasheet, "Compensation formula", the same calibration words
# and formulas as the BME280's temperature and pressure): T = 25.08 °C, p = 100653.27 Pa.
T_CAL = (27504, 26435, -1000)
P_CAL = (36477, -10685, 3024, 2855, 140, -7, 15500, -14600, 6000)
ADC_T, ADC_P = 519888, 415148


def registers(adc_h: int, h: tuple[int, int, int, int, int, int]) -> dict[int, bytes]:
    h1, h2, h3, h4, h5, h6 = h
    e4, e5, e6 = (h4 >> 4) & 0xFF, ((h5 & 0x0F) << 4) | (h4 & 0x0F), (h5 >> 4) & 0xFF
    data = bytes((ADC_P >> 12, (ADC_P >> 4) & 0xFF, (ADC_P & 0x0F) << 4,
                  ADC_T >> 12, (ADC_T >> 4) & 0xFF, (ADC_T & 0x0F) << 4, adc_h >> 8, adc_h & 0xFF))
    return {0xD0: b"\x60", 0x88: struct.pack("<Hhh", *T_CAL) + struct.pack("<Hhhhhhhhh", *P_CAL),
            0xA1: bytes((h1,)), 0xE1: struct.pack("<hB", h2, h3) + bytes((e4, e5, e6)) +
            struct.pack("<b", h6), 0xF7: data}


H_CAL = (75, 362, 0, 313, 50, 30)  # a real chip's humidity words


def test_bme280_gives_the_datasheet_answers(bme280):
    bus = RegisterBus(0x76, registers(0x6B00, H_CAL))
    temperature, pressure, humidity = bme280.BME280(bus).read()
    assert temperature == pytest.approx(25.08, abs=0.005)
    assert pressure == pytest.approx(1006.5327, abs=0.001)  # hPa
    assert 0.0 <= humidity <= 100.0
    assert bus.writes == [(0xF2, b"\x01"), (0xF4, b"\x25")]  # humidity x1, then forced mode


def test_bme280_signed_humidity_words_and_the_clamp(bme280):
    """H4/H5 are 12-bit values split over three registers, sign in the top byte: a chip with
    negative words must read the same as the formula with those words."""
    neg = (75, 362, 0, -100, -50, 30)
    dev = bme280.BME280(RegisterBus(0x76, registers(0x6B00, neg)))
    assert dev.h == neg
    dry = bme280.BME280(RegisterBus(0x76, registers(0, H_CAL)))
    assert dry.read()[2] == 0.0  # the formula goes negative: clamped to 0 %RH


def test_bme280_absent_is_a_clear_error(bme280):
    with pytest.raises(OSError, match="no BME280 at 0x77"):
        bme280.BME280(RegisterBus(0x77, {0xD0: b"\x58"}), 0x77)  # a BMP280's chip ID
