"""Write the golden vectors of sealed messages (`docs/wire-format.md` section 13) to
`tests/vectors/secure/`: a request, a RES and an IND of the plain vectors, sealed with a fixed
key, KP ID and counter, so every implementation can check its HMAC and layout byte for byte.

    .venv/bin/python -m tools.make_secure_vectors
"""
from __future__ import annotations

import json
from pathlib import Path

from ksp.secure import derive_keys, seal

ROOT = Path(__file__).resolve().parent.parent
PLAIN = ROOT / "tests" / "vectors"
OUT = PLAIN / "secure"

KEY = bytes(range(32))
KP_ID = bytes.fromhex("00112233445566778899aabbccddeeff")
#: (vector name, plain vector it seals, counter)
CASES = [
    ("sealed_req_select_con_udp", "req_select_con_udp", 0),
    ("sealed_res_select_udp", "res_select_udp", 1),
    ("sealed_ind_select_udp_seq_1", "ind_select_udp_seq_1", 0xFFFFFFFF),
]


def vectors() -> dict[str, dict]:
    keys = derive_keys(KEY)
    out = {}
    for name, plain, counter in CASES:
        v = json.loads((PLAIN / f"{plain}.json").read_text())
        kp_to_sib = v["direction"] == "kp_to_sib"
        dir_key = keys.kp_to_sib if kp_to_sib else keys.sib_to_kp
        out[name] = {
            "name": name,
            "description": f"{plain} sealed {'KP->SIB' if kp_to_sib else 'SIB->KP'}, counter {counter}",
            "direction": v["direction"],
            "key": KEY.hex(),
            "kp_id": KP_ID.hex(),
            "counter": counter,
            "direction_key": dir_key.hex(),
            "inner": plain,
            "inner_hex": v["hex"],
            "hex": seal(dir_key, KP_ID, counter, bytes.fromhex(v["hex"])).hex(),
        }
    return out


def render(v: dict) -> str:
    return json.dumps(v, indent=2, sort_keys=True) + "\n"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for name, v in vectors().items():
        (OUT / f"{name}.json").write_text(render(v))


if __name__ == "__main__":
    main()
