#!/usr/bin/env python3
"""Validates every Kubernetes manifest the planner emits against the Kubernetes OpenAPI schema, offline, and
records the results in tests/fixtures/kubernetes/validated.json (keyed by each manifest's SHA-256), which
tests/it/kubernetes_manifests.rs checks every emitted manifest against: CI has no Python, so a manifest whose
bytes change fails there until this script is re-run.

    python3 -m venv /tmp/kv && /tmp/kv/bin/pip install -r benches/kubernetes/requirements.txt
    /tmp/kv/bin/python benches/kubernetes/validate.py

The manifests come from the Rust test itself (OPTIMIZER_DUMP_MANIFESTS=DIR), so the validated set is exactly
the tested set. Validation is strict: a field the schema does not define is an error (a misspelt key that
Kubernetes would silently drop, such as `readinesProbe`, fails).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests/fixtures/kubernetes/validated.json"
# The pinned LeaderWorkerSet CRD (kubernetes-sigs/lws v0.10.0, config/crd/bases/; SOURCE.md beside it). A
# LeaderWorkerSet is validated against its openAPIV3Schema, strictly (every object with `properties` closed, as the
# API server prunes unknown fields), and its two pod templates and Service against the Kubernetes schema.
LWS_CRD = ROOT / "tests/fixtures/kubernetes/lws-v0.10.0/leaderworkerset.x-k8s.io_leaderworkersets.yaml"


def strict(schema):
    """The CRD schema with unknown fields refused where Kubernetes would prune them."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if "properties" in schema and "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def validate_lws(doc, k8s):
    """Errors of a LeaderWorkerSet: the CRD's v1 schema, then each pod template as a Kubernetes PodTemplate."""
    import jsonschema

    crd = yaml.safe_load(LWS_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == doc["apiVersion"].split("/")[1])
    schema = strict(version["schema"]["openAPIV3Schema"])
    errors = [
        f"LeaderWorkerSet: {e.message} at {list(e.path)}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(doc)
    ]
    t = doc["spec"]["leaderWorkerTemplate"]
    for role in ("leaderTemplate", "workerTemplate"):
        pt = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role.lower()}, "template": t[role]}
        try:
            kubernetes_validate.validate(pt, k8s, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{role}: {e.message} at {list(e.path)}")
    return errors


def main() -> int:
    k8s = kubernetes_validate.latest_version()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OPTIMIZER_DUMP_MANIFESTS=tmp)
        for test in ("kubernetes_manifests::every_manifest", "vllm_multinode::"):
            subprocess.run(
                ["cargo", "test", "--locked", "--test", "it", test],
                cwd=ROOT,
                env=env,
                check=True,
            )
        results = {}
        failed = 0
        files = sorted(Path(tmp).glob("*.yaml"))
        for f in files:
            text = f.read_text()
            sha = hashlib.sha256(text.encode()).hexdigest()
            errors = []
            kinds = []
            for doc in yaml.safe_load_all(text):
                kinds.append(f"{doc['apiVersion']}/{doc['kind']}")
                if doc["kind"] == "LeaderWorkerSet":
                    errors.extend(validate_lws(doc, k8s))
                    continue
                try:
                    kubernetes_validate.validate(doc, k8s, strict=True)
                except kubernetes_validate.ValidationError as e:
                    errors.append(f"{doc['kind']}: {e.message} at {list(e.path)}")
            entry = results.setdefault(sha, {"valid": not errors, "errors": errors, "kinds": kinds, "cases": []})
            entry["cases"].append(f.stem)
            if errors:
                failed += 1
                print(f"{f.stem}: {errors}", file=sys.stderr)
    record = {
        "validator": f"kubernetes-validate {version('kubernetes-validate')}",
        "kubernetes_version": k8s,
        "strict": True,
        "manifests": len(files),
        "invalid": failed,
        "results": results,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{len(files)} manifests ({len(results)} distinct), {failed} invalid, Kubernetes {k8s} schema, strict")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
