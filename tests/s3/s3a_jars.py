"""hadoop-aws and the AWS SDK v2 modules it needs, fetched from Maven Central for the tests and the bench (never by
the product): `jars()` returns their paths, cached under ~/.cache/hudilite/jars/<version key>.

hadoop-aws must match pyspark's bundled Hadoop client (hadoop-client-api-<v>.jar in pyspark/jars). Its pom names
the whole `software.amazon.awssdk:bundle` (~600 MB); the `s3` and `s3-transfer-manager` modules with their
dependencies (~18 MB) are what S3AFileSystem loads for reads and writes. Artifacts pyspark already ships (netty,
slf4j, commons-codec/logging, httpclient) are left out, so the JVM has one copy of each."""

from __future__ import annotations

import glob
import os
import subprocess
import tempfile

import pyspark

HADOOP_VERSION = "3.5.0"
AWS_SDK_VERSION = "2.35.4"  # aws-java-sdk-v2.version in hadoop-project 3.5.0's pom
ANALYTICS_ACCELERATOR_VERSION = "1.3.1"  # amazon-s3-analyticsaccelerator-s3.version, ditto
CACHE = os.path.join(os.path.expanduser(os.environ.get("XDG_CACHE_HOME", "~/.cache")), "hudilite", "jars")
KEY = f"hadoop-aws-{HADOOP_VERSION}-awssdk-{AWS_SDK_VERSION}"
_EXCLUDED_GROUPS = "io.netty,org.slf4j,commons-codec,commons-logging,org.apache.httpcomponents"

_POM = f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>hudilite.tests</groupId><artifactId>s3a-jars</artifactId><version>1</version>
  <dependencies>
    <dependency><groupId>org.apache.hadoop</groupId><artifactId>hadoop-aws</artifactId>
      <version>{HADOOP_VERSION}</version>
      <exclusions><exclusion><groupId>*</groupId><artifactId>*</artifactId></exclusion></exclusions></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>s3</artifactId>
      <version>{AWS_SDK_VERSION}</version></dependency>
    <dependency><groupId>software.amazon.awssdk</groupId><artifactId>s3-transfer-manager</artifactId>
      <version>{AWS_SDK_VERSION}</version></dependency>
    <dependency><groupId>software.amazon.s3.analyticsaccelerator</groupId><artifactId>analyticsaccelerator-s3</artifactId>
      <version>{ANALYTICS_ACCELERATOR_VERSION}</version></dependency>
  </dependencies>
</project>
"""


def pyspark_hadoop_version() -> str | None:
    """The Hadoop client version pyspark bundles, from its hadoop-client-api jar's name."""
    found = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    return os.path.basename(found[0])[len("hadoop-client-api-"):-len(".jar")] if found else None


def jars() -> list[str]:
    """Paths of the jars (downloaded by Maven on the first call, ~30 s; later calls only list the cache)."""
    have = pyspark_hadoop_version()
    if have != HADOOP_VERSION:
        raise RuntimeError(f"pyspark bundles Hadoop {have}, these tests fetch hadoop-aws {HADOOP_VERSION}: "
                           "update HADOOP_VERSION and the SDK versions from hadoop-project's pom")
    out = os.path.join(CACHE, KEY)
    done = os.path.join(out, ".complete")
    if not os.path.exists(done):
        os.makedirs(CACHE, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as work:
            with open(os.path.join(work, "pom.xml"), "w") as f:
                f.write(_POM)
            target = os.path.join(work, "jars")
            subprocess.run(["mvn", "-q", "-B", "dependency:copy-dependencies", f"-DoutputDirectory={target}",
                            "-DincludeScope=runtime", f"-DexcludeGroupIds={_EXCLUDED_GROUPS}"],
                           cwd=work, check=True, stdout=subprocess.DEVNULL)
            open(os.path.join(target, ".complete"), "w").close()
            try:  # a concurrent fetch may have won: its copy is as good
                os.rename(target, out)
            except OSError:
                if not os.path.exists(done):
                    raise
    return sorted(glob.glob(os.path.join(out, "*.jar")))


if __name__ == "__main__":  # scripts/setup.sh: fetch ahead of the test run
    print("\n".join(jars()))
