"""Bridge that puts KSP devices in front of a SEPA broker."""
