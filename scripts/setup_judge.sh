#!/usr/bin/env bash
# The Apache Hudi judge for tests/judge (idempotent; skips what is present): a separate .venv-judge with pyspark 3.5
# (ours runs pyspark 4.x, which the Hudi 1.2 Spark bundle does not support) and the Hudi Spark 3.5 bundle jar, copied
# into the hudilite jar cache. Maven Central serves no hudi-spark4.0-bundle_2.13 release (1.1.0, 1.1.1, 1.2.0 are all
# "not found"), so the judge is Apache Hudi 1.2.0 on Spark 3.5. Only tests use it; the product downloads nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PYSPARK_VERSION=3.5.7
HUDI_VERSION=${HUDI_JUDGE_VERSION:-1.2.0}
ARTIFACT=org.apache.hudi:hudi-spark3.5-bundle_2.12:$HUDI_VERSION
JAR=hudi-spark3.5-bundle_2.12-$HUDI_VERSION.jar
JARS=${XDG_CACHE_HOME:-$HOME/.cache}/hudilite/jars
if ! .venv-judge/bin/python -c "import pyspark, sys; sys.exit(pyspark.__version__ != '$PYSPARK_VERSION')" 2>/dev/null; then
    [ -x .venv-judge/bin/python ] || "$PY" -m venv .venv-judge
    .venv-judge/bin/python -m pip install -q --upgrade pip
    .venv-judge/bin/python -m pip install -q "pyspark==$PYSPARK_VERSION"
fi
if [ ! -s "$JARS/$JAR" ]; then
    mkdir -p "$JARS"
    M2=${MAVEN_REPO:-$HOME/.m2/repository}/org/apache/hudi/hudi-spark3.5-bundle_2.12/$HUDI_VERSION/$JAR
    [ -s "$M2" ] || mvn -U -q dependency:get -Dartifact="$ARTIFACT" -Dtransitive=false
    cp "$M2" "$JARS/$JAR.tmp" && mv "$JARS/$JAR.tmp" "$JARS/$JAR"
fi
