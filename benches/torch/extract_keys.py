#!/usr/bin/env python3
"""Reads the option and key names of the training launch artifacts from the pinned packages' source, with `ast`
(Python 3.11, stdlib only; nothing is imported from the packages), and writes tests/fixtures/torch/hf-keys.json.

    python3 benches/torch/extract_keys.py --pkgs DIR

DIR holds the unpacked wheels (and the DeepSpeed sdist) as `<name>-<version>/`: transformers, peft, accelerate,
bitsandbytes, trl (wheels, `pip download --no-deps`, unzipped) and deepspeed (the sdist, untarred), and
optionally torch-<version>/ with only torch/distributed/run.py and torch/numa/binding.py, taken out of the torch
wheel by `benches/torch/wheel_member.py` (without it the torchrun section is left out). See benches/torch/README.md for the commands, versions and checksums.

What each section holds (every entry cites the file it was read from):
- TrainingArguments, LoraConfig (with the PeftConfig/PeftConfigMixin fields it inherits), trl SFTConfig (its
  own fields; it subclasses TrainingArguments): dataclass fields in declaration order with the annotation text,
  the default (a literal; `default_factory` and non-literal defaults as source text), the `help` text, and
  `choices` where the value set is closed: an Enum named in the annotation, a `Literal[...]`, or argparse
  `choices` in the field metadata.
- BitsAndBytesConfig: `__init__` parameters with defaults, and the values the code accepts where it checks.
- accelerate_launch / torchrun: every argparse option with its aliases, group, type, default, action, choices.
- accelerate_config: the config-file dataclasses' fields and the nested dict keys `accelerate config` writes.
- deepspeed_config: the top-level keys DeepSpeedConfig reads, and the pydantic models of zero_optimization,
  offload_param/offload_optimizer, bf16 and fp16 (fields, aliases, defaults, bounds, enum values, deprecations).
- hf_deepspeed_auto: which DeepSpeed keys transformers' Trainer fills from TrainingArguments when they are
  "auto" (and checks against them when they are not).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "fixtures" / "torch" / "hf-keys.json"


class Src:
    """One source file of an unpacked package: its text, tree and path relative to the package root."""

    cache: dict[Path, "Src"] = {}

    def __init__(self, path: Path, rel: str):
        self.path, self.rel = path, rel
        self.text = path.read_text()
        self.tree = ast.parse(self.text, filename=rel)

    @classmethod
    def open(cls, root: Path, rel: str) -> "Src":
        p = root / rel
        if p not in cls.cache:
            cls.cache[p] = Src(p, rel)
        return cls.cache[p]

    def cls(self, name: str) -> ast.ClassDef:
        hits = [n for n in ast.walk(self.tree) if isinstance(n, ast.ClassDef) and n.name == name]
        if len(hits) != 1:
            raise SystemExit(f"{self.rel}: expected one class {name}, found {len(hits)}")
        return hits[0]

    def func(self, name: str, within: ast.AST | None = None) -> ast.FunctionDef:
        scope = within or self.tree
        hits = [n for n in ast.walk(scope) if isinstance(n, ast.FunctionDef) and n.name == name]
        if len(hits) != 1:
            raise SystemExit(f"{self.rel}: expected one def {name}, found {len(hits)}")
        return hits[0]

    def where(self, node: ast.AST) -> str:
        return f"{self.rel}:{node.lineno}-{node.end_lineno}"

    def module_literals(self) -> dict:
        """Module-level `NAME = <literal>` assignments."""
        out = {}
        for n in self.tree.body:
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                v = literal(n.value)
                if v is not NOT_LITERAL:
                    out[n.targets[0].id] = v
        return out


NOT_LITERAL = object()


def literal(node: ast.AST | None):
    """The Python value of a literal expression (also `pp_int(<number>)`, DeepSpeed's pretty-printing int), or
    NOT_LITERAL."""
    if node is None:
        return NOT_LITERAL
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "pp_int" and node.args:
        v = literal(node.args[0])
        return int(v) if isinstance(v, (int, float)) else NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def jsonable(v):
    if isinstance(v, (tuple, set, frozenset)):
        return [jsonable(x) for x in v]
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, float) and v != v:
        return "nan"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return str(v)
    return v


def enum_values(src: Src, name: str) -> list:
    """Values of an Enum class: its `NAME = <literal>` members in order (aliases included once)."""
    out = []
    for n in src.cls(name).body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = literal(n.value)
            if v is not NOT_LITERAL and v not in out:
                out.append(v)
    return out


def annotation_choices(ann: ast.AST, enums: dict[str, tuple[list, str]]) -> tuple[list, list[str]]:
    """Closed value sets named by an annotation: `Literal[...]` members and known Enum classes."""
    values, sources = [], []
    for n in ast.walk(ann):
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "Literal":
            elts = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
            for e in elts:
                v = literal(e)
                if v is not NOT_LITERAL and v not in values:
                    values.append(v)
            sources.append("Literal")
        name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
        if name in enums:
            vals, where = enums[name]
            values += [v for v in vals if v not in values]
            sources.append(f"{where}:{name}")
    return values, sources


def call_kw(call: ast.Call, key: str) -> ast.AST | None:
    for k in call.keywords:
        if k.arg == key:
            return k.value
    return None


def is_call_to(node: ast.AST, *names: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id in names) or (isinstance(f, ast.Attribute) and f.attr in names)


def value_entry(node: ast.AST | None) -> dict:
    """{"default": literal} or {"default": null, "default_expr": source text}."""
    if node is None:
        return {"default": None, "required": True}
    v = literal(node)
    if v is NOT_LITERAL:
        return {"default": None, "default_expr": ast.unparse(node)}
    return {"default": jsonable(v)}


def dataclass_fields(src: Src, clsname: str, enums: dict, resolve_choices=None) -> dict:
    """The annotated fields of a dataclass body in order, as the JSON entries described in the module doc."""
    out = {}
    cls = src.cls(clsname)
    # Class-body variables used as defaults (`default_optim = "adamw_torch"`, reassigned under an `if`).
    local: dict[str, list] = {}

    def visit(node, conds):
        for c in ast.iter_child_nodes(node):
            if isinstance(c, ast.Assign) and len(c.targets) == 1 and isinstance(c.targets[0], ast.Name):
                v = literal(c.value)
                if v is not NOT_LITERAL:
                    local.setdefault(c.targets[0].id, []).append((v, c.lineno, conds))
            if isinstance(c, ast.If):
                for b in c.body:
                    visit(ast.Module(body=[b], type_ignores=[]), conds + [ast.unparse(c.test)])
            elif not isinstance(c, (ast.FunctionDef, ast.ClassDef)):
                visit(c, conds)

    visit(cls, [])
    for n in cls.body:
        if not (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)):
            continue
        ann = ast.unparse(n.annotation)
        if ann.startswith("ClassVar"):
            continue
        e: dict = {"type": ann}
        v = n.value
        meta = None
        if is_call_to(v, "field"):
            if call_kw(v, "default_factory") is not None:
                e.update({"default": None, "default_factory": ast.unparse(call_kw(v, "default_factory"))})
            else:
                e.update(value_entry(call_kw(v, "default")))
            init = call_kw(v, "init")
            if init is not None and literal(init) is False:
                e["init"] = False
            meta = call_kw(v, "metadata")
        else:
            e.update(value_entry(v))
        if e.get("default_expr") in local:
            vals = local[e["default_expr"]]
            if len(vals) == 1:
                e["default"] = jsonable(vals[0][0])
            else:  # decided when the class is defined: each value with the conditions that select it
                e["default_alternatives"] = [
                    {"value": jsonable(v), "when": " and ".join(c) or "otherwise", "source": f"{src.rel}:{line}"}
                    for v, line, c in vals
                ]
        choices, sources = annotation_choices(n.annotation, enums)
        help_text = None
        if isinstance(meta, ast.Dict):
            for k, mv in zip(meta.keys, meta.values):
                key = literal(k)
                if key == "help":
                    h = literal(mv)
                    help_text = h if isinstance(h, str) else ast.unparse(mv)
                elif key == "choices":
                    c = literal(mv)
                    if c is NOT_LITERAL and resolve_choices is not None:
                        c = resolve_choices(mv)
                    if c is NOT_LITERAL:
                        raise SystemExit(f"{src.rel}:{n.lineno}: choices {ast.unparse(mv)} not resolved")
                    choices += [x for x in c if x not in choices]
                    sources.append("metadata choices")
        if choices:
            e["choices"] = jsonable(choices)
            e["choices_from"] = sources
        if help_text is not None:
            e["help"] = help_text
        e["source"] = f"{src.rel}:{n.lineno}"
        out[n.target.id] = e
    return out


def argparse_options(src: Src, fn: ast.FunctionDef, consts: dict) -> list[dict]:
    """Every `add_argument` call in `fn`: option strings, group title, type, default, action, choices, help."""
    groups: dict[str, str] = {}
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and is_call_to(n.value, "add_argument_group")
            and n.value.args
        ):
            groups[n.targets[0].id] = literal(n.value.args[0])
    out = []
    calls = [n for n in ast.walk(fn) if is_call_to(n, "add_argument")]
    for c in sorted(calls, key=lambda c: c.lineno):
        names = [literal(a) for a in c.args]
        if any(not isinstance(x, str) for x in names):
            raise SystemExit(f"{src.rel}:{c.lineno}: non-literal option name")
        owner = c.func.value.id if isinstance(c.func.value, ast.Name) else ast.unparse(c.func.value)
        e: dict = {"options": names, "group": groups.get(owner)}
        for key in ("type", "action", "nargs", "const", "dest", "required", "metavar"):
            k = call_kw(c, key)
            if k is not None:
                v = literal(k)
                e[key] = jsonable(v) if v is not NOT_LITERAL else ast.unparse(k)
        d = call_kw(c, "default")
        if d is not None:
            e.update(value_entry(d))
        ch = call_kw(c, "choices")
        if ch is not None:
            v = literal(ch)
            if v is NOT_LITERAL:
                # A list built from module constants (e.g. `["no"] + [b.lower() for b in DYNAMO_BACKENDS]`): evaluated
                # with only those constants and no builtins but `str` methods on them.
                try:
                    v = eval(compile(ast.Expression(ch), src.rel, "eval"), {"__builtins__": {}}, dict(consts))
                except NameError as err:
                    v = None  # set at run time (e.g. from an optional package): only the expression is recorded
                    e["choices_unresolved"] = str(err)
            if v is not None:
                e["choices"] = jsonable(list(v))
            e["choices_expr"] = ast.unparse(ch)
        h = call_kw(c, "help")
        if h is not None:
            hv = literal(h)
            e["help"] = hv if isinstance(hv, str) else ast.unparse(h)
        e["source"] = f"{src.rel}:{c.lineno}"
        out.append(e)
    return out


# --------------------------------------------------------------------------------------------------------------


def training_arguments(tf: Path) -> dict:
    ta = Src.open(tf, "transformers/training_args.py")
    tu = Src.open(tf, "transformers/trainer_utils.py")
    du = Src.open(tf, "transformers/debug_utils.py")
    lg = Src.open(tf, "transformers/utils/logging.py")
    iu = Src.open(tf, "transformers/integrations/integration_utils.py")
    enums = {"OptimizerNames": (enum_values(ta, "OptimizerNames"), ta.rel), "DebugOption": (enum_values(du, "DebugOption"), du.rel)}
    for e in ("IntervalStrategy", "SaveStrategy", "HubStrategy", "SchedulerType"):
        enums[e] = (enum_values(tu, e), tu.rel)

    # `trainer_log_levels = dict(**log_levels, passive=-1)` with `log_levels` the dict in utils/logging.py.
    log_levels = list(lg.module_literals().get("log_levels", {}) or [])
    if not log_levels:
        # utils/logging.py builds it with logging.DEBUG etc., not literals: take its keys from the dict display.
        node = next(
            n.value
            for n in lg.tree.body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "log_levels"
        )
        log_levels = [literal(k) for k in node.keys]
    tll = next(
        n.value
        for n in ta.tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "trainer_log_levels"
    )
    assert ast.unparse(tll) == "dict(**log_levels, passive=-1)", ast.unparse(tll)
    trainer_log_levels = log_levels + ["passive"]

    def resolve(node):
        if ast.unparse(node) == "trainer_log_levels.keys()":
            return trainer_log_levels
        return NOT_LITERAL

    fields = dataclass_fields(ta, "TrainingArguments", enums, resolve)

    # report_to: the integration names get_reporting_integration_callbacks accepts, plus "all" and "none" that
    # __post_init__ expands.
    itc = next(
        n.value
        for n in iu.tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "INTEGRATION_TO_CALLBACK"
    )
    post = ta.func("__post_init__", ta.cls("TrainingArguments"))
    special = sorted(
        {
            literal(c.comparators[0])
            for c in ast.walk(post)
            if isinstance(c, ast.Compare)
            and ast.unparse(c.left) == "self.report_to"
            and isinstance(c.comparators[0], ast.Constant)
        }
    )
    fields["report_to"]["choices"] = [literal(k) for k in itc.keys] + special
    fields["report_to"]["choices_from"] = [f"{iu.rel}:{itc.lineno} INTEGRATION_TO_CALLBACK", f"{ta.where(post)} __post_init__"]

    # fsdp: a bool switch now; the legacy string form takes FSDPOption words (deprecated, see the help text).
    fields["fsdp"]["legacy_string_choices"] = enum_values(tu, "FSDPOption")
    fields["fsdp"]["legacy_string_choices_from"] = f"{tu.rel}:FSDPOption"
    return fields


def hf_deepspeed_auto(tf: Path) -> dict:
    ds = Src.open(tf, "transformers/integrations/deepspeed.py")
    cls = ds.cls("HfTrainerDeepSpeedConfig")
    entries = []
    for stage in ("trainer_config_process", "trainer_config_finalize"):
        fn = ds.func(stage, cls)
        for c in ast.walk(fn):
            if is_call_to(c, "fill_match", "fill_only") and isinstance(c.func, ast.Attribute):
                args = list(c.args)
                e = {
                    "ds_key": literal(args[0]),
                    "hf_value": ast.unparse(args[1]),
                    "hf_key": literal(args[2]) if len(args) > 2 else None,
                    "must_match": c.func.attr == "fill_match"
                    and (len(args) < 4 or ast.unparse(args[3])),
                    "stage": stage,
                    "source": f"{ds.rel}:{c.lineno}",
                }
                entries.append(e)
    entries.sort(key=lambda e: int(e["source"].rsplit(":", 1)[1]))
    sets = []
    for fname in ("trainer_config_process", "deepspeed_optim_sched"):
        fn = ds.func(fname, cls) if fname == "trainer_config_process" else ds.func(fname)
        for n in ast.walk(fn):
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Subscript):
                sets.append({"target": ast.unparse(n.targets[0]), "value": ast.unparse(n.value), "source": f"{ds.rel}:{n.lineno}"})
    fm = ds.func("fill_match", cls)
    return {
        "fill": entries,
        "also_sets": sets,
        "rule": (
            "fill_match(ds_key, hf_value): a DeepSpeed value \"auto\" is replaced by the TrainingArguments value; any "
            "other value must equal it when must_match, or Trainer raises at trainer_config_finalize; fill_only "
            "replaces \"auto\" and never checks"
        ),
        "rule_source": ds.where(fm),
    }


def lora_config(pf: Path) -> dict:
    base = Src.open(pf, "peft/config.py")
    lc = Src.open(pf, "peft/tuners/lora/config.py")
    pt = Src.open(pf, "peft/utils/peft_types.py")
    enums = {"TaskType": (enum_values(pt, "TaskType"), pt.rel), "PeftType": (enum_values(pt, "PeftType"), pt.rel)}
    out: dict = {}
    # Dataclass inheritance: a redefined field keeps its first position and takes the subclass's definition.
    for s, c in ((base, "PeftConfigMixin"), (base, "PeftConfig"), (lc, "LoraConfig")):
        for k, v in dataclass_fields(s, c, enums).items():
            v["declared_in"] = c
            out[k] = v
    return out


def sft_config(trl: Path) -> dict:
    s = Src.open(trl, "trl/trainer/sft_config.py")
    b = Src.open(trl, "trl/trainer/base_config.py")
    out = {}
    for src, c in ((b, "_BaseConfig"), (s, "SFTConfig")):
        for k, v in dataclass_fields(src, c, {}).items():
            v["declared_in"] = c
            out[k] = v
    return {"inherits": "transformers.TrainingArguments (defaults here override it)", "fields": out}


def bnb_config(tf: Path, bnb: Path) -> dict:
    qc = Src.open(tf, "transformers/utils/quantization_config.py")
    cls = qc.cls("BitsAndBytesConfig")
    init = qc.func("__init__", cls)
    a = init.args
    params = {}
    pos = a.args[1:]
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for p, d in zip(pos, defaults):
        params[p.arg] = value_entry(d) if d is not None else {"default": None, "required": True}
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        params[p.arg] = value_entry(d) if d is not None else {"default": None, "required": True}
    if a.kwarg:
        params["**" + a.kwarg.arg] = {"default": None, "note": "extra keys are set as attributes"}
    for k in params:
        params[k]["source"] = qc.where(init)

    # bnb_4bit_quant_storage: the string list __init__ checks.
    storage = None
    for n in ast.walk(init):
        if (
            isinstance(n, ast.Compare)
            and ast.unparse(n.left) == "bnb_4bit_quant_storage"
            and isinstance(n.ops[0], ast.NotIn)
        ):
            storage = (literal(n.comparators[0]), f"{qc.rel}:{n.lineno}")
    # bnb_4bit_quant_type: transformers only checks it is a str; bitsandbytes' quantize_4bit rejects the rest.
    fb = Src.open(bnb, "bitsandbytes/functional.py")
    q4 = fb.func("quantize_4bit")
    qtype = None
    for n in ast.walk(q4):
        if isinstance(n, ast.Compare) and ast.unparse(n.left) == "quant_type" and isinstance(n.ops[0], ast.NotIn):
            qtype = (literal(n.comparators[0]), f"{fb.rel}:{n.lineno}")
    qm = qc.func("quantization_method", cls)
    named = [
        literal(c.comparators[0])
        for c in ast.walk(qm)
        if isinstance(c, ast.Compare) and ast.unparse(c.left) == "self.bnb_4bit_quant_type"
    ]
    params["bnb_4bit_quant_type"]["choices"] = jsonable(qtype[0])
    params["bnb_4bit_quant_type"]["choices_from"] = [qtype[1], f"{qc.where(qm)} quantization_method names {named}"]
    params["bnb_4bit_quant_storage"]["choices"] = jsonable(storage[0])
    params["bnb_4bit_quant_storage"]["choices_from"] = [storage[1], "or a torch.dtype; None means torch.uint8"]
    params["bnb_4bit_compute_dtype"]["choices_note"] = (
        "a torch.dtype or the name of one (getattr(torch, name)); None means torch.float32"
    )
    return params


def accelerate_sections(acc: Path) -> tuple[list, dict]:
    la = Src.open(acc, "accelerate/commands/launch.py")
    cu = Src.open(acc, "accelerate/commands/config/config_utils.py")
    uc = Src.open(acc, "accelerate/utils/constants.py")
    consts = {**uc.module_literals(), **cu.module_literals()}
    launch = argparse_options(la, la.func("launch_command_parser"), consts)

    ca = Src.open(acc, "accelerate/commands/config/config_args.py")
    ud = Src.open(acc, "accelerate/utils/dataclasses.py")
    enums = {e: (enum_values(ud, e), ud.rel) for e in ("ComputeEnvironment", "DistributedType", "SageMakerDistributedType", "DynamoBackend", "PrecisionType")}
    classes = {c: dataclass_fields(ca, c, enums) for c in ("BaseConfig", "ClusterConfig", "SageMakerConfig")}
    cl = Src.open(acc, "accelerate/commands/config/cluster.py")
    nested: dict[str, dict] = {}
    for n in ast.walk(cl.tree):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if (
                    isinstance(t, ast.Subscript)
                    and isinstance(t.value, ast.Name)
                    and t.value.id.endswith("_config")
                    and isinstance(literal(t.slice), str)
                ):
                    nested.setdefault(t.value.id, {}).setdefault(literal(t.slice), f"{cl.rel}:{n.lineno}")
    vl = la.func("_validate_launch_command")
    copy_loop = next(
        f for f in ast.walk(vl) if isinstance(f, ast.For) and ast.unparse(f.target) == "(name, attr)"
    )
    config = {
        "fields": {c: f for c, f in classes.items()},
        "field_names": sorted({k for f in classes.values() for k in f}),
        "nested_keys": {k: dict(sorted(v.items())) for k, v in sorted(nested.items())},
        "nested_to_launch_option": (
            "a nested key becomes the launch option of the same name (fsdp_config keys get an fsdp_ prefix, "
            "fp8_config fp8_, dynamo_config dynamo_, when missing); a top-level field fills the option of its name "
            "when the command line left it unset (compute_environment, mixed_precision, distributed_type handled "
            "separately)"
        ),
        "nested_to_launch_option_source": la.where(copy_loop),
    }
    return launch, config


def deepspeed_sections(dsr: Path) -> dict:
    root = dsr

    def mod_path(cur: str, level: int, module: str | None) -> str | None:
        parts = cur.split("/")[:-1]
        if level:
            parts = parts[: len(parts) - (level - 1)]
        else:
            parts = []
        rel = "/".join(parts + (module.split(".") if module else []))
        for cand in (rel + ".py", rel + "/__init__.py"):
            if (root / cand).is_file():
                return cand
        return None

    consts_cache: dict[str, dict] = {}

    def consts(rel: str, seen=()) -> dict:
        """Module-level string/number constants of a module, including those it imports by name or `*`."""
        if rel in consts_cache:
            return consts_cache[rel]
        s = Src.open(root, rel)
        table: dict = {}
        for n in s.tree.body:
            if isinstance(n, ast.ImportFrom) and rel not in seen:
                target = mod_path(rel, n.level, n.module)
                if target is None:
                    continue
                sub = consts(target, seen + (rel,))
                for a in n.names:
                    if a.name == "*":
                        table.update(sub)
                    elif a.name in sub:
                        table[a.asname or a.name] = sub[a.name]
        table.update(s.module_literals())
        consts_cache[rel] = table
        return table

    cfg_rel = "deepspeed/runtime/config.py"
    cfg = Src.open(root, cfg_rel)

    # Functions that receive the top-level dict as `param_dict`: start from DeepSpeedConfig's methods and follow
    # every call that passes `param_dict` on, across the modules config.py imports.
    defs: dict[str, tuple[str, ast.AST]] = {}

    def index(rel: str, depth: int = 0):
        s = Src.open(root, rel)
        if rel.endswith("__init__.py") and depth < 2:
            # A package's __init__ re-exports: index what it imports as well.
            for n in s.tree.body:
                if isinstance(n, ast.ImportFrom):
                    t = mod_path(rel, n.level, n.module)
                    if t:
                        index(t, depth + 1)
        for n in s.tree.body:
            if isinstance(n, ast.FunctionDef):
                defs.setdefault(n.name, (rel, n))
            elif isinstance(n, ast.ClassDef):
                for m in n.body:
                    if isinstance(m, ast.FunctionDef) and m.name == "__init__":
                        defs.setdefault(n.name, (rel, m))

    index(cfg_rel)
    for n in cfg.tree.body:
        if isinstance(n, ast.ImportFrom):
            t = mod_path(cfg_rel, n.level, n.module)
            if t:
                index(t)
    keys: dict[str, list[str]] = {}
    # (module, function, names the top-level dict goes by there, constant bindings of its other parameters)
    todo = [
        (cfg_rel, m, {"param_dict", "self._param_dict", "config"}, {})
        for m in cfg.cls("DeepSpeedConfig").body
        if isinstance(m, ast.FunctionDef)
    ]
    done = set()
    while todo:
        rel, fn, aliases, bound = todo.pop()
        sig = (rel, fn.lineno, tuple(sorted(aliases)), tuple(sorted(bound.items())))
        if sig in done:
            continue
        done.add(sig)
        table = dict(consts(rel))
        # Parameters with constant defaults (`comm_type=COMMUNICATION_DATA_TYPE`), then what the caller passed.
        a = fn.args
        for p, d in zip(a.args[len(a.args) - len(a.defaults):], a.defaults):
            v = literal(d)
            if v is NOT_LITERAL and isinstance(d, ast.Name):
                v = table.get(d.id, NOT_LITERAL)
            if v is not NOT_LITERAL:
                table[p.arg] = v
        table.update(bound)

        def key_of(node):
            v = literal(node)
            if v is NOT_LITERAL and isinstance(node, ast.Name):
                v = table.get(node.id, NOT_LITERAL)
            return v if isinstance(v, str) else None

        def add(node, line):
            k = key_of(node)
            if k is not None:
                keys.setdefault(k, [])
                w = f"{rel}:{line}"
                if w not in keys[k]:
                    keys[k].append(w)

        def is_dict(node) -> bool:
            return ast.unparse(node) in aliases

        for n in ast.walk(fn):
            # D[K], D.get(K, ...), K in D(.keys()), get_scalar_param(D, K, ...); D passed on to another function.
            if isinstance(n, ast.Subscript) and is_dict(n.value):
                add(n.slice, n.lineno)
            elif isinstance(n, ast.Call):
                f = n.func
                if isinstance(f, ast.Attribute) and f.attr == "get" and is_dict(f.value) and n.args:
                    add(n.args[0], n.lineno)
                    continue
                pos = [i for i, x in enumerate(n.args) if is_dict(x)]
                if not pos:
                    continue
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in ("get_scalar_param", "get_list_param", "get_dict_param") and len(n.args) > 1:
                    add(n.args[1], n.lineno)
                elif name in defs:
                    crel, cfn = defs[name]
                    params = [x.arg for x in cfn.args.args]
                    if params and params[0] == "self":
                        params = params[1:]
                    if pos[0] >= len(params):
                        continue
                    cb = {}
                    for i, x in enumerate(n.args):
                        if i < len(params) and i != pos[0]:
                            k = key_of(x)
                            if k is not None:
                                cb[params[i]] = k
                    todo.append((crel, cfn, {params[pos[0]]}, cb))
            elif isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops):
                right = ast.unparse(n.comparators[0])
                if right in aliases or right.removesuffix(".keys()") in aliases:
                    add(n.left, n.lineno)
            elif isinstance(n, (ast.DictComp, ast.ListComp)):
                # {key: param_dict.get(key, {}) for key in ("tensorboard", ...)}
                for g in n.generators:
                    it = literal(g.iter)
                    if isinstance(it, (tuple, list)) and any(f"{al}.get" in ast.unparse(n) for al in aliases):
                        for k in it:
                            keys.setdefault(k, []).append(f"{rel}:{n.lineno}")

    def removed(name: str) -> dict:
        node = next(
            n.value for n in cfg.tree.body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name
        )
        return {"keys": [literal(k) for k in node.keys], "source": cfg.where(node)}

    def pydantic(rel: str, clsname: str, nested: dict | None = None) -> dict:
        s = Src.open(root, rel)
        enums = {}
        for n in ast.walk(s.tree):
            if isinstance(n, ast.ClassDef) and any(ast.unparse(b) in ("Enum", "str, Enum") or ast.unparse(b).endswith("Enum") for b in n.bases):
                enums[n.name] = (enum_values(s, n.name), rel)
        for n in s.tree.body:
            if isinstance(n, ast.ImportFrom):
                t = mod_path(rel, n.level, n.module)
                if t:
                    ts = Src.open(root, t)
                    for a in n.names:
                        for c in ast.walk(ts.tree):
                            if isinstance(c, ast.ClassDef) and c.name == a.name and any(ast.unparse(b).endswith("Enum") for b in c.bases):
                                enums[a.name] = (enum_values(ts, a.name), t)
        out = {}
        body = s.cls(clsname).body
        for i, n in enumerate(body):
            if not (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)):
                continue
            e: dict = {"type": ast.unparse(n.annotation)}
            v = n.value
            if is_call_to(v, "Field"):
                dflt = v.args[0] if v.args else call_kw(v, "default")
                if call_kw(v, "default_factory") is not None:
                    e.update({"default": None, "default_factory": ast.unparse(call_kw(v, "default_factory"))})
                else:
                    e.update(value_entry(dflt))
                for k in ("alias", "ge", "gt", "le", "lt"):
                    kv = call_kw(v, k)
                    if kv is not None:
                        e[k] = jsonable(literal(kv))
                extra = call_kw(v, "json_schema_extra")
                if isinstance(extra, ast.Dict):
                    for k, ev in zip(extra.keys, extra.values):
                        key = literal(k)
                        if key in ("deprecated", "new_param", "set_new_param", "deprecated_msg"):
                            val = literal(ev)
                            e[key] = jsonable(val) if val is not NOT_LITERAL else ast.unparse(ev)
            else:
                e.update(value_entry(v))
            choices, sources = annotation_choices(n.annotation, enums)
            if choices:
                e["choices"] = jsonable(choices)
                e["choices_from"] = sources
            nxt = body[i + 1] if i + 1 < len(body) else None
            if isinstance(nxt, ast.Expr) and isinstance(literal(nxt.value), str):
                e["doc"] = " ".join(literal(nxt.value).split())
            e["source"] = f"{rel}:{n.lineno}"
            name = n.target.id
            if nested and name in nested:
                e["fields"] = nested[name]
            out[name] = e
        validators = [
            {"name": m.name, "source": s.where(m), "code": ast.get_source_segment(s.text, m)}
            for m in body
            if isinstance(m, ast.FunctionDef) and any("validator" in ast.unparse(d) for d in m.decorator_list)
        ]
        return {"class": f"{rel}:{clsname}", "fields": out, "validators": validators}

    off_rel = "deepspeed/runtime/zero/offload_config.py"
    offload_param = pydantic(off_rel, "DeepSpeedZeroOffloadParamConfig")
    offload_opt = pydantic(off_rel, "DeepSpeedZeroOffloadOptimizerConfig")
    zero = pydantic(
        "deepspeed/runtime/zero/config.py",
        "DeepSpeedZeroConfig",
        {"offload_param": offload_param["fields"], "offload_optimizer": offload_opt["fields"]},
    )
    zero["offload_validators"] = offload_param["validators"] + offload_opt["validators"]
    prec = "deepspeed/runtime/precision_config.py"
    cu = Src.open(root, "deepspeed/runtime/config_utils.py")
    init = cu.func("__init__", cu.cls("DeepSpeedConfigModel"))
    mc = next(
        n for n in cu.cls("DeepSpeedConfigModel").body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "model_config"
    )
    return {
        "top_level_keys": {k: v for k, v in sorted(keys.items())},
        "top_level_keys_how": (
            "keys read from the top-level dict (param_dict[K], param_dict.get(K), K in param_dict, "
            "get_scalar_param(param_dict, K)) by DeepSpeedConfig's methods and every function they pass "
            "param_dict to, constants resolved through the modules' imports"
        ),
        "removed_top_level_keys": removed("_REMOVED_TOP_LEVEL_CONFIG_KEYS"),
        "removed_zero_optimization_keys": removed("_REMOVED_ZERO_CONFIG_KEYS"),
        "zero_optimization": zero,
        "bf16": pydantic(prec, "DeepSpeedBF16Config"),
        "fp16": pydantic(prec, "DeepSpeedFP16Config"),
        "pydantic_model_config": {"code": ast.get_source_segment(cu.text, mc), "source": cu.where(mc)},
        "auto_values_dropped": {
            "code": ast.get_source_segment(cu.text, init),
            "source": cu.where(init),
            "note": "a sub-config value \"auto\" that nothing replaced is dropped, so the field takes its default",
        },
    }


def torchrun(tr: Path) -> list:
    s = Src.open(tr, "torch/distributed/run.py")
    nb = Src.open(tr, "torch/numa/binding.py")
    # `choices=[mode.value for mode in _AffinityMode]`: run.py imports AffinityMode from torch/numa/binding.py.
    assert "AffinityMode as _AffinityMode" in s.text
    modes = [type("Member", (), {"value": v}) for v in enum_values(nb, "AffinityMode")]
    return argparse_options(s, s.func("get_args_parser"), {"_AffinityMode": modes})


def version_of(d: Path) -> str:
    return d.name.rsplit("-", 1)[1]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pkgs", required=True, type=Path)
    a = ap.parse_args(argv)

    def pkg(name: str) -> Path:
        hits = sorted(p for p in a.pkgs.iterdir() if p.is_dir() and p.name.startswith(name + "-"))
        if len(hits) != 1:
            raise SystemExit(f"{a.pkgs}: expected one {name}-<version>/ directory, found {[h.name for h in hits]}")
        return hits[0]

    tf, pf, acc, bnb, ds, trl = (pkg(n) for n in ("transformers", "peft", "accelerate", "bitsandbytes", "deepspeed", "trl"))
    launch, config = accelerate_sections(acc)
    out = {
        "versions": {p.name.rsplit("-", 1)[0]: version_of(p) for p in (tf, pf, acc, bnb, ds, trl)},
        "TrainingArguments": training_arguments(tf),
        "hf_deepspeed_auto": hf_deepspeed_auto(tf),
        "LoraConfig": lora_config(pf),
        "BitsAndBytesConfig": bnb_config(tf, bnb),
        "accelerate_launch": launch,
        "accelerate_config": config,
        "deepspeed_config": deepspeed_sections(ds),
        "trl_SFTConfig": sft_config(trl),
    }
    tr = sorted(p for p in a.pkgs.iterdir() if p.is_dir() and p.name.startswith("torch-"))
    if tr:
        out["versions"]["torch"] = version_of(tr[-1])
        out["torchrun"] = torchrun(tr[-1])
    else:
        print("no torch-<version>/ directory: torchrun left out", file=sys.stderr)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    n = {k: len(v) for k, v in out.items() if isinstance(v, (dict, list)) and k != "versions"}
    print(f"{OUT.relative_to(REPO)}: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
