"""KnownEntries: the catalog facts one dbt invocation holds (dbt/adapters/hudilite/run_state.py)."""

from dbt.adapters.hudilite import run_state
from dbt.adapters.hudilite.run_state import KnownEntries


def test_facts_hold_within_one_invocation_until_forgotten(monkeypatch):
    inv = ["a"]
    monkeypatch.setattr(run_state, "_invocation_id", lambda: inv[0])
    k = KnownEntries()
    assert k.path("s.m") is None and k.entry("s.m") is KnownEntries.UNKNOWN
    k.published("s.up", "/w/s/up")
    k.note_entry("s.m", None)  # described: no entry yet (a first build)
    assert k.path("s.up") == "/w/s/up"
    assert k.entry("s.m") is None  # a peek keeps it
    assert k.entry("s.m", take=True) is None
    assert k.entry("s.m") is KnownEntries.UNKNOWN  # taken once
    k.note_entry("s.m", "entry")
    k.published("s.m", None)  # the entry is being changed: neither its path nor a noted entry is known
    assert k.entry("s.m") is KnownEntries.UNKNOWN and k.path("s.m") is None
    k.published("s.m", "/w/s/m")
    k.forget()  # any other statement
    assert k.path("s.up") is None and k.path("s.m") is None
    k.published("s.up", "/w/s/up")
    inv[0] = "b"  # a later invocation in the same process knows nothing of the earlier one's
    assert k.path("s.up") is None
