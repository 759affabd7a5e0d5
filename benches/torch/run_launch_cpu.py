#!/usr/bin/env python3
"""Run a training document's `accelerate` launch artifact on a CPU-only machine, changing only what it forces.

    run_launch_cpu.py DOC.json WORKDIR DATA.jsonl [--as-written]

Writes the artifact's files into WORKDIR, copies DATA.jsonl to train.jsonl there, applies the changes below
(each printed), and runs the artifact's argv with its environment. With --as-written nothing is changed.

Changes a machine without a GPU forces (transformers 5.23.0 TrainingArguments.__post_init__):
  training_args.json: tf32 left out (it raises unless CUDA with compute capability >= 8 is present);
                      use_cpu: true (bf16 raises "Your setup doesn't support bf16/gpu" without it).
Changes of the proposed fixes of the emitted files (defects, not the CPU's doing):
  accelerate_config.yaml: a lone `gpu_ids: N` quoted (YAML reads an int; accelerate 1.15.0 calls .split on it);
                          for DeepSpeed plans `mixed_precision` left out (accelerate refuses it beside a
                          deepspeed_config_file).
"""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys


def main():
    doc, work, data = sys.argv[1:4]
    as_written = "--as-written" in sys.argv
    art = [a for a in json.loads(pathlib.Path(doc).read_text())["launch"] if a["name"] == "accelerate"][0]
    w = pathlib.Path(work)
    if w.exists():
        shutil.rmtree(w)
    w.mkdir(parents=True)
    for name, text in art["files"].items():
        (w / name).write_text(text)
    shutil.copy(data, w / "train.jsonl")
    if not as_written:
        ta = json.loads((w / "training_args.json").read_text())
        if ta.pop("tf32", None) is not None:
            print("change (CPU): training_args.json tf32 left out")
        ta["use_cpu"] = True
        print("change (CPU): training_args.json use_cpu: true")
        (w / "training_args.json").write_text(json.dumps(ta, indent=2) + "\n")
        y = (w / "accelerate_config.yaml").read_text()
        y2 = re.sub(r"^gpu_ids: ([0-9]+)$", r"gpu_ids: '\1'", y, flags=re.M)
        if (w / "ds_config.json").exists():
            y2 = re.sub(r"^mixed_precision: .*\n", "", y2, flags=re.M)
        if y2 != y:
            print("change (fix): accelerate_config.yaml\n" + y2)
            (w / "accelerate_config.yaml").write_text(y2)
    env = dict(os.environ, **art["env"])
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    print("run:", " ".join(f"{k}={v}" for k, v in art["env"].items()), " ".join(art["argv"]), flush=True)
    rc = subprocess.call(art["argv"], cwd=w, env=env)
    out = w / "out"
    print(f"exit {rc}; {out}: {sorted(p.name for p in out.iterdir()) if out.exists() else 'absent'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
