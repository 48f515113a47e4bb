"""Turns the shipped HBase region server example into the local processes
the scenario runs: the sidecar's command line, its policy file and the
region server's environment, each taken from the example as is, with only
the pod's paths mapped onto local directories. Anything of the sidecar's
container this cannot map (an unknown volume, an argument naming a path no
volume holds) is an error: the scenario runs the example's configuration or
nothing.

  python example_pod.py EXAMPLE OM NODE_SOCKETS WORKDIR JAR > vars.sh

writes WORKDIR/policy/policy.conf and prints shell assignments:
SIDECAR_CMD (an array), RS_ENV (an array of NAME=VALUE), SIDECAR_SOCKET.
"""

import os
import shlex
import sys

import yaml

example, om, node_sockets, work, jar = sys.argv[1:6]
docs = list(yaml.safe_load_all(open(example)))
pod = next(d for d in docs if d["kind"] == "Pod")
spec = pod["spec"]
sidecar = next(c for c in spec["initContainers"] if c["name"] == "ozone-sidecar")
rs = next(c for c in spec["containers"] if c["name"] == "regionserver")
volumes = {v["name"]: v for v in spec["volumes"]}

# Where each of the pod's volumes lives here.
local = {}
for name, v in volumes.items():
    if "hostPath" in v:
        if v["hostPath"]["path"] != "/var/lib/ozone/sockets":
            sys.exit(f"volume {name}: unexpected hostPath {v['hostPath']['path']}")
        local[name] = node_sockets
    elif "emptyDir" in v:
        local[name] = os.path.join(work, name)
    elif "configMap" in v:
        cm = next(
            d
            for d in docs
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == v["configMap"]["name"]
        )
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        for key, text in cm["data"].items():
            with open(os.path.join(d, key), "w") as f:
                f.write(text)
        local[name] = d
    else:
        sys.exit(f"volume {name}: kind not handled")
for d in local.values():
    os.makedirs(d, exist_ok=True)


def mapper(container):
    mounts = sorted(
        ((m["mountPath"], local[m["name"]]) for m in container.get("volumeMounts", [])),
        key=lambda m: -len(m[0]),
    )

    def map_value(value):
        for at, here in mounts:
            if value == at or value.startswith(at + "/"):
                return here + value[len(at):]
        if value.startswith("/"):
            sys.exit(f"{container['name']}: {value} is on no volume")
        return value

    return map_value


# The jar's volume: the init container copies the image's jar onto it; here
# it is the jar the build made.
local["ozone-lib"] = os.path.dirname(os.path.abspath(jar))
sc_map = mapper(sidecar)
cmd = list(sidecar["command"])
for arg in sidecar["args"]:
    flag, eq, value = arg.partition("=")
    if not eq:
        sys.exit(f"sidecar argument {arg}: expected --flag=value")
    if flag == "--om":
        value = om  # the cluster's OM Service is the local OM
    elif flag == "--http-addr":
        value = "127.0.0.1:0"  # one port per sidecar on one machine
    else:
        value = sc_map(value)
    cmd.append(f"{flag}={value}")

rs_map = mapper(rs)
env = []
socket = None
for e in rs.get("env", []):
    value = e["value"]
    if e["name"] == "HBASE_CLASSPATH":
        value = os.path.abspath(jar)
        if os.path.basename(e["value"]) != os.path.basename(jar):
            sys.exit(f"HBASE_CLASSPATH names {e['value']}, the build makes {jar}")
    else:
        value = rs_map(value)
    if e["name"] == "OZONE_SIDECAR_SOCKET":
        socket = value
    env.append(f"{e['name']}={value}")
if socket is None:
    sys.exit("the region server's environment names no OZONE_SIDECAR_SOCKET")
if f"--socket={socket}" not in cmd:
    sys.exit(f"the region server's socket {socket} is not the sidecar's")

print("SIDECAR_CMD=(" + " ".join(shlex.quote(c) for c in cmd) + ")")
print("RS_ENV=(" + " ".join(shlex.quote(e) for e in env) + ")")
print("SIDECAR_SOCKET=" + shlex.quote(socket))
