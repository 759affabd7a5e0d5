#!/usr/bin/env python3
"""Check the launch artifact of `optimizer resolve` training documents with the real packages.

    check_launch.py DOC.json... [--out RESULTS.json] [--keep DIR]

For each document the `accelerate` artifact's files are written into a directory of their own and checked:

  a  TrainingArguments(**training_args.json): as written (on a machine without a GPU the GPU-only keys raise),
     key by key against the dataclass fields and their choices, and as a whole with only what a CPU forces
     (use_cpu=True, tf32 left out);
  b  peft.LoraConfig(**lora_config.json), and get_peft_model on the checkpoint's architecture built on the meta
     device from --model's config.json (target modules found, trainable parameters against the plan's);
  c  transformers.BitsAndBytesConfig(**bnb_config.json);
  d  accelerate's own loader of accelerate_config.yaml (load_config_from_file) and the argument validation of
     `accelerate launch` (_validate_launch_command); for DEEPSPEED, the environment accelerate hands the
     script (prepare_deepspeed_cmd_env), accelerate's DeepSpeedPlugin(hf_ds_config=...) and its mixed precision
     check, and transformers' HfTrainerDeepSpeedConfig trainer_config_process/trainer_config_finalize (the
     fill_match mismatch check) against the TrainingArguments at the plan's world size;
  e  DeepSpeed's pydantic DeepSpeedZeroConfig(**zero_optimization) and DeepSpeedConfig(ds_config, mpu) at the
     plan's data-parallel world size (one gloo process on the loopback stands in for the process group);
  f  `python train.py --help` starts (and a missing --data file gets the script's own message);
  g  `accelerate launch --config_file accelerate_config.yaml train.py --help` with the artifact's environment,
     as written, then with the changes named in its record.

Each check is recorded as ok, failed (with the exception text) or not-checkable (what needs a GPU). The
per-document checks run in a child interpreter of their own, since TrainingArguments, accelerate and DeepSpeed
keep process-wide state (environment variables, singletons, TF32 flags).
"""
import argparse
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

HERE = pathlib.Path(__file__).resolve()
# A child check that takes longer than this has hung (the slowest, DeepSpeed's import and a gloo group, takes
# about 30 s on two shared cores).
CHILD_TIMEOUT_S = 900
# `--help` of the script under `accelerate launch` imports nothing heavy; torchrun's start is the slowest part.
LAUNCH_TIMEOUT_S = 300
# How much of a failing command's output a record keeps (the exception is at its end).
TAIL_CHARS = 1500
# Keys whose check in TrainingArguments.__post_init__ asks the device (transformers 5.23.0 training_args.py):
# bf16 -> _validate_args: `not use_cpu and not is_torch_bf16_gpu_available()` raises "Your setup doesn't support
# bf16/gpu"; tf32 -> step 9: `tf32=True and not is_torch_tf32_available()` (CUDA with compute capability >= 8)
# raises "--tf32 requires Ampere or a newer GPU arch".
GPU_CHECKED_KEYS = ("bf16", "tf32")
# The messages of those checks: a1 failing with one of them is what a machine without a GPU says, not a defect.
GPU_MESSAGES = ("Your setup doesn't support bf16/gpu", "--tf32 requires Ampere")
# The line on which the child hands its records back (packages print to stdout too).
MARK = "CHECK_LAUNCH_RESULT "


def tail(s, n=TAIL_CHARS):
    s = s or ""
    return s if len(s) <= n else "..." + s[-n:]


def record(checks, cid, name, fn):
    """Run fn(); ok with its return text, failed with the exception."""
    try:
        msg = fn()
        checks.append({"check": cid, "name": name, "status": "ok", "message": msg or ""})
    except NotCheckable as e:
        checks.append({"check": cid, "name": name, "status": "not-checkable", "message": str(e)})
    except BaseException as e:  # noqa: BLE001 - SystemExit from a package is a failed check too
        last = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = f" (at {pathlib.Path(last.filename).name}:{last.lineno})" if last else ""
        checks.append({"check": cid, "name": name, "status": "failed",
                       "message": f"{type(e).__name__}: {e}{where}"})


class NotCheckable(Exception):
    pass


def write_files(doc_path, dest):
    doc = json.loads(pathlib.Path(doc_path).read_text())
    arts = [a for a in doc.get("launch", []) if a.get("name") == "accelerate"]
    if len(arts) != 1:
        raise SystemExit(f"{doc_path}: expected one launch artifact named accelerate, found {len(arts)}")
    art = arts[0]
    for name, text in art["files"].items():
        (dest / name).write_text(text)
    return doc, art


def versions():
    from importlib.metadata import version

    out = {"python": sys.version.split()[0]}
    for p in ("torch", "transformers", "peft", "accelerate", "bitsandbytes", "deepspeed", "datasets"):
        try:
            out[p] = version(p)
        except Exception as e:  # noqa: BLE001
            out[p] = f"missing: {e}"
    return out


# ----------------------------------------------------------------------------------------------------------------
# The child: in-process checks of one document's files.


class _Mpu:
    """The one method DeepSpeedConfig asks of an mpu: the data-parallel world size."""

    def __init__(self, n):
        self.n = n

    def get_data_parallel_world_size(self):
        return self.n


def child(dirpath, doc_path):
    d = pathlib.Path(dirpath)
    doc = json.loads(pathlib.Path(doc_path).read_text())
    art = [a for a in doc["launch"] if a["name"] == "accelerate"][0]
    settings = doc.get("settings", {})
    gpu_names = [g.get("name") for g in doc.get("hardware", {}).get("gpus", []) if g.get("used", True)]
    os.environ.update(art.get("env", {}))
    os.chdir(d)
    checks = []

    def load(name):
        p = d / name
        return json.loads(p.read_text()) if p.exists() else None

    ta = load("training_args.json")
    lora = load("lora_config.json")
    bnb = load("bnb_config.json")
    ds = load("ds_config.json")
    plan = load("plan.json")
    world = int(settings.get("data_parallel", 1)) * int(doc.get("hardware", {}).get("nodes", 1) or 1)

    import torch
    import transformers
    from transformers import TrainingArguments

    # a1: as written.
    def a_as_written():
        TrainingArguments(**ta)
        return "constructed"

    record(checks, "a1", "TrainingArguments(**training_args.json) as written", a_as_written)
    if checks[-1]["status"] == "failed" and any(m in checks[-1]["message"] for m in GPU_MESSAGES):
        checks[-1]["expected_without_gpu"] = True

    # a2: every key a field, every choice among the field's choices, every type the field's.
    def a_fields():
        from transformers.trainer_utils import SaveStrategy, IntervalStrategy, SchedulerType
        from transformers.training_args import OptimizerNames

        fields = {f.name: f for f in dataclasses.fields(TrainingArguments)}
        bad = [k for k in ta if k not in fields]
        if bad:
            raise ValueError(f"not TrainingArguments fields: {bad}")
        enums = {"optim": OptimizerNames, "save_strategy": SaveStrategy, "eval_strategy": IntervalStrategy,
                 "logging_strategy": IntervalStrategy, "lr_scheduler_type": SchedulerType}
        for k, e in enums.items():
            if k in ta:
                e(ta[k])  # ValueError names the valid values
        for k, v in ta.items():
            t = str(fields[k].type)
            ok = (("bool" in t and isinstance(v, bool)) or ("int" in t and isinstance(v, int) and not isinstance(v, bool))
                  or ("float" in t and isinstance(v, (int, float)) and not isinstance(v, bool))
                  or ("dict" in t and isinstance(v, dict)) or ("str" in t and isinstance(v, str))
                  or ("list" in t and isinstance(v, list)))
            if not ok:
                raise TypeError(f"{k}={v!r} does not match the field's type {t}")
        # Each key alone on the CPU (bf16 and tf32 only by type: their check asks the GPU).
        for k, v in ta.items():
            if k in GPU_CHECKED_KEYS or k == "output_dir":
                continue
            TrainingArguments(output_dir="out", use_cpu=True, **{k: v})
        return (f"{len(ta)} keys are fields of TrainingArguments {transformers.__version__} with values of their "
                f"types and choices; each non-GPU key alone constructs with use_cpu=True")

    record(checks, "a2", "training_args.json keys against the TrainingArguments fields and choices", a_fields)

    # a3: the whole set with what a CPU forces.
    def a_cpu():
        kw = {k: v for k, v in ta.items() if k != "tf32"}
        args = TrainingArguments(**kw, use_cpu=True)
        dropped = "tf32 left out, " if "tf32" in ta else ""
        return (f"constructed with {dropped}use_cpu=True; activation_checkpointing={args.activation_checkpointing}, "
                f"mixed_precision={args.mixed_precision}, optim={args.optim.value}")

    record(checks, "a3", "TrainingArguments with only the CPU-forced changes (use_cpu=True, no tf32)", a_cpu)

    # a4: what could not be asked here.
    def a_gpu():
        keys = [k for k in GPU_CHECKED_KEYS if ta.get(k)]
        if not keys:
            return "no GPU-checked key is set"
        raise NotCheckable(
            f"{keys} are checked against the GPU in TrainingArguments.__post_init__ (bf16: "
            f"torch.cuda.is_bf16_supported(); tf32: CUDA compute capability >= 8); the plan's GPU(s): "
            f"{sorted(set(gpu_names))}; not checkable without one")

    record(checks, "a4", "GPU-dependent TrainingArguments keys", a_gpu)

    # b: LoraConfig, and the adapters on the checkpoint's architecture.
    if lora is not None:
        def b_conf():
            import peft
            c = peft.LoraConfig(**lora)
            return f"LoraConfig r={c.r} alpha={c.lora_alpha} targets={sorted(c.target_modules)} (peft {peft.__version__})"

        record(checks, "b1", "peft.LoraConfig(**lora_config.json)", b_conf)

        def b_model():
            import peft
            from transformers import AutoConfig, AutoModelForCausalLM
            model_dir = art["argv"][art["argv"].index("--model") + 1]
            cfg_path = pathlib.Path(model_dir) / "config.json"
            if not cfg_path.exists():
                raise NotCheckable(f"{cfg_path} is not on this machine")
            cfg = AutoConfig.from_pretrained(model_dir)
            with torch.device("meta"):
                m = AutoModelForCausalLM.from_config(cfg)
            pm = peft.get_peft_model(m, peft.LoraConfig(**lora))
            n = sum(p.numel() for p in pm.parameters() if p.requires_grad)
            want = settings.get("trainable_parameters")
            if want is not None and n != want:
                raise ValueError(f"PEFT trains {n} parameters, the plan says {want}")
            return f"get_peft_model on {cfg.architectures} (meta device): {n} trainable parameters = plan's {want}"

        record(checks, "b2", "LoRA adapters on the checkpoint's architecture (meta device)", b_model)

    # c: BitsAndBytesConfig.
    if bnb is not None:
        def c_conf():
            from transformers import BitsAndBytesConfig
            c = BitsAndBytesConfig(**bnb)
            return (f"BitsAndBytesConfig quant_method={c.quant_method.value} 4bit={c.load_in_4bit} "
                    f"type={c.bnb_4bit_quant_type} double={c.bnb_4bit_use_double_quant} "
                    f"compute={c.bnb_4bit_compute_dtype}")

        record(checks, "c1", "transformers.BitsAndBytesConfig(**bnb_config.json)", c_conf)

    # d: accelerate, on the file as written and, where it differs, on the proposed fix of it.
    state = {}

    def d_chain(yaml_name, sfx):
        for k in [k for k in os.environ if k.startswith("ACCELERATE_")]:
            del os.environ[k]
        st = state.setdefault(sfx, {})

        def d_load():
            from accelerate.commands.config.config_args import load_config_from_file
            c = load_config_from_file(yaml_name)
            st["cfg"] = c
            return (f"{type(c).__name__}: distributed_type={c.distributed_type}, mixed_precision={c.mixed_precision}, "
                    f"num_processes={c.num_processes}, gpu_ids={c.gpu_ids!r} ({type(c.gpu_ids).__name__})")

        record(checks, "d1" + sfx, f"accelerate load_config_from_file({yaml_name})", d_load)

        def d_validate():
            from accelerate.commands.launch import _validate_launch_command, launch_command_parser
            argv = [yaml_name if x == "accelerate_config.yaml" else x for x in art["argv"]]
            args = launch_command_parser().parse_args(argv[argv.index("launch") + 1:])
            args, defaults, mp_from_config = _validate_launch_command(args)
            st["launch_args"], st["defaults"], st["mp_from_config"] = args, defaults, mp_from_config
            return (f"use_deepspeed={args.use_deepspeed} multi_gpu={args.multi_gpu} num_processes={args.num_processes} "
                    f"gpu_ids={args.gpu_ids!r} mixed_precision={args.mixed_precision} (from the config file: "
                    f"{mp_from_config})")

        record(checks, "d2" + sfx, "accelerate launch argument validation (_validate_launch_command) of the argv",
               d_validate)
        if ds is None:
            return

        def d_env():
            from accelerate.utils.launch import prepare_deepspeed_cmd_env
            args = st.get("launch_args")
            if args is None:
                raise NotCheckable("d2 failed; no validated launch arguments to hand on")
            # As launch_command does before deepspeed_launcher.
            fields = list(st["defaults"].deepspeed_config.keys()) if st["defaults"] else []
            if st["mp_from_config"]:
                fields.append("mixed_precision")
            args.deepspeed_fields_from_accelerate_config = ",".join(fields)
            _, env = prepare_deepspeed_cmd_env(args)
            keep = {k: v for k, v in env.items() if k.startswith("ACCELERATE_")}
            os.environ.update(keep)
            return "; ".join(f"{k}={v}" for k, v in sorted(keep.items()) if "DEEPSPEED" in k or "MIXED" in k
                             or "DS_FIELDS" in k)

        record(checks, "d3" + sfx, "accelerate prepare_deepspeed_cmd_env (the environment the script is handed)", d_env)

        def d_plugin():
            from accelerate.utils import DeepSpeedPlugin
            if "ACCELERATE_USE_DEEPSPEED" not in os.environ:
                raise NotCheckable("d3 did not run")
            # What TrainingArguments.__post_init__ does under `accelerate launch` (no `deepspeed` argument):
            # DeepSpeedPlugin() from the environment, then set_mixed_precision and set_deepspeed_weakref.
            p = DeepSpeedPlugin()
            mp = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
            p.set_mixed_precision(mp)
            # And the form the brief names, with the file given.
            p2 = DeepSpeedPlugin(hf_ds_config="ds_config.json")
            p2.set_mixed_precision(mp)
            return (f"DeepSpeedPlugin() and DeepSpeedPlugin(hf_ds_config=ds_config.json): zero_stage={p.zero_stage} "
                    f"zero3_init_flag={p.zero3_init_flag}; set_mixed_precision({mp}) agreed with the file")

        record(checks, "d4" + sfx, "accelerate DeepSpeedPlugin from the launch environment + set_mixed_precision",
               d_plugin)

    d_chain("accelerate_config.yaml", "")
    text = (d / "accelerate_config.yaml").read_text()
    fixed = re.sub(r"^gpu_ids: ([0-9]+)$", r"gpu_ids: '\1'", text, flags=re.M)
    if ds is not None:
        fixed = re.sub(r"^mixed_precision: .*\n", "", fixed, flags=re.M)
    if fixed != text:
        (d / "accelerate_config.fixed.yaml").write_text(fixed)
        d_chain("accelerate_config.fixed.yaml", "-fixed")
    for k in [k for k in os.environ if k.startswith("ACCELERATE_")]:
        del os.environ[k]

    if ds is not None:
        def d_fill():
            from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
            kw = {k: v for k, v in ta.items() if k != "tf32"}
            args = TrainingArguments(**kw, use_cpu=True)

            class AtPlanWorld:
                """The TrainingArguments seen from `world` processes (this machine runs one)."""

                def __getattr__(self, k):
                    return world if k == "world_size" else getattr(args, k)

            hf = HfTrainerDeepSpeedConfig(json.loads((d / "ds_config.json").read_text()))
            hf.trainer_config_process(AtPlanWorld())

            class M:
                config = transformers.AutoConfig.for_model("llama")

            hf.trainer_config_finalize(AtPlanWorld(), M(), 100)
            state["filled"] = hf.config
            return (f"no mismatch at world size {world}: train_batch_size={hf.config.get('train_batch_size')} = "
                    f"{world} x {args.per_device_train_batch_size} x {args.gradient_accumulation_steps}")

        record(checks, "d5", "transformers HfTrainerDeepSpeedConfig fill_match against TrainingArguments", d_fill)

        # e: DeepSpeed's own validation.
        def e_zero():
            from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
            z = DeepSpeedZeroConfig(**ds["zero_optimization"])
            return (f"stage={int(z.stage)} offload_optimizer={z.offload_optimizer and z.offload_optimizer.device} "
                    f"offload_param={z.offload_param and z.offload_param.device} "
                    f"gather_16bit_on_save={z.gather_16bit_weights_on_model_save}")

        record(checks, "e1", "deepspeed DeepSpeedZeroConfig(**zero_optimization)", e_zero)

        def e_full():
            import deepspeed.comm
            from deepspeed.runtime.config import DeepSpeedConfig
            # DeepSpeedConfig asks dist.get_rank() and then the mpu for the data-parallel world size; without a
            # process group (DeepSpeed's CPU one JIT-builds a shared-memory op) this process answers rank 0.
            deepspeed.comm.get_rank = lambda *a, **k: 0
            msgs = []
            raw = DeepSpeedConfig(json.loads((d / "ds_config.json").read_text()), mpu=_Mpu(world))
            msgs.append(f"as written: train_batch_size={raw.train_batch_size} micro={raw.train_micro_batch_size_per_gpu} "
                        f"gas={raw.gradient_accumulation_steps} world={raw.world_size} zero_stage={raw.zero_optimization_stage} "
                        f"bf16={raw.bfloat16_config.enabled} fp16={raw.float16_config.enabled}")
            if "filled" in state:
                DeepSpeedConfig(state["filled"], mpu=_Mpu(world))
                msgs.append("with the Trainer's auto values filled: ok")
            return "; ".join(msgs)

        record(checks, "e2", "deepspeed DeepSpeedConfig(ds_config.json) at the plan's world size", e_full)

    print(MARK + json.dumps({"checks": checks, "plan": plan}), flush=True)


def probe_args(dirpath):
    """Under `accelerate launch`: TrainingArguments as train.py builds it, with use_cpu and without tf32."""
    from transformers import TrainingArguments

    ta = json.loads((pathlib.Path(dirpath) / "training_args.json").read_text())
    ta.pop("tf32", None)
    args = TrainingArguments(**ta, use_cpu=True)
    p = args.deepspeed_plugin
    desc = "no DeepSpeed plugin" if p is None else f"DeepSpeedPlugin zero_stage={p.zero_stage} from {p.hf_ds_config.config.get('zero_optimization', {}).get('stage')}"
    print(MARK + f"TrainingArguments constructed: mixed_precision={args.mixed_precision}, {desc}", flush=True)


# ----------------------------------------------------------------------------------------------------------------
# The parent: children, and the two commands.


def run(cmd, cwd, env, timeout):
    try:
        p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        return 124, f"timed out after {timeout} s: {(e.stdout or b'')[-500:]!r}"


def check_doc(doc_path, workdir):
    doc, art = write_files(doc_path, workdir)
    env0 = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "CUDA_VISIBLE"))}
    rc, out = run([sys.executable, str(HERE), "--child", str(workdir), str(doc_path)], workdir, env0, CHILD_TIMEOUT_S)
    try:
        res = json.loads([ln for ln in out.splitlines() if ln.startswith(MARK)][-1][len(MARK):])
        checks = res["checks"]
    except Exception:  # noqa: BLE001
        checks = [{"check": "child", "name": "in-process checks", "status": "failed", "message": tail(out)}]

    env = dict(env0, **art.get("env", {}))
    # f: the script itself.
    rc, out = run([sys.executable, "train.py", "--help"], workdir, env, LAUNCH_TIMEOUT_S)
    checks.append({"check": "f1", "name": "python train.py --help", "status": "ok" if rc == 0 else "failed",
                   "message": f"exit {rc}: " + tail(out.strip().splitlines()[0] if rc == 0 and out.strip() else out)})
    rc, out = run([sys.executable, "train.py", "--model", ".", "--data", "absent.jsonl"], workdir, env, LAUNCH_TIMEOUT_S)
    want = "--data absent.jsonl: no such file"
    checks.append({"check": "f2", "name": "python train.py with a missing --data file", "status":
                   "ok" if rc != 0 and want in out else "failed", "message": f"exit {rc}: {tail(out.strip())}"})

    # g: accelerate launch, as written, then each change the record names.
    argv = list(art["argv"])
    i = argv.index("train.py")
    bindir = str(pathlib.Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    variants = [("as written", argv, None)]
    cfg = (workdir / "accelerate_config.yaml").read_text()
    quoted = re.sub(r"^gpu_ids: ([0-9]+)$", r"gpu_ids: '\1'", cfg, flags=re.M)
    fixed = quoted
    if (workdir / "ds_config.json").exists():
        fixed = re.sub(r"^mixed_precision: .*\n", "", fixed, flags=re.M)
    if quoted != cfg:
        # YAML reads a lone number as an int, which accelerate then splits as a string.
        variants.append(("gpu_ids quoted as a YAML string (the proposed fix of the emitted file)", argv, quoted))
    variants.append(("plus what a CPU-only machine forces: --cpu --num_processes 1",
                     argv[:2] + ["--cpu", "--num_processes", "1"] + argv[2:], quoted))
    for label, av, yaml_text in variants:
        if yaml_text is not None:
            (workdir / "accelerate_config.yaml").write_text(yaml_text)
        cmd = av[: av.index("train.py") + 1] + ["--help"]
        rc, out = run(cmd, workdir, env, LAUNCH_TIMEOUT_S)
        ok = rc == 0 and "--model" in out and "--data" in out
        checks.append({"check": "g", "name": f"accelerate launch ... train.py --help: {label}",
                       "status": "ok" if ok else "failed", "command": " ".join(cmd),
                       "message": f"exit {rc}: {tail(out.strip())}"})
        if ok:
            break
    # g2: what the script does first under `accelerate launch` -- TrainingArguments with the environment the
    # launcher hands it -- with the CPU's changes (use_cpu, no tf32, one process), on the file with gpu_ids quoted
    # and, where it differs, on the fully fixed file.
    g2 = [("as written but gpu_ids quoted", quoted)]
    if fixed != quoted:
        g2.append(("with mixed_precision left out of the DeepSpeed accelerate config (the proposed fix)", fixed))
    for label, yaml_text in g2:
        (workdir / "accelerate_config.yaml").write_text(yaml_text)
        cmd = argv[:2] + ["--num_processes", "1"] + argv[2: argv.index("train.py")] + [
            str(HERE), "--probe-args", str(workdir)]
        rc, out = run(cmd, workdir, env, LAUNCH_TIMEOUT_S)
        line = [ln for ln in out.splitlines() if ln.startswith(MARK)]
        # The script's own exception, not torchrun's ChildFailedError wrapped round it.
        errs = [ln for ln in out.splitlines() if re.match(r"^(\[rank\d+\]: )?[A-Za-z_]*(Error|Exception): ", ln)]
        checks.append({"check": "g2", "name": f"TrainingArguments under accelerate launch (use_cpu, no tf32, "
                       f"--num_processes 1): {label}", "status": "ok" if rc == 0 and line else "failed",
                       "command": " ".join(cmd), "message": f"exit {rc}: " + (line[-1][len(MARK):] if line else
                                                                               (errs[0] if errs else tail(out.strip())))})
    (workdir / "accelerate_config.yaml").write_text(art["files"]["accelerate_config.yaml"])
    return {"hardware": [g.get("name") for g in doc.get("hardware", {}).get("gpus", [])],
            "workload": doc.get("workload", {}).get("preset"), "settings": doc.get("settings"), "checks": checks}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("docs", nargs="*")
    ap.add_argument("--out", help="write the results (JSON) here")
    ap.add_argument("--keep", help="write each document's files under this directory instead of a temporary one")
    ap.add_argument("--child", nargs=2, metavar=("DIR", "DOC"), help=argparse.SUPPRESS)
    ap.add_argument("--probe-args", metavar="DIR", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(*a.child)
        return 0
    if a.probe_args:
        probe_args(a.probe_args)
        return 0
    if not a.docs:
        ap.error("name at least one document")
    results = {"versions": versions(), "documents": {}}
    base = pathlib.Path(a.keep) if a.keep else pathlib.Path(tempfile.mkdtemp(prefix="check_launch."))
    for doc in a.docs:
        w = base / pathlib.Path(doc).stem
        if w.exists():
            shutil.rmtree(w)
        w.mkdir(parents=True)
        r = check_doc(pathlib.Path(doc).resolve(), w)
        results["documents"][pathlib.Path(doc).name] = r
        for c in r["checks"]:
            print(f"{pathlib.Path(doc).name:28} {c['check']:5} {c['status']:14} {c['name']}: {c['message'][:300]}",
                  flush=True)
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    failed = sum(c["status"] == "failed" and not c.get("expected_without_gpu") for r in results["documents"].values() for c in r["checks"])
    print(f"{failed} failed check(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
