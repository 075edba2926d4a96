"""RP2040 on-chip temperature (°C) from ADC channel 4 (RP2040 datasheet §4.9.5)."""
from machine import ADC


def make(spec):
    adc = ADC(4)
    return lambda: 27 - (adc.read_u16() * 3.3 / 65535 - 0.706) / 0.001721
