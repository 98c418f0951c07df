#!/usr/bin/env bash
# Builds the Java side of `npm run bench:peers` with Maven: the Kafka Streams peer and harness
# (bench/peers/kafka-streams/target/fv-bench-peers-0.jar) and its runtime jars, kafka-tools
# included, in target/lib (all git-ignored). Quick when nothing changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/kafka-streams"
jar=target/fv-bench-peers-0.jar
if [ -f "$jar" ] && [ -f target/lib/.pom.sha256 ] && [ "$(cat target/lib/.pom.sha256)" = "$(sha256sum pom.xml | cut -d' ' -f1)" ] \
   && [ -z "$(find src pom.xml -newer "$jar" -print -quit)" ]; then
  exit 0
fi
command -v mvn >/dev/null || { echo "bench/peers/build.sh: mvn not found (apt-get install maven)" >&2; exit 1; }
echo "bench:peers: building the Kafka Streams peer with Maven ..." >&2
# (Debian's mvn 3.8 prints bare ANSI resets even with -B: strip them.)
mvn -q -B -Dstyle.color=never package dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=target/lib 2>&1 \
  | sed -e $'s/\x1b\\[[0-9;]*m//g' >&2
sha256sum pom.xml | cut -d' ' -f1 > target/lib/.pom.sha256
