"""Helpers shared by the functional tests."""

from __future__ import annotations

import pytest

from hudilite.table import HoodieTable


def fail_deltacommit(monkeypatch, path: str, write) -> str:
    """Run `write()` - a MOR upsert into `path` - so that it writes its files but never completes (as if the
    writer died before the commit): the instant stays pending with its markers. Returns its instant time."""
    from hudilite.writer import client

    def die(*a, **k):
        raise KeyboardInterrupt("writer killed")

    monkeypatch.setattr(client.Transaction, "complete", die)
    monkeypatch.setattr(client, "abort_write", lambda *a, **k: [])
    with pytest.raises(KeyboardInterrupt):
        write()
    monkeypatch.undo()
    pending = HoodieTable.open(path).timeline.pending()
    assert [i.action for i in pending] == ["deltacommit"]
    return pending[0].timestamp
