"""tests/functional/test_metastore.py over Spark Connect (a pytest subprocess whose `spark` fixture is a Connect
session to the test session's `hudilite server`): `describe` reads its catalog statement's row from the
reply (hudilite/spark/results.py) and says what the catalog API and the analysed schema say; the publish's
statements and what other sessions read (new ones, and one that read the entry before the commits) are the
same as in a classic session."""

import re

import pytest

from tests.functional.connect.conftest import run_client

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_metastore_over_connect(connect_server):
    out = run_client(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::FutureWarning",
                      "tests/functional/test_metastore.py"],
                     env={"HUDILITE_TEST_CONNECT": connect_server.url}, timeout=900)
    tail = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, tail
    assert re.match(r"11 passed", out.stdout.strip().splitlines()[-1]), tail
