"""Monotonic, collision-free instant times (17-digit UTC milliseconds).

Under the table lock: read the newest instant on the timeline, take max(now, newest + 1 ms), create the
requested file with put-if-absent, then keep holding the lock until the local clock has passed the chosen
time by the maximum expected clock skew (the TrueTime idea), so no writer on a machine whose clock lags by
less than that can later pick a smaller or equal time.
"""

from __future__ import annotations

import datetime as _dt
import time

FORMAT = "%Y%m%d%H%M%S"


def format_instant(epoch_ms: int) -> str:
    d = _dt.datetime.fromtimestamp(epoch_ms / 1000, tz=_dt.timezone.utc)
    return d.strftime(FORMAT) + f"{epoch_ms % 1000:03d}"


def parse_instant(t: str) -> int:
    """Epoch milliseconds of a 14- or 17-digit instant time (UTC)."""
    if len(t) not in (14, 17) or not t.isdigit():
        raise ValueError(f"not an instant time: {t!r} (expected yyyyMMddHHmmss[SSS])")
    d = _dt.datetime.strptime(t[:14], FORMAT).replace(tzinfo=_dt.timezone.utc)
    ms = int(t[14:]) if len(t) == 17 else 0
    return int(d.timestamp()) * 1000 + ms


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def next_instant_time(last: str | None, *, clock=now_ms) -> str:
    t = clock()
    if last is not None:
        t = max(t, parse_instant(last) + 1)
    return format_instant(t)


def wait_for_skew(instant: str, max_skew_ms: int, *, clock=now_ms) -> None:
    """Block until the local clock is past `instant` + `max_skew_ms`."""
    target = parse_instant(instant) + max_skew_ms
    while True:
        remaining = target - clock()
        if remaining < 0:
            return
        time.sleep(remaining / 1000 + 0.0005)


def normalize_instant_arg(value) -> str:
    """Accept an instant time, epoch seconds/milliseconds or an ISO/RFC 3339 string; return 17 digits."""
    if value is None:
        raise ValueError("instant is None")
    if isinstance(value, (_dt.datetime, _dt.date)):
        if not isinstance(value, _dt.datetime):
            value = _dt.datetime(value.year, value.month, value.day)
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        return format_instant(int(value.timestamp() * 1000))
    s = str(value).strip()
    if s.isdigit():
        if len(s) == 17:
            return s
        if len(s) == 14:
            return s + "000"
        n = int(s)
        if len(s) <= 10:
            return format_instant(n * 1000)
        if len(s) <= 13:
            return format_instant(n)
        raise ValueError(f"cannot interpret {value!r} as an instant")
    try:
        d = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot interpret {value!r} as an instant (use yyyyMMddHHmmssSSS, epoch seconds/ms or ISO 8601)"
        ) from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.timezone.utc)
    return format_instant(int(d.timestamp() * 1000))
