"""Validates rendered Kubernetes manifests without a cluster (run by dev/chart).

  chart-validate.py --kube-version 1.37.0 [--kube-version …] --crd CRD.yaml [--crd …] RENDER.yaml…

Built-in kinds are checked by kubernetes-validate against its bundled schemas of each
Kubernetes version, strictly (unknown fields are errors). Custom resources are checked against
the openAPIV3Schema of their CustomResourceDefinition, made as strict as the API server's
strict field validation: unknown fields are errors (unless the schema preserves them),
metadata is Kubernetes' ObjectMeta, and the schema's CEL rules (x-kubernetes-validations) are
evaluated. An object of a kind neither knows is an error, not a warning.

Then the chart's own promises, on every render: the grace period outlasts the shutdown
deadline, the probes hit /health and /ready on the port lakesink listens on, the pod runs
non-root on a read-only root filesystem with a writable /tmp.

Prints one line per render and version, a count of objects per kind, and exits 1 on any error.
"""

import argparse
import collections
import copy
import sys

import celpy
import jsonschema
import kubernetes_validate
import referencing
import yaml
from kubernetes_validate.utils import schema_contents

OBJECT_META = "https://kubernetes.io/api/_definitions.json#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def strict(schema):
    """The CRD schema as JSON Schema, with the API server's strictness: objects with
    properties take no others unless they say so."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if not isinstance(node, dict):
            return
        if node.get("nullable") and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        if (
            "properties" in node
            and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")
        ):
            node["additionalProperties"] = False
        for key in ("properties", "patternProperties"):
            for sub in node.get(key, {}).values():
                walk(sub)
        for key in ("items", "additionalProperties", "not"):
            walk(node.get(key))
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(key, []):
                walk(sub)

    walk(schema)
    return schema


class Crd:
    def __init__(self, path):
        (crd,) = [d for d in load_docs(path) if d.get("kind") == "CustomResourceDefinition"]
        spec = crd["spec"]
        self.group, self.kind = spec["group"], spec["names"]["kind"]
        self.versions = {
            v["name"]: v["schema"]["openAPIV3Schema"] for v in spec["versions"] if v.get("served")
        }
        self.source = path
        self.programs = {}

    def keys(self):
        return [(f"{self.group}/{v}", self.kind) for v in self.versions]

    def validate(self, obj, registry):
        version = obj["apiVersion"].split("/", 1)[1]
        raw = self.versions[version]
        schema = strict(raw)
        schema["properties"]["metadata"] = {"$ref": OBJECT_META}
        schema["properties"]["apiVersion"] = {"const": obj["apiVersion"]}
        schema["properties"]["kind"] = {"const": self.kind}
        validator = jsonschema.Draft202012Validator(schema, registry=registry)
        errors = [
            f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
            for e in validator.iter_errors(obj)
        ]
        errors += self.cel(raw, obj, "")
        return errors

    def cel(self, schema, data, path):
        """Evaluates x-kubernetes-validations where the data has the node they sit on
        (transition rules, which need the old object, do not apply to a new one)."""
        errors = []
        if not isinstance(schema, dict) or data is None:
            return errors
        for rule in schema.get("x-kubernetes-validations", []):
            if "oldSelf" in rule["rule"]:
                continue
            program = self.programs.get(rule["rule"])
            if program is None:
                env = celpy.Environment()
                program = self.programs[rule["rule"]] = env.program(env.compile(rule["rule"]))
            result = program.evaluate({"self": celpy.json_to_cel(data)})
            if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and result):
                errors.append(f"{path or '(root)'}: {rule.get('message', rule['rule'])} ({rule['rule']})")
        if isinstance(data, dict):
            for key, sub in schema.get("properties", {}).items():
                if key in data:
                    errors += self.cel(sub, data[key], f"{path}.{key}".lstrip("."))
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                for key, value in data.items():
                    errors += self.cel(extra, value, f"{path}.{key}".lstrip("."))
        elif isinstance(data, list):
            for i, item in enumerate(data):
                errors += self.cel(schema.get("items"), item, f"{path}[{i}]")
        return errors


def promises(docs):
    """What the chart says of the pods it makes, checked on the render."""
    errors = []
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        name = d["metadata"]["name"]
        pod = d["spec"]["template"]["spec"]
        (c,) = [c for c in pod["containers"] if c["name"] == "lakesink"]
        env = {e["name"]: e.get("value") for e in c.get("env", [])}

        def need(ok, what):
            if not ok:
                errors.append(f"Deployment {name}: {what}")

        timeout_ms = int(env.get("LAKESINK__SERVICE__SHUTDOWN_TIMEOUT_MS") or 30000)
        grace = pod.get("terminationGracePeriodSeconds", 30)
        need(grace * 1000 > timeout_ms,
             f"terminationGracePeriodSeconds {grace} s does not outlast shutdown-timeout-ms {timeout_ms}")
        listen = env.get("LAKESINK__SERVICE__HTTP_LISTEN") or ""
        need(listen.startswith("0.0.0.0:"), f"lakesink listens on {listen!r}, not on every address")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        need(listen.endswith(f":{ports.get('http')}"), f"port http {ports.get('http')} is not where lakesink listens ({listen})")
        for probe, path in (("startupProbe", "/health"), ("livenessProbe", "/health"), ("readinessProbe", "/ready")):
            get = c.get(probe, {}).get("httpGet", {})
            need(get.get("path") == path and get.get("port") == "http", f"{probe} is not GET {path} on port http")
        need(c.get("args", [])[:1] == ["run"] and "/etc/lakesink/lakesink.toml" in c.get("args", []),
             "lakesink is not run with --config /etc/lakesink/lakesink.toml")
        sc, psc = c.get("securityContext", {}), pod.get("securityContext", {})
        need(psc.get("runAsNonRoot") is True and psc.get("runAsUser", 0) != 0, "the pod may run as root")
        need(sc.get("readOnlyRootFilesystem") is True, "the root filesystem is writable")
        need(sc.get("allowPrivilegeEscalation") is False, "privilege escalation is allowed")
        need(sc.get("capabilities", {}).get("drop") == ["ALL"], "capabilities are not all dropped")
        need((sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") == "RuntimeDefault",
             "no RuntimeDefault seccomp profile")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        need("emptyDir" in volumes.get(mounts.get("/tmp"), {}), "/tmp is not an emptyDir")
        need("checksum/config" in d["spec"]["template"]["metadata"].get("annotations", {}),
             "no checksum/config annotation: a config change would not roll the pods")
        need(c.get("resources", {}).get("requests") and c.get("resources", {}).get("limits"),
             "no resource requests and limits")
    return errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kube-version", action="append", required=True)
    ap.add_argument("--crd", action="append", default=[])
    ap.add_argument("renders", nargs="+")
    args = ap.parse_args()

    crds = {}
    for path in args.crd:
        crd = Crd(path)
        for key in crd.keys():
            crds[key] = crd

    kinds = collections.Counter()
    failures = 0
    for render in args.renders:
        docs = load_docs(render)
        kinds.update(d["kind"] for d in docs)
        for message in promises(docs):
            print(f"ERROR {render}: {message}")
            failures += 1
        for version in args.kube_version:
            definitions = schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version)
            registry = referencing.Registry().with_resource(
                definitions["$id"], referencing.Resource.from_contents(definitions))
            bad = 0
            for d in docs:
                what = f"{d['kind']} {d.get('metadata', {}).get('name')}"
                crd = crds.get((d["apiVersion"], d["kind"]))
                if crd:
                    errors = crd.validate(d, registry)
                else:
                    try:
                        kubernetes_validate.validate(d, version, strict=True)
                        errors = []
                    except kubernetes_validate.ValidationError as e:
                        errors = [f"{'.'.join(map(str, e.path)) or '(root)'}: {e.message}"]
                    except kubernetes_validate.SchemaNotFoundError as e:
                        errors = [e.message + " (and no --crd names it)"]
                for message in errors:
                    print(f"ERROR {render}: {what} (Kubernetes {version}): {message}")
                bad += bool(errors)
            failures += bad
            print(f"[chart] {render}: {len(docs) - bad}/{len(docs)} objects valid against Kubernetes {version}"
                  f"{' and their CRDs' if any((d['apiVersion'], d['kind']) in crds for d in docs) else ''}")
    summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    print(f"[chart] objects validated per kind: {summary}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
