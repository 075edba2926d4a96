"""Analog light sensor (LDR divider or phototransistor) on an ADC pin, as 0..100 %."""
from machine import ADC, Pin


def make(spec):
    adc = ADC(Pin(spec["pin"]))
    return lambda: adc.read_u16() * 100 / 65535
