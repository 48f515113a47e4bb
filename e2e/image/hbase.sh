#!/usr/bin/env bash
# Builds the JVM image the real-pod suite (e2e/pods) runs HBase from, with no
# registry: Debian's JRE (debootstrap of bookworm with
# openjdk-17-jre-headless, from the mirror apt uses), HBase 2.6.4's classpath
# as e2e/hbase resolves it from Maven Central (hbase-server with its Hadoop 3
# client jars, ZooKeeper included), the e2e workload (e2e/hbase's Workload),
# an hbase-site.xml for the suite's cluster and an entry point:
#
#   hbase master|regionserver|zookeeper   the server, in the foreground
#   hbase workload ARGS...                the checking client (Workload.java)
#   hbase fs ARGS...                      Hadoop's FsShell (hadoop fs)
#
# The ozrs jar is not in it: a pod puts it on HBASE_CLASSPATH, as the HBase
# example does (an init container copies it from the project's image).
# Prints the image name (localhost/ozone-e2e/hbase:<hash of its inputs>);
# an image of that name already in the store is reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
source e2e/image/podman.sh
ensure_podman
source hadoop-fs/maven.sh
(cd e2e/hbase && mvn -B -q -ntp package dependency:build-classpath -Dmdep.outputFile=target/hbase.cp) >&2
IFS=: read -r -a jars < e2e/hbase/target/hbase.cp || true  # no final newline
jars+=("$PWD/e2e/hbase/target/ozone-hbase-e2e-0.1.0.jar")
tag=$( (cat e2e/image/hbase.sh; sha256sum "${jars[@]}") | sha256sum | cut -c1-16)
image=localhost/ozone-e2e/hbase:$tag
if podman image exists "$image"; then echo "$image"; exit 0; fi

start=$SECONDS
work=target/image/hbase
rm -rf "$work"; mkdir -p "$work"
root=$work/rootfs
# The JRE's root (debootstrap, the slow part) is cached under target/image
# and made again only when the packages it holds change.
packages=openjdk-17-jre-headless,curl
base=target/image/jre-bookworm-$(printf '%s' "$packages" | sha256sum | cut -c1-8).tar
if [ ! -f "$base" ]; then
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2> /dev/null | head -1)
  mirror=${mirror:-$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2> /dev/null)}
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "making the JVM image's root with debootstrap from $mirror" >&2
  debootstrap --variant=minbase --include=$packages bookworm "$root" "$mirror" \
    > "$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/usr/share/{doc,man,info,locale}/* "$root"/var/cache/apt/archives/*.deb \
    "$root"/var/lib/apt/lists/* "$root"/var/log/* "$root"/tmp/*
  tar -C "$root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
else
  mkdir -p "$root" && tar -C "$root" -xf "$base"
fi
# Hadoop's login (UserGroupInformation) needs a name for the process's uid.
echo 'hbase:x:1000:1000:HBase:/tmp:/bin/sh' >> "$root/etc/passwd"
echo 'hbase:x:1000:' >> "$root/etc/group"
mkdir -p "$root/opt/hbase/lib" "$root/opt/hbase/conf" "$root/opt/ozone-lib"
cp "${jars[@]}" "$root/opt/hbase/lib/"
cat > "$root/opt/hbase/conf/hbase-site.xml" <<'XML'
<configuration>
  <!-- The suite's cluster: ZooKeeper is the Service hbase-zookeeper in the
       namespace hbase; HBase's files are in the bucket /vol1/hbase. -->
  <property><name>hbase.cluster.distributed</name><value>true</value></property>
  <property><name>hbase.rootdir</name><value>ozrs://ozone/vol1/hbase/hbase</value></property>
  <property><name>hbase.wal.dir</name><value>ozrs://ozone/vol1/hbase/wal</value></property>
  <property><name>hbase.tmp.dir</name><value>/tmp/hbase</value></property>
  <property><name>hbase.zookeeper.quorum</name><value>hbase-zookeeper.hbase.svc.cluster.local</value></property>
  <property><name>hbase.zookeeper.property.clientPort</name><value>2181</value></property>
  <property><name>zookeeper.session.timeout</name><value>10000</value></property>
  <property><name>hbase.master.info.port</name><value>-1</value></property>
  <property><name>hbase.regionserver.info.port</name><value>-1</value></property>
  <property><name>hbase.master.wait.on.regionservers.mintostart</name><value>2</value></property>
  <property><name>hbase.balancer.period</name><value>3600000</value></property>
  <property><name>hbase.client.retries.number</name><value>40</value></property>
  <property><name>hbase.unsafe.stream.capability.enforce</name><value>true</value></property>
</configuration>
XML
# Hadoop's FsShell asks for core-site.xml by name.
echo '<configuration/>' > "$root/opt/hbase/conf/core-site.xml"
cat > "$root/opt/hbase/conf/log4j.properties" <<'PROPS'
log4j.rootLogger=INFO,C
log4j.appender.C=org.apache.log4j.ConsoleAppender
log4j.appender.C.Target=System.err
log4j.appender.C.layout=org.apache.log4j.PatternLayout
log4j.appender.C.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{2}: %m%n
log4j.logger.org.apache.zookeeper=WARN
PROPS
cat > "$root/usr/local/bin/hbase" <<'SH'
#!/bin/sh
# hbase master|regionserver|zookeeper|workload|fs ARGS...
set -e
opts="-XX:+UseParallelGC -Djava.net.preferIPv4Stack=true -Xmx${HBASE_HEAPSIZE:-768m}
 -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true
 --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
 --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
 --add-opens java.base/java.lang.reflect=ALL-UNNAMED --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
 --add-exports java.base/sun.net.dns=ALL-UNNAMED --add-exports java.base/sun.net.util=ALL-UNNAMED"
cp="${HBASE_CONF_DIR:-/opt/hbase/conf}:/opt/hbase/lib/*${HBASE_CLASSPATH:+:$HBASE_CLASSPATH}"
role=${1:-regionserver}
[ $# -gt 0 ] && shift
case $role in
  master) exec java $opts -cp "$cp" org.apache.hadoop.hbase.master.HMaster start ;;
  regionserver) exec java $opts -cp "$cp" org.apache.hadoop.hbase.regionserver.HRegionServer start ;;
  zookeeper) mkdir -p /tmp/zookeeper
    exec java -Xmx128m -Dzookeeper.admin.enableServer=false -cp "$cp" \
      org.apache.zookeeper.server.ZooKeeperServerMain 2181 /tmp/zookeeper ;;
  workload) exec java $opts -cp "$cp" io.ozoners.e2e.hbase.Workload "$@" ;;
  fs) exec java -Xmx256m -cp "$cp" org.apache.hadoop.fs.FsShell "$@" ;;
  *) echo "usage: hbase master|regionserver|zookeeper|workload|fs ARGS..." >&2; exit 2 ;;
esac
SH
chmod 755 "$root/usr/local/bin/hbase"
tar -C "$root" -c . | podman import -q --change 'ENTRYPOINT ["/usr/local/bin/hbase"]' \
  --change 'CMD ["regionserver"]' --change 'USER 1000:1000' --change 'ENV HOME=/tmp' - "$image" > /dev/null
rm -rf "$root"
# Earlier builds of this image are of no more use.
for old in $(podman images --format '{{.Repository}}:{{.Tag}}' localhost/ozone-e2e/hbase); do
  [ "$old" = "$image" ] || podman rmi -f "$old" > /dev/null 2>&1 || true
done
echo "built $image in $((SECONDS - start)) s" >&2
echo "$image"
