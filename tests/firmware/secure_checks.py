# Runs inside MicroPython (and CPython): the firmware's sealing (kspfw.secure) on the sealed
# golden vectors and on HMAC cases, plus its µs per seal/open. Writes one JSON object.
#     secure_checks.py FIRMWARE_DIR INPUT_JSON OUTPUT_JSON
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
from kspfw.secure import Sealer, hmac  # noqa: E402

MICRO = sys.implementation.name == "micropython"


def us():
    return time.ticks_us() if MICRO else time.perf_counter() * 1e6  # type: ignore[attr-defined]


with open(sys.argv[2]) as f:
    cases = json.load(f)
out = {"hmac": [hmac(bytes.fromhex(k), bytes.fromhex(m)).hex() for k, m in cases["hmac"]],
       "vectors": {}}
for v in cases["vectors"]:
    key, kp = bytes.fromhex(v["key"]), bytes.fromhex(v["kp_id"])
    s = Sealer(key, kp, v["counter"])
    r = {}
    if v["direction"] == "kp_to_sib":
        r["sealed"] = s.seal(bytes.fromhex(v["inner_hex"])).hex()
    else:
        data = bytes.fromhex(v["hex"])
        inner = s.open(data)
        r["opened"] = inner.hex() if inner is not None else None
        r["replay"] = s.open(data) is None
        bad = bytearray(data)
        bad[5] ^= 1
        r["tampered"] = Sealer(key, kp).open(bytes(bad)) is None
        r["wrong_key"] = Sealer(bytes(32), kp).open(data) is None
    out["vectors"][v["name"]] = r
# Cost of one seal and one open of a 40-byte message; rounds of tens of ms (the WebAssembly
# port's ticks_us advances in whole milliseconds).
s, peer = Sealer(bytes(range(32)), bytes(16)), Sealer(bytes(range(32)), bytes(16))
peer.inn = s.out  # open what `s` seals (the SIB direction's key is the other one)
msg = bytes(40)
n = cases["rounds"]
t = us()
sealed = [s.seal(msg) for _ in range(n)]
t_seal = (us() - t) / n
t = us()
ok = sum(1 for d in sealed if peer.open(d) is not None)
t_open = (us() - t) / n
out["cost"] = {"seal_us": t_seal, "open_us": t_open, "opened": ok, "n": n}
with open(sys.argv[3], "w") as f:
    json.dump(out, f)
