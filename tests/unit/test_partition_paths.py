"""Partition values parsed back from paths (pruning) and the paths a write refuses, for URL-encoded tables
(Apache Hudi's hoodie.datasource.write.partitionpath.urlencode) and values Hudi writes as nested directories."""

import pytest

from hudilite.keygen import URL_ENCODED, KeySpec, partition_path_problem, partition_values, unescape_partition_value


@pytest.mark.parametrize("raw, value", [("2024%2F01%2F01", "2024/01/01"), ("10%3A30 100%25", "10:30 100%"),
                                        ("a%3Db", "a=b"), ("%7e%7E", "~~"), ("100%", "100%"), ("%zz%2", "%zz%2"),
                                        ("plain", "plain"), ("%C3%A9", "\u00c3\u00a9")])
def test_unescape_is_hudis(raw, value):
    # Hudi decodes each %XX to the character XX (one byte each, as its escaping wrote them: ASCII only)
    assert unescape_partition_value(raw) == value


def test_values_of_url_encoded_paths_are_decoded_only_for_such_tables():
    one = KeySpec(("id",), ("region",), True)
    assert partition_values(one, "region=2024%2F01%2F01", url_encoded=True) == {"region": "2024/01/01"}
    assert partition_values(one, "region=2024%2F01%2F01") == {"region": "2024%2F01%2F01"}
    assert partition_values(one, "region=a=b") == {"region": "a=b"}
    two = KeySpec(("id",), ("d", "h"), False)
    assert partition_values(two, "2024-01-01/10%3A00", url_encoded=True) == {"d": "2024-01-01", "h": "10:00"}


def test_a_path_deeper_than_the_fields_names_no_value():
    # urlencode off: Hudi writes 'americas/brazil/sao_paulo' as three levels; no level is the field's value
    assert partition_values(KeySpec(("id",), ("city",), False), "americas/brazil/sao_paulo") == {}
    assert partition_values(KeySpec(("id",), ("city",), True), "city=americas/brazil/sao_paulo") == {}
    assert partition_values(KeySpec(("id",), ("a", "b"), False), "x") == {}


def test_a_url_encoded_table_refuses_values_hudi_escapes():
    assert partition_path_problem("region=plain", 1, url_encoded=True, hive_style=True) is None
    assert partition_path_problem("2024-01-01/10", 2, url_encoded=True) is None
    for ch in sorted(URL_ENCODED - {"/"}):
        problem = partition_path_problem(f"v{ch}", 1, url_encoded=True)
        assert problem and repr(ch) in problem and "urlencode" in problem, ch
        assert partition_path_problem(f"v{ch}", 1) is None or ch in ".", ch  # as before for other tables
    # hive-style: the '=' after the field name is not the value's
    assert partition_path_problem("region=a", 1, url_encoded=True, hive_style=True) is None
    assert "'='" in partition_path_problem("region=a=b", 1, url_encoded=True, hive_style=True)
    assert "may not contain '/'" in partition_path_problem("a/b", 1, url_encoded=True)
