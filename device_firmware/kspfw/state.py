"""load_state/save_state and the sealed mode's counter over files: the board's flash where it
has no RTC memory (hal.py lists what a board provides). Apart from hal.py so a board that does
not speak KSP (the MQTT mode) loads no codec with it."""
import json


class FileState:
    """load_state/save_state over a JSON file (boards without RTC memory, and the simulation)."""

    def __init__(self, path="ksp_state.json"):
        self.path = path

    def load_counter(self):
        try:
            return int(open(self.path + ".ctr").read())
        except (OSError, ValueError):
            return 0

    def save_counter(self, n):
        with open(self.path + ".ctr", "w") as f:
            f.write(str(n))

    def load_state(self):
        try:
            with open(self.path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def save_state(self, obj):
        with open(self.path, "w") as f:
            json.dump(obj, f)
