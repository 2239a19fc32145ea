"""LocalStorage.check_access (the early check of a Spark Connect client's access to a table): a path behind a
directory this process may not enter, or a table it may read but not write, raises PermissionError naming
the directory; a readable table or a creatable new one passes. Run in a subprocess: as root, through
`setpriv` without the capabilities that bypass file permissions."""

import json
import os
import shutil
import subprocess
import sys

import pytest

PROBE = """
import json, sys
from hudilite.storage import LocalStorage

out = {}
for name, path, write in json.loads(sys.argv[1]):
    try:
        LocalStorage().check_access(path, write=write)
        out[name] = "ok"
    except PermissionError as e:
        out[name] = e.filename
print(json.dumps(out))
"""


def test_check_access_follows_permissions(tmp_path):
    prefix = []
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("root without setpriv: permissions do not bind this process")
        prefix = ["setpriv", "--inh-caps=-dac_override,-dac_read_search",
                  "--bounding-set=-dac_override,-dac_read_search"]
    closed, readonly, open_ = tmp_path / "closed", tmp_path / "readonly", tmp_path / "open"
    for d in (closed / "t" / ".hoodie", readonly / "t" / ".hoodie", open_ / "t" / ".hoodie"):
        d.mkdir(parents=True)
    cases = [
        ("closed_read", str(closed / "t" / ".hoodie"), False),
        ("closed_new", str(closed / "new" / ".hoodie"), True),
        ("readonly_read", str(readonly / "t" / ".hoodie"), False),
        ("readonly_write", str(readonly / "t" / ".hoodie"), True),
        ("readonly_new", str(readonly / "new" / ".hoodie"), True),
        ("open_write", str(open_ / "t" / ".hoodie"), True),
        ("open_new", str(open_ / "new" / "deeper" / ".hoodie"), True),
    ]
    os.chmod(closed, 0)
    os.chmod(readonly / "t" / ".hoodie", 0o555)
    os.chmod(readonly, 0o555)
    try:
        out = subprocess.run([*prefix, sys.executable, "-c", PROBE, json.dumps(cases)], capture_output=True,
                             text=True, timeout=120)
    finally:
        os.chmod(closed, 0o755)
        os.chmod(readonly, 0o755)
        os.chmod(readonly / "t" / ".hoodie", 0o755)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == {
        "closed_read": str(closed / "t" / ".hoodie"),  # stat of the path: the closed directory is not searchable
        "closed_new": str(closed / "new" / ".hoodie"),
        "readonly_read": "ok",
        "readonly_write": str(readonly / "t" / ".hoodie"),
        "readonly_new": str(readonly),  # the nearest existing directory, where the table would be created
        "open_write": "ok",
        "open_new": "ok",
    }
