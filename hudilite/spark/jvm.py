"""How a JVM option is written into Spark's `spark.driver.extraJavaOptions` (and the executors'): Spark's launcher
splits that string at whitespace, with quotes and backslashes read as a shell reads them, so an option naming a
path with a space (a warehouse under "My Projects") must be quoted or the JVM gets two arguments and exits."""

from __future__ import annotations

_SPECIAL = frozenset(" \t\n\r\"'\\")


def java_option(option: str) -> str:
    """`option` as one argument of an extra-Java-options string: as it is when nothing in it needs quoting, else
    in double quotes with backslashes and double quotes escaped."""
    if not any(c in _SPECIAL for c in option):
        return option
    return '"' + option.replace("\\", "\\\\").replace('"', '\\"') + '"'


def java_property(name: str, value: str) -> str:
    """The system property `-Dname=value` as one argument (see `java_option`)."""
    return java_option(f"-D{name}={value}")
