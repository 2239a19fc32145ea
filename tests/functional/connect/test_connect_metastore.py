"""tests/functional/test_metastore.py over Spark Connect (a pytest subprocess whose `spark` fixture is a Connect
session to the test session's `hudilite server`): `describe` reads its catalog statement's row from the
reply (hudilite/spark/results.py) and says what the catalog API and the analysed schema say; the publish's
statements and what other sessions read (new ones, and one that read the entry before the commits) are the
same as in a classic session."""

import pytest

from tests.functional.connect.conftest import run_tests_over_connect

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_metastore_over_connect(connect_server):
    run_tests_over_connect(connect_server, ["tests/functional/test_metastore.py"], r"11 passed")
