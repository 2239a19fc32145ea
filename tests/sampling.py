"""CI runs fixed samples of the exhaustive tests; `HUDILITE_FULL=1` runs them whole (README: "the full run").

Each exhaustive test sizes itself with `size(env, ci, full)`: its own variable when set, else the full size
under HUDILITE_FULL=1, else the CI sample."""

import os

FULL = os.environ.get("HUDILITE_FULL", "") not in ("", "0")


def size(env: str, ci: int, full: int) -> int:
    value = os.environ.get(env)
    return int(value) if value else (full if FULL else ci)
