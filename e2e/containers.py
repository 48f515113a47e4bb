"""Container end-to-end on one machine, run by e2e/containers.sh.

Four "nodes" laid out like Kubernetes nodes: for each, a host directory
stands for the hostPath socket and data directories, another for a workload
pod's emptyDir. The OM, the datanodes and their init step run from the pods
that `ozone-operator render` produces for an OzoneCluster; the client sidecar
runs as examples/workloads/hbase-regionserver.yaml declares it. Containers
share the host network (loopback) and nothing else: each has its own pid and
mount namespaces, its own uid, and a read-only root filesystem.

What real pods show (e2e/pods: short-circuit reads across pods, relays, a
node without a datanode, a datanode pod replaced) is not repeated here; this
keeps what needs a hand on the processes: a flipped byte under each
verify-checksum policy, SIGKILL of a datanode mid-read and of a sidecar,
the uids and read-only roots, SIGTERM drains.

Prints one line per step and `N passed, N failed`.
"""

import hashlib
import os
import random
import re
import select
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
WORK = os.path.join(ROOT, "target", "containers")
IMAGE = os.environ["OZONE_IMAGE"]
LABEL = "ozone-e2e=containers"
PREFIX = "ozone-e2e-"
DN_UID, SIDECAR_UID, APP_UID = 1000, 2000, 3000
MIB = 1 << 20
BLOCK = 8 * MIB
NODES = ["node1", "node2", "node3"]
READER_NODE = "node4"  # no datanode here
# How long `podman stop` waits before SIGKILL; the pods' default grace.
GRACE = 30


# ---------------------------------------------------------------- helpers


def podman(*args, check=True, timeout=120, stdin=None):
    r = subprocess.run(
        ["podman", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=stdin,
    )
    if check and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args[:3])}... exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=2):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_for(what, fn, timeout=60, interval=0.2):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # not up yet
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last})")


def ready(http_addr):
    def probe():
        status, _ = http_get(f"http://{http_addr}/readyz")
        return status == 200

    return probe


def metrics(http_addr):
    """The Prometheus text of a process as {name{labels}: value}."""
    _, text = http_get(f"http://{http_addr}/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        out[name] = float(value)
    return out


def metric(http_addr, name):
    return metrics(http_addr).get(name, 0.0)


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.hexdigest()


def host_uid(container):
    """The real uid of a running container's first process, from the host."""
    pid = podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Uid:"):
                return int(line.split()[1])
    raise AssertionError(f"no Uid line for {container}")


def namespaces(container):
    pid = podman("inspect", "--format", "{{.State.Pid}}", container).stdout.strip()
    return {ns: os.readlink(f"/proc/{pid}/ns/{ns}") for ns in ("pid", "mnt")}


def mkdir(path, mode=0o755, uid=0, gid=0):
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


# ------------------------------------------------ pods as podman containers


class Pod:
    """Turns a rendered Kubernetes container into `podman run` arguments:
    volumes by name to host directories, volumeMounts (subPath, readOnly),
    the security context (user, capabilities, no-new-privileges, read-only
    root filesystem with no tmpfs, as readOnlyRootFilesystem gives) and the
    downward-API environment."""

    def __init__(self, name, node, volumes, pod_security=None):
        self.name = name
        self.node = node
        self.volumes = volumes  # volume name -> host directory
        self.pod_security = pod_security or {}

    def args(self, c, user=None, replace=None):
        a = ["--network", "host", "--label", LABEL, "--stop-timeout", str(GRACE)]
        sc = c.get("securityContext") or {}
        uid = sc.get("runAsUser", self.pod_security.get("runAsUser"))
        gid = sc.get("runAsGroup", self.pod_security.get("runAsGroup", uid))
        if user is not None:
            uid = gid = user
        if uid is not None:
            a += ["--user", f"{uid}:{gid}"]
        if sc.get("readOnlyRootFilesystem"):
            a += ["--read-only", "--read-only-tmpfs=false"]
        if sc.get("allowPrivilegeEscalation") is False:
            a += ["--security-opt", "no-new-privileges"]
        caps = sc.get("capabilities") or {}
        for cap in caps.get("drop") or []:
            a += ["--cap-drop", cap.lower()]
        for cap in caps.get("add") or []:
            a += ["--cap-add", cap.lower()]
        for m in c.get("volumeMounts") or []:
            host = self.volumes[m["name"]]
            if m.get("subPath"):
                host = os.path.join(host, m["subPath"])
            a += ["-v", f"{host}:{m['mountPath']}" + (":ro" if m.get("readOnly") else "")]
        for e in c.get("env") or []:
            if "value" in e:
                a += ["-e", f"{e['name']}={e['value']}"]
            else:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                v = {"spec.nodeName": self.node, "metadata.name": self.name, "status.podIP": "127.0.0.1"}[field]
                a += ["-e", f"{e['name']}={v}"]
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        if replace:
            argv = [replace.get(x, x) for x in argv]
        if c.get("command"):
            a += ["--entrypoint", argv[0]]
            argv = argv[1:]
        return a + [IMAGE] + argv

    def run(self, cname, c, user=None, replace=None, detach=True):
        args = self.args(c, user=user, replace=replace)
        if detach:
            return podman("run", "-d", "--name", PREFIX + cname, *args)
        return podman("run", "--rm", "--name", PREFIX + cname, *args)


def render(cluster_yaml):
    r = podman("run", "--rm", "--read-only", "--read-only-tmpfs=false", "-v", f"{cluster_yaml}:/cluster.yaml:ro",
               "--entrypoint", "ozone-operator", IMAGE, "render", "-f", "/cluster.yaml")
    return list(yaml.safe_load_all(r.stdout))


def find(objs, kind, name):
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


# ------------------------------------------------------------------ the run


class Run:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.t0 = time.time()

    def step(self, name, fn):
        t = time.time()
        try:
            detail = fn()
            self.passed += 1
            print(f"ok   {name} ({time.time() - t:.1f}s){': ' + detail if detail else ''}", flush=True)
        except Exception as e:
            self.failed += 1
            print(f"FAIL {name} ({time.time() - t:.1f}s): {e}", flush=True)
            if not isinstance(e, AssertionError):
                traceback.print_exc()

    # -- layout

    def setup(self):
        cleanup()
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
        cluster = os.path.join(WORK, "cluster.yaml")
        with open(cluster, "w") as f:
            yaml.safe_dump(
                {
                    "apiVersion": "ozone-rs.io/v1alpha1",
                    "kind": "OzoneCluster",
                    "metadata": {"name": "ozone", "namespace": "storage"},
                    "spec": {"datanodes": {"dataHostPath": "/var/lib/ozone/data"}},
                },
                f,
            )
        self.objs = render(cluster)
        conf = find(self.objs, "ConfigMap", "ozone-config")["data"]["ozone.conf"]
        # The cluster's ConfigMap, with blocks small enough that a key
        # spans several.
        self.conf_dir = mkdir(os.path.join(WORK, "config"))
        with open(os.path.join(self.conf_dir, "ozone.conf"), "w") as f:
            f.write(conf + f"ozone.scm.block.size = {BLOCK}\n")
        self.om_addr = f"127.0.0.1:{free_port()}"
        self.om_http = f"127.0.0.1:{free_port()}"
        self.dn_http = {}
        self.dn_grpc = {}
        for n in NODES:
            self.dn_grpc[n] = f"127.0.0.1:{free_port()}"
            self.dn_http[n] = f"127.0.0.1:{free_port()}"
        # kubelet makes hostPath DirectoryOrCreate directories root-owned 0755.
        for n in NODES + [READER_NODE]:
            mkdir(os.path.join(WORK, n))
        self.sockets = {n: mkdir(os.path.join(WORK, n, "sockets")) for n in NODES}
        self.data = {n: mkdir(os.path.join(WORK, n, "data")) for n in NODES}
        # The OM's PersistentVolume: fsGroup makes it the pod's group's.
        self.om_data = mkdir(os.path.join(WORK, "om-pv"), 0o2770, 0, DN_UID)
        self.payload = mkdir(os.path.join(WORK, "payload"))
        rng = random.Random(7)
        self.small = os.path.join(self.payload, "small")
        self.big = os.path.join(self.payload, "big")
        with open(self.small, "wb") as f:
            f.write(rng.randbytes(20 * MIB + 4321))
        with open(self.big, "wb") as f:
            for _ in range(24):
                f.write(rng.randbytes(4 * MIB))
        os.chmod(self.small, 0o644)
        os.chmod(self.big, 0o644)
        return f"rendered {len(self.objs)} objects; om {self.om_addr}"

    # -- the cluster

    def datanode_pod(self, node):
        sts = find(self.objs, "StatefulSet", "ozone-datanode")
        spec = sts["spec"]["template"]["spec"]
        vols = {"config": self.conf_dir, "sockets": self.sockets[node], "data": self.data[node]}
        return Pod(f"ozone-datanode-{NODES.index(node)}", node, vols, spec.get("securityContext")), spec

    def init_step(self):
        details = []
        for n in NODES:
            pod, spec = self.datanode_pod(n)
            (init,) = spec["initContainers"]
            assert init["securityContext"]["runAsUser"] == 0
            pod.run(f"prepare-{n}", init, detach=False)
            st = os.stat(self.sockets[n])
            assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (DN_UID, 0o755), f"socket dir {st}"
            sub = next(m["subPath"] for m in spec["containers"][0]["volumeMounts"] if m.get("subPath"))
            st = os.stat(os.path.join(self.data[n], sub))
            assert st.st_uid == DN_UID and not stat.S_IMODE(st.st_mode) & 0o007, f"data dir {oct(st.st_mode)}"
            details.append(n)
        return "socket dirs 1000 0755, data dirs 1000 0750 on " + ", ".join(details)

    def start_om(self):
        sts = find(self.objs, "StatefulSet", "ozone-om")
        spec = sts["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        pod = Pod("ozone-om-0", "node1", {"config": self.conf_dir, "data": self.om_data}, spec.get("securityContext"))
        self.om_pod = (pod, c)
        pod.run("om", c, replace={"0.0.0.0:9862": self.om_addr, "0.0.0.0:9874": self.om_http})
        wait_for("the OM", ready(self.om_http), 30)

    def start_datanode(self, node):
        pod, spec = self.datanode_pod(node)
        (c,) = spec["containers"]
        pod.run(
            f"dn-{node}",
            c,
            replace={
                "ozone-om.storage.svc:9862": self.om_addr,
                "0.0.0.0:9858": self.dn_grpc[node],
                "0.0.0.0:9882": self.dn_http[node],
            },
        )

    def start_cluster(self):
        self.start_om()
        for n in NODES:
            self.start_datanode(n)
        for n in NODES:
            wait_for(f"datanode {n}", ready(self.dn_http[n]), 60)
        uids = {name: host_uid(PREFIX + name) for name in ["om"] + [f"dn-{n}" for n in NODES]}
        assert set(uids.values()) == {DN_UID}, uids
        for n in NODES:
            sock = [e for e in os.listdir(self.sockets[n]) if e.endswith(".sock")]
            assert len(sock) == 1, f"{n} sockets: {sock}"
        return f"OM and 3 datanodes ready, all uid {DN_UID}, one socket per node"

    # -- workloads

    def workload(self, name, node, verify):
        """A workload pod on `node`: the sidecar container of the example
        (its own uid, the node's socket directory read-only) with a policy,
        and the emptyDir the application container shares with it."""
        example = list(yaml.safe_load_all(open(os.path.join(ROOT, "examples/workloads/hbase-regionserver.yaml"))))
        policy = next(o for o in example if o["kind"] == "ConfigMap")["data"]["policy.conf"]
        pod_obj = next(o for o in example if o["kind"] == "Pod")
        sidecar = next(c for c in pod_obj["spec"]["initContainers"] if c["name"] == "ozone-sidecar")
        policy = re.sub(r"ozone.client.verify.checksum = \w+", f"ozone.client.verify.checksum = {str(verify).lower()}", policy)
        pol_dir = mkdir(os.path.join(WORK, name, "policy"))
        with open(os.path.join(pol_dir, "policy.conf"), "w") as f:
            f.write(policy)
        empty = mkdir(os.path.join(WORK, name, "run"), 0o777)  # emptyDir: 0777
        http = f"127.0.0.1:{free_port()}"
        vols = {
            "datanode-sockets": self.sockets[node] if node in self.sockets else mkdir(os.path.join(WORK, node, "sockets")),
            "ozone-run": empty,
            "policy": pol_dir,
        }
        pod = Pod(name, node, vols, pod_obj["spec"].get("securityContext"))
        om_arg = next(a for a in sidecar["args"] if a.startswith("--om="))
        http_arg = next(a for a in sidecar["args"] if a.startswith("--http-addr="))
        w = {
            "name": name,
            "node": node,
            "pod": pod,
            "sidecar": sidecar,
            "empty": empty,
            "http": http,
            "replace": {om_arg: f"--om={self.om_addr}", http_arg: f"--http-addr={http}"},
            "app_env": {e["name"]: e["value"] for c in pod_obj["spec"]["containers"] for e in c.get("env", [])},
        }
        self.start_sidecar(w)
        return w

    def start_sidecar(self, w):
        w["pod"].run(f"sidecar-{w['name']}", w["sidecar"], user=SIDECAR_UID, replace=w["replace"])
        wait_for(f"sidecar {w['name']}", ready(w["http"]), 30)

    def app(self, w, *argv, env=None, detach=False):
        """The application container: a third uid, no hostPath, only the
        emptyDir at the path the example mounts it."""
        args = [
            "--network", "host", "--label", LABEL, "--user", f"{APP_UID}:{APP_UID}",
            "--read-only", "--read-only-tmpfs=false", "--cap-drop", "all",
            "--security-opt", "no-new-privileges", "-v", f"{w['empty']}:/var/run/ozone",
            "-v", f"{self.payload}:/payload:ro",
        ]
        for k, v in (env if env is not None else w["app_env"]).items():
            args += ["-e", f"{k}={v}"]
        name = f"{PREFIX}app-{w['name']}-{int(time.time() * 1000) % 100000}"
        args += ["--entrypoint", argv[0], IMAGE, *argv[1:]]
        if detach:
            return name, podman("run", "-d", "--name", name, *args)
        return podman("run", "--rm", "--name", name, *args, check=False, timeout=300)

    def direct(self, node, *argv, socket_dir=None, extra_mounts=()):
        """`ozone` in a container talking to the OM and datanodes itself."""
        args = ["--network", "host", "--label", LABEL, "--user", f"{APP_UID}:{APP_UID}",
                "--read-only", "--read-only-tmpfs=false", "--cap-drop", "all",
                "-v", f"{self.payload}:/payload:ro"]
        for m in extra_mounts:
            args += ["-v", m]
        pre = ["--om", self.om_addr, "--node", node]
        if socket_dir:
            pre += ["--set", f"ozone.domain.socket.path={socket_dir}"]
        return podman("run", "--rm", *args, IMAGE, *pre, *argv, check=False, timeout=300)

    # -- steps

    def write_keys(self):
        for argv in (["sh", "volume", "create", "/vol"], ["sh", "bucket", "create", "/vol/bkt"]):
            r = self.direct(READER_NODE, *argv)
            assert r.returncode == 0, r.stderr
        self.hbase = self.workload("hbase", "node1", verify=False)
        for key, src in (("small", "/payload/small"), ("big", "/payload/big")):
            r = self.app(self.hbase, "ozone", "sh", "key", "put", f"/vol/bkt/{key}", src)
            assert r.returncode == 0, r.stderr
        r = self.direct(READER_NODE, "sh", "key", "info", "/vol/bkt/big")
        assert r.returncode == 0, r.stderr
        return "small 20 MiB and big 96 MiB written by the application through its sidecar"

    def block_file(self, node, src):
        with open(src, "rb") as f:
            head = f.read(4096)
        for dirpath, _, files in os.walk(self.data[node]):
            for name in files:
                if name.endswith(".block"):
                    p = os.path.join(dirpath, name)
                    with open(p, "rb") as f:
                        if f.read(4096) == head:
                            return p
        raise AssertionError(f"no block file of {src} on {node}")

    def verify_policy(self):
        self.checked = self.workload("checked", "node1", verify=True)
        path = self.block_file("node1", self.small)
        offset = 123_457
        with open(path, "r+b") as f:
            f.seek(offset)
            b = f.read(1)
            f.seek(offset)
            f.write(bytes([b[0] ^ 0x40]))
        expect = open(self.small, "rb").read()
        # HBase's policy: no verification (HBase checks its own HFile
        # checksums), so the flipped byte reaches it, read short-circuit.
        r = self.app(self.hbase, "ozone", "sh", "key", "get", "--force", "/vol/bkt/small", "/var/run/ozone/off")
        assert r.returncode == 0, r.stderr
        got = open(os.path.join(self.hbase["empty"], "off"), "rb").read()
        diff = [i for i in range(len(expect)) if got[i] != expect[i]] if len(got) == len(expect) else None
        assert diff == [offset], f"verify-off read differs at {diff[:5] if diff else diff}"
        fails0 = metric(self.checked["http"], "ozone_sidecar_checksum_failures_total")
        r = self.app(self.checked, "ozone", "sh", "key", "get", "--force", "/vol/bkt/small", "/var/run/ozone/on")
        assert r.returncode == 0, r.stderr
        assert sha(os.path.join(self.checked["empty"], "on")) == sha(self.small), "verify-on read returned wrong bytes"
        fails = metric(self.checked["http"], "ozone_sidecar_checksum_failures_total") - fails0
        assert fails >= 1, "verify-on sidecar counted no checksum failure"
        assert metric(self.hbase["http"], "ozone_sidecar_checksum_failures_total") == 0
        # Put the replica back so later steps read good bytes.
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(b)
        return f"verify off: the flipped byte at {offset} reached the workload; verify on: {int(fails)} checksum failure, good bytes from another replica"

    def cat_mid_read(self, w, key, src, during):
        """The application reads `key` through its sidecar (`ozone sh key
        cat` into a FIFO in the emptyDir); after 8 MiB, `during()` runs while
        the read is in flight. Returns what `during` returned once the whole
        key came back bit-exact and the application exited 0."""
        fifo = os.path.join(w["empty"], f"{key}.fifo")
        if os.path.exists(fifo):
            os.unlink(fifo)
        os.mkfifo(fifo)
        os.chmod(fifo, 0o666)
        name, _ = self.app(w, "sh", "-c", f"exec ozone sh key cat /vol/bkt/{key} > /var/run/ozone/{key}.fifo", detach=True)
        h = hashlib.sha256()
        n = 0
        result = None
        done = False
        # Non-blocking, so that an application that never opens the FIFO
        # fails the step instead of hanging it.
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        deadline = time.time() + 120
        try:
            while time.time() < deadline:
                select.select([fd], [], [], 1)
                try:
                    chunk = os.read(fd, MIB)
                except BlockingIOError:
                    continue
                if not chunk:
                    if n:
                        break  # the writer closed: the end
                    time.sleep(0.1)  # the writer has not opened it yet
                    continue
                h.update(chunk)
                n += len(chunk)
                if n >= 8 * MIB and not done:
                    assert host_uid(name) == APP_UID
                    app_ns = namespaces(name)
                    side_ns = namespaces(PREFIX + "sidecar-" + w["name"])
                    assert app_ns["pid"] != side_ns["pid"] and app_ns["mnt"] != side_ns["mnt"]
                    result = during()
                    done = True
        finally:
            os.close(fd)
        assert done, f"read only {n} bytes"
        rc = podman("wait", name).stdout.strip()
        logs = podman("logs", name, check=False).stderr
        podman("rm", name, check=False)
        assert rc == "0", f"application exited {rc}: {logs[-1500:]}"
        assert n == os.path.getsize(src), f"read {n} bytes"
        assert h.hexdigest() == sha(src), "bytes differ"
        return result

    def kill_datanode_mid_read(self):
        w = self.hbase
        path = lambda p: metric(w["http"], f'ozone_sidecar_read_bytes_total{{path="{p}"}}')
        sc0, grpc0 = path("short-circuit"), path("grpc-local") + path("grpc-remote")
        self.cat_mid_read(w, "big", self.big, lambda: podman("kill", "--signal", "KILL", PREFIX + "dn-node1"))
        sc, grpc = path("short-circuit") - sc0, path("grpc-local") + path("grpc-remote") - grpc0
        assert grpc > 0, "no byte came over gRPC after the datanode died"
        assert sc > 0, "no byte came short-circuit before the kill"
        assert sc + grpc == os.path.getsize(self.big), (sc, grpc)
        return f"96 MiB bit-exact, exit 0: {int(sc)} bytes short-circuit before the kill, {int(grpc)} over gRPC after"

    def restart_datanode(self):
        w = self.hbase
        podman("start", PREFIX + "dn-node1")
        wait_for("datanode node1 after restart", ready(self.dn_http["node1"]), 60)
        socks = [e for e in os.listdir(self.sockets["node1"]) if e.endswith(".sock")]
        assert len(socks) == 1, socks

        def resumed():
            sc0 = metric(w["http"], 'ozone_sidecar_read_bytes_total{path="short-circuit"}')
            r = self.app(w, "ozone", "sh", "key", "get", "--force", "/vol/bkt/small", "/var/run/ozone/again")
            assert r.returncode == 0, r.stderr
            assert sha(os.path.join(w["empty"], "again")) == sha(self.small)
            return metric(w["http"], 'ozone_sidecar_read_bytes_total{path="short-circuit"}') - sc0 == os.path.getsize(self.small)

        wait_for("short-circuit reads to resume", resumed, 60, interval=2)
        opens = metric(self.dn_http["node1"], "ozone_datanode_sc_opens_total")
        assert opens >= 3, f"restarted datanode handed out {opens} fds"
        return f"stale socket replaced; short-circuit resumed ({int(opens)} fds from the new datanode process)"

    def restart_sidecar(self):
        w = self.hbase
        podman("kill", "--signal", "KILL", PREFIX + "sidecar-hbase")
        podman("wait", PREFIX + "sidecar-hbase", check=False)
        r = self.app(w, "ozone", "sh", "key", "info", "/vol/bkt/small")
        assert r.returncode != 0, "a read succeeded with the sidecar dead"
        dead_error = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
        assert "sidecar.sock" in dead_error, r.stderr
        podman("start", PREFIX + "sidecar-hbase")
        wait_for("sidecar after restart", ready(w["http"]), 30)
        r = self.app(w, "ozone", "sh", "key", "get", "--force", "/vol/bkt/small", "/var/run/ozone/after")
        assert r.returncode == 0, r.stderr
        assert sha(os.path.join(w["empty"], "after")) == sha(self.small)
        sc = metric(w["http"], 'ozone_sidecar_read_bytes_total{path="short-circuit"}')
        assert sc == os.path.getsize(self.small), f"short-circuit bytes after restart {sc}"
        return f"while dead: {dead_error[:100]!r}; restarted: socket replaced, short-circuit again"

    def users_and_rootfs(self):
        running = podman("ps", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout.split()
        uids = {n.removeprefix(PREFIX): host_uid(n) for n in running}
        assert uids and 0 not in uids.values(), uids
        ro = {}
        for n in running:
            ro[n] = podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", n).stdout.strip()
        assert set(ro.values()) == {"true"}, ro
        r = podman("exec", PREFIX + "dn-node1", "ozone", "--version", check=False)
        assert r.returncode == 0
        r = podman("exec", PREFIX + "dn-node1", "touch", "/tmp/x", check=False)
        assert r.returncode != 0, "root filesystem writable"
        return ", ".join(f"{k} {v}" for k, v in sorted(uids.items())) + "; every root filesystem read-only"

    def sidecar_drains(self):
        w = self.hbase
        name = PREFIX + "sidecar-hbase"
        stopped = {}

        def stop():
            def run():
                t = time.time()
                podman("stop", "-t", str(GRACE), name, timeout=GRACE + 30)
                stopped["secs"] = time.time() - t

            th = threading.Thread(target=run)
            th.start()
            # SIGTERM has reached it once it refuses new work.
            wait_for("the sidecar to drain", lambda: "sidecar draining" in podman("logs", name, check=False).stderr, 10, 0.05)
            return th

        th = self.cat_mid_read(w, "big", self.big, stop)
        th.join()
        code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        logs = podman("logs", name, check=False).stderr
        assert code == "0" and stopped["secs"] < GRACE, (code, stopped)
        m = re.search(r"sidecar draining inflight=(\d+) open_streams=(\d+)", logs)
        assert m and int(m.group(2)) >= 1, f"no open stream when draining: {logs[-800:]}"
        return f"SIGTERM with {m.group(2)} stream open ({m.group(1)} request in flight): the read finished bit-exact and closed, then the sidecar exited 0 in {stopped['secs']:.1f}s"

    def graceful_stop(self):
        running = podman("ps", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout.split()
        # Workloads first, then datanodes, then the OM: as a node drain would.
        order = sorted(running, key=lambda n: (0 if "sidecar" in n else 1 if "dn-" in n else 2, n))
        times = {}
        for n in order:
            t = time.time()
            podman("stop", "-t", str(GRACE), n, timeout=GRACE + 30)
            times[n] = time.time() - t
        bad = {}
        for n in order:
            code = podman("inspect", "--format", "{{.State.ExitCode}}", n).stdout.strip()
            logs = podman("logs", n, check=False)
            text = logs.stdout + logs.stderr
            drained = any(w in text for w in ("draining", "stopping", "stopped"))
            if code != "0" or times[n] >= GRACE or not drained:
                bad[n] = (code, round(times[n], 1), drained)
        assert not bad, f"(exit code, seconds, drain logged): {bad}"
        slowest = max(times.values())
        return f"{len(order)} containers exited 0 on SIGTERM, drain logged, slowest {slowest:.1f}s (grace {GRACE}s)"


def cleanup():
    ids = podman("ps", "-aq", "--filter", f"label={LABEL}", check=False).stdout.split()
    if ids:
        podman("rm", "-f", "-t", "0", *ids, check=False)


def main():
    run = Run()
    steps = [
        ("image renders the cluster (ozone-operator in the image)", run.setup),
        ("init step prepares the hostPath directories (root, CHOWN/FOWNER/DAC_OVERRIDE only)", run.init_step),
        ("OM and datanode containers from the rendered pods", run.start_cluster),
        ("application writes keys through its sidecar", run.write_keys),
        ("verify-checksum policy holds per workload on a flipped byte", run.verify_policy),
        ("datanode SIGKILL mid-read: the read completes", run.kill_datanode_mid_read),
        ("datanode restart: short-circuit resumes", run.restart_datanode),
        ("sidecar SIGKILL and restart", run.restart_sidecar),
        ("non-root users and read-only root filesystems", run.users_and_rootfs),
        ("sidecar SIGTERM mid-read: drains, then exits 0", run.sidecar_drains),
        ("podman stop: SIGTERM, drain, exit 0 within the grace period", run.graceful_stop),
    ]
    try:
        for name, fn in steps:
            run.step(name, fn)
            if name.startswith(("image", "OM and")) and run.failed:
                break  # nothing after these can run
    finally:
        if run.failed:
            for n in podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}", check=False).stdout.split():
                logs = podman("logs", "--tail", "15", n, check=False)
                print(f"--- {n}\n{(logs.stdout + logs.stderr).strip()}")
        if not os.environ.get("OZONE_E2E_KEEP"):
            cleanup()
            if not run.failed:
                shutil.rmtree(WORK, ignore_errors=True)
    print(f"containers e2e: {time.time() - run.t0:.0f}s")
    print(f"{run.passed} passed, {run.failed} failed")
    sys.exit(1 if run.failed else 0)


if __name__ == "__main__":
    main()
