#!/usr/bin/env bash
# Create .venv and install hudilite with the dbt adapter, S3 storage, Spark Connect and its test and bench extras (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[dbt,s3,test,bench,connect]"
# `dbt --version` lists the adapters it finds as files, <site-packages>/dbt/adapters/*/__version__.py; an editable
# install keeps ours in this tree, so link the package there (imports resolve to the same files either way).
site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
[ -e "$site/dbt/adapters/hudilite" ] || ln -s "$PWD/dbt/adapters/hudilite" "$site/dbt/adapters/hudilite"
# Apache Hudi itself (1.2, Spark 3.5 bundle) in .venv-judge, the live format judge of tests/judge (cached; tests only)
./scripts/setup_judge.sh
# the driver JVM class archive (docs/dbt-adapter.md): written once here rather than at the end of the first dbt command
python scripts/warm_class_archive.py
