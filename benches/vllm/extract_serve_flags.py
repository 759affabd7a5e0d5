#!/usr/bin/env python3
"""Extract every option string `vllm serve` accepts, and the allowed values of a few
flags, from an unpacked vllm package, by reading its source with `ast`.

Nothing from vllm is imported or executed (its import needs torch and a GPU stack);
the script follows the code path the serve subcommand takes at the pinned version:

    vllm/entrypoints/cli/serve.py  ServeSubcommand.subparser_init -> make_arg_parser
    vllm/entrypoints/common/cli_args.py  make_arg_parser: literal add_argument calls,
        FrontendArgs.add_cli_args (one `--field-name` per dataclass field of
        FrontendArgs and BaseFrontendArgs, plus any extra "flags"),
        AsyncEngineArgs.add_cli_args -> EngineArgs.add_cli_args
    vllm/engine/arg_utils.py  the literal add_argument("--x", "-y", **kw["field"]) calls;
        `get_kwargs` gives a bool field argparse.BooleanOptionalAction (adds `--no-x`),
        except a `bool | str | None` field (optional value, no `--no-` form)
    vllm/utils/argparse_utils.py  FlexibleArgumentParser registers EnableDisableAction
        for BooleanOptionalAction: `--enable-x` also gets `--disable-x` and vice versa.

Trade-off: reading source instead of importing vllm means the script cannot see
options a runtime plugin or an out-of-tree platform adds (`load_general_plugins`,
`current_platform.pre_register_and_update`); in-tree CUDA adds none at 0.33.0.

Usage: extract_serve_flags.py PKG_DIR [--wheel WHEEL] [--expect-version 0.33.0]
           [--flags-out FILE] [--choices-out FILE]
PKG_DIR is the directory that holds `vllm/` (an unzipped wheel) or `vllm/` itself.
Exit codes: 0 ok, 1 I/O error, 2 usage, 4 the package is not the expected version
or its source does not have the structure this script follows.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import sys
import tempfile
import zipfile
from pathlib import Path

# The vLLM release this script's code path was written against; another version may
# register options elsewhere, so it refuses one that differs unless told otherwise.
PINNED_VERSION = "0.33.0"

# Flags whose allowed values the planner needs (issue 11); the run fails if one of them
# yields no values, since an empty list would silently accept anything.
REQUIRED_CHOICES = (
    "--dtype",
    "--kv-cache-dtype",
    "--quantization",
    "--attention-backend",
    "--load-format",
)

# Options the planner emits; the run fails if one is missing from the extracted list.
REQUIRED_FLAGS = (
    "--tensor-parallel-size",
    "-tp",
    "--gpu-memory-utilization",
    "--kv-cache-memory-bytes",
    "--max-model-len",
    "--max-num-seqs",
    "--max-num-batched-tokens",
    "--kv-cache-dtype",
    "--dtype",
    "--quantization",
    "--enforce-eager",
    "--block-size",
    "--host",
    "--port",
    "--served-model-name",
    "--load-format",
    "--skip-tokenizer-init",
)

EXIT_OK, EXIT_IO, EXIT_USAGE, EXIT_INVALID = 0, 1, 2, 4


class SourceError(Exception):
    """The vllm source does not have the structure this script follows."""


class Package:
    """Parsed modules of one unpacked vllm tree, loaded on demand."""

    def __init__(self, root: Path):
        self.root = root  # the directory that holds vllm/
        self._trees: dict[str, ast.Module] = {}

    def path_of(self, module: str) -> Path:
        rel = Path(*module.split("."))
        for cand in (self.root / rel.with_suffix(".py"), self.root / rel / "__init__.py"):
            if cand.is_file():
                return cand
        raise SourceError(f"module {module} not found under {self.root}")

    def tree(self, module: str) -> ast.Module:
        if module not in self._trees:
            path = self.path_of(module)
            try:
                self._trees[module] = ast.parse(path.read_text(encoding="utf-8"), str(path))
            except SyntaxError as e:
                raise SourceError(f"{path}: cannot parse: {e}") from e
        return self._trees[module]

    def is_package(self, module: str) -> bool:
        return self.path_of(module).name == "__init__.py"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_statements(body: list[ast.stmt], type_checking: bool) -> list[ast.stmt]:
    """Module-level statements as run at runtime (`type_checking=False`: the `else` of
    `if TYPE_CHECKING`) or as a type checker sees them (`True`: its body)."""
    out: list[ast.stmt] = []
    for st in body:
        if isinstance(st, ast.If) and _is_type_checking(st.test):
            out.extend(_runtime_statements(st.body if type_checking else st.orelse, type_checking))
        elif isinstance(st, ast.Try):
            out.extend(_runtime_statements(st.body, type_checking))
        else:
            out.append(st)
    return out


def _abs_module(pkg: Package, module: str, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not pkg.is_package(module):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def resolve(pkg: Package, module: str, name: str, type_checking: bool = False, depth: int = 0):
    """Find the definition of `name` as seen from `module`: (module, ClassDef or value
    expression). Follows `from x import name` re-exports."""
    if depth > 20:
        raise SourceError(f"import chain too deep resolving {name} from {module}")
    stmts = _runtime_statements(pkg.tree(module).body, type_checking)
    found = None
    for st in stmts:
        if isinstance(st, ast.ClassDef) and st.name == name:
            found = (module, st)
        elif isinstance(st, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in st.targets
        ):
            found = (module, st.value)
        elif (
            isinstance(st, ast.AnnAssign)
            and isinstance(st.target, ast.Name)
            and st.target.id == name
            and st.value is not None
        ):
            found = (module, st.value)
        elif isinstance(st, ast.ImportFrom):
            for alias in st.names:
                if (alias.asname or alias.name) == name:
                    src = _abs_module(pkg, module, st)
                    if src.split(".")[0] != "vllm":
                        found = (src, None)  # outside vllm (torch, typing, ...)
                    else:
                        try:
                            found = resolve(pkg, src, alias.name, type_checking, depth + 1)
                        except SourceError:
                            # `from vllm.pkg import submodule`
                            found = (f"{src}.{alias.name}", None)
    if found is None:
        raise SourceError(f"{name} is not defined in {module}")
    return found


def class_fields(pkg: Package, module: str, cls: ast.ClassDef) -> list[tuple[str, ast.expr, str]]:
    """(field name, annotation, module of the annotation) of a dataclass, bases first."""
    fields: dict[str, tuple[ast.expr, str]] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name):
            try:
                bmod, bnode = resolve(pkg, module, base.id)
            except SourceError:
                continue
            if isinstance(bnode, ast.ClassDef):
                for n, ann, m in class_fields(pkg, bmod, bnode):
                    fields[n] = (ann, m)
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            ann = st.annotation
            if isinstance(ann, ast.Subscript) and _name_of(ann.value) == "ClassVar":
                continue
            fields[st.target.id] = (ann, module)
    return [(n, a, m) for n, (a, m) in fields.items()]


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_dataclass_like(cls: ast.ClassDef) -> bool:
    for d in cls.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if _name_of(target) in {"config", "dataclass"}:
            return True
    return False


def type_leaves(pkg: Package, module: str, ann: ast.expr, type_checking: bool, depth: int = 0):
    """Flatten a type annotation into leaves: ("bool"|"str"|"None"|..., None),
    ("Literal", [values]), ("enum", [member names]), ("dataclass", None), ("other", name)."""
    if depth > 20:
        raise SourceError(f"type alias chain too deep in {module}")
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        ann = ast.parse(ann.value, mode="eval").body
    if isinstance(ann, ast.Constant) and ann.value is None:
        return [("None", None)]
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        return type_leaves(pkg, module, ann.left, type_checking, depth + 1) + type_leaves(
            pkg, module, ann.right, type_checking, depth + 1
        )
    if isinstance(ann, ast.Subscript):
        head = _name_of(ann.value)
        args = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        if head == "Literal":
            vals = []
            for a in args:
                if isinstance(a, ast.Constant):
                    vals.append(a.value)
                    continue
                # Literal[OtherLiteralAlias, "x"] nests another Literal alias
                inner = type_leaves(pkg, module, a, type_checking, depth + 1)
                if not all(k == "Literal" for k, _ in inner):
                    raise SourceError(f"{module}: Literal member {ast.unparse(a)} is not a Literal")
                vals.extend(x for _, v in inner for x in v)
            return [("Literal", vals)]
        if head in {"Optional"}:
            return type_leaves(pkg, module, args[0], type_checking, depth + 1) + [("None", None)]
        if head == "Union":
            return [x for a in args for x in type_leaves(pkg, module, a, type_checking, depth + 1)]
        if head == "Annotated":
            return type_leaves(pkg, module, args[0], type_checking, depth + 1)
        return [("other", head)]  # list[...], dict[...], tuple[...]
    name = _name_of(ann)
    if name in {"bool", "str", "int", "float", "dict", "list", "tuple", "set"}:
        return [(name, None)]
    if isinstance(ann, ast.Attribute):
        return [("other", ast.unparse(ann))]
    if name is None:
        return [("other", ast.unparse(ann))]
    try:
        dmod, dnode = resolve(pkg, module, name, type_checking)
    except SourceError:
        return [("other", name)]
    if dnode is None:
        return [("other", name)]
    if isinstance(dnode, ast.ClassDef):
        if any(_name_of(b) in {"Enum", "IntEnum", "StrEnum"} for b in dnode.bases):
            members = [
                t.id
                for st in dnode.body
                if isinstance(st, ast.Assign)
                for t in st.targets
                if isinstance(t, ast.Name) and not t.id.startswith("_")
            ]
            return [("enum", members)]
        if _is_dataclass_like(dnode):
            return [("dataclass", name)]
        return [("other", name)]
    return type_leaves(pkg, dmod, dnode, type_checking, depth + 1)


def is_boolean_optional(pkg: Package, module: str, ann: ast.expr) -> bool:
    """Mirror of `_compute_kwargs` in vllm/engine/arg_utils.py: a dataclass field gets
    BooleanOptionalAction when its type contains bool, unless the field is a dataclass
    or exactly `bool | str | None` (an optional-value flag)."""
    kinds = {k for k, _ in type_leaves(pkg, module, ann, type_checking=False)}
    if "dataclass" in kinds:
        return False
    if kinds == {"bool", "str", "None"}:
        return False
    return "bool" in kinds


class Extractor:
    def __init__(self, pkg: Package):
        self.pkg = pkg
        self.options: set[str] = set()
        self.boolean: set[str] = set()  # option strings registered with BooleanOptionalAction
        # option string -> (class module, class node, field name) for choices lookup
        self.field_of: dict[str, tuple[str, ast.ClassDef, str]] = {}
        self.explicit_choices: dict[str, list] = {}
        self.unresolved_choices: dict[str, str] = {}  # option -> the runtime expression
        self.visited: set[tuple[str, str, str]] = set()

    # --- add_argument calls -------------------------------------------------------
    def _record(self, opts: list[str], boolean: bool, field=None, choices=None):
        for o in opts:
            self.options.add(o)
            if boolean:
                self.boolean.add(o)
            if field is not None:
                self.field_of[o] = field
            if choices is not None:
                self.explicit_choices[o] = choices

    def walk_function(self, module: str, cls: ast.ClassDef | None, fn: ast.FunctionDef):
        key = (module, cls.name if cls else "", fn.name)
        if key in self.visited:
            return
        self.visited.add(key)
        # names bound to get_kwargs(Cls) or to get_kwargs(Cls)["field"]
        kwargs_cls: dict[str, tuple[str, ast.ClassDef]] = {}
        kwargs_field: dict[str, tuple[str, ast.ClassDef, str]] = {}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                tgt, val = node.targets[0], node.value
                if not isinstance(tgt, ast.Name):
                    continue
                if (
                    isinstance(val, ast.Call)
                    and _name_of(val.func) == "get_kwargs"
                    and val.args
                    and isinstance(val.args[0], ast.Name)
                ):
                    cmod, cnode = resolve(self.pkg, module, val.args[0].id)
                    if not isinstance(cnode, ast.ClassDef):
                        raise SourceError(f"{module}: get_kwargs({val.args[0].id}) is not a class")
                    kwargs_cls[tgt.id] = (cmod, cnode)
                elif (
                    isinstance(val, ast.Subscript)
                    and isinstance(val.value, ast.Name)
                    and val.value.id in kwargs_cls
                    and isinstance(val.slice, ast.Constant)
                ):
                    cmod, cnode = kwargs_cls[val.value.id]
                    kwargs_field[tgt.id] = (cmod, cnode, val.slice.value)
                elif (
                    isinstance(val, ast.Subscript)
                    and isinstance(val.value, ast.Call)
                    and _name_of(val.value.func) == "get_kwargs"
                    and val.value.args
                    and isinstance(val.value.args[0], ast.Name)
                    and isinstance(val.slice, ast.Constant)
                ):  # get_kwargs(Cls)["field"]
                    cmod, cnode = resolve(self.pkg, module, val.value.args[0].id)
                    if not isinstance(cnode, ast.ClassDef):
                        raise SourceError(f"{module}: get_kwargs({val.value.args[0].id}) is not a class")
                    kwargs_field[tgt.id] = (cmod, cnode, val.slice.value)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
            if attr == "add_argument":
                self._add_argument(module, node, kwargs_cls, kwargs_field)
            elif attr == "add_cli_args" and isinstance(node.func.value, ast.Name):
                self._follow_add_cli_args(module, node.func.value.id)
            elif _name_of(node.func) == "make_arg_parser":
                mod = self._import_source(module, "make_arg_parser")
                self.walk_function(mod, None, self._find_function(mod, "make_arg_parser"))

    def _add_argument(self, module, call, kwargs_cls, kwargs_field):
        opts = [
            a.value
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
        ]
        if not opts:
            return  # positional (model_tag)
        if len(opts) != len(call.args) and any(not isinstance(a, ast.Starred) for a in call.args if not isinstance(a, ast.Constant)):
            raise SourceError(f"{module}:{call.lineno}: add_argument with non-literal option names")
        boolean = False
        choices = None
        field = None
        for kw in call.keywords:
            if kw.arg == "action" and _name_of(kw.value) == "BooleanOptionalAction":
                boolean = True
            elif kw.arg == "choices" and isinstance(kw.value, (ast.List, ast.Tuple)):
                choices = [e.value for e in kw.value.elts if isinstance(e, ast.Constant)]
            elif (
                kw.arg == "choices"
                and isinstance(kw.value, ast.Call)
                and _name_of(kw.value.func) == "get_args"
                and len(kw.value.args) == 1
            ):  # choices=get_args(SomeLiteral)
                leaves = type_leaves(self.pkg, module, kw.value.args[0], type_checking=False)
                if not all(k == "Literal" for k, _ in leaves):
                    raise SourceError(f"{module}:{call.lineno}: choices=get_args of a non-Literal")
                choices = [x for _, v in leaves for x in v]
            elif kw.arg == "choices":
                # computed at runtime (e.g. from the current platform): not recorded
                self.unresolved_choices[opts[0] if opts else "?"] = ast.unparse(kw.value)
            elif kw.arg is None:  # **something
                v = kw.value
                if isinstance(v, ast.Dict):
                    # **{**kw["field"], "default": None}: the spread entry is the field
                    spread = [val for k, val in zip(v.keys, v.values) if k is None]
                    overrides = [k.value for k in v.keys if isinstance(k, ast.Constant)]
                    if len(spread) != 1 or "action" in overrides or "type" in overrides:
                        raise SourceError(f"{module}:{call.lineno}: unrecognised **kwargs {ast.unparse(v)}")
                    v = spread[0]
                if (
                    isinstance(v, ast.Subscript)
                    and isinstance(v.value, ast.Name)
                    and v.value.id in kwargs_cls
                    and isinstance(v.slice, ast.Constant)
                ):
                    cmod, cnode = kwargs_cls[v.value.id]
                    field = (cmod, cnode, v.slice.value)
                elif isinstance(v, ast.Name) and v.id in kwargs_field:
                    field = kwargs_field[v.id]
                else:
                    raise SourceError(f"{module}:{call.lineno}: unrecognised **kwargs {ast.unparse(v)}")
        if field is not None:
            cmod, cnode, fname = field
            ann = self._field_annotation(cmod, cnode, fname)
            boolean = boolean or is_boolean_optional(self.pkg, ann[1], ann[0])
        self._record(opts, boolean, field, choices)

    def _field_annotation(self, cmod, cnode, fname):
        for n, ann, m in class_fields(self.pkg, cmod, cnode):
            if n == fname:
                return ann, m
        raise SourceError(f"{cmod}.{cnode.name} has no field {fname}")

    def _import_source(self, module: str, name: str) -> str:
        for st in ast.walk(self.pkg.tree(module)):
            if isinstance(st, ast.ImportFrom) and any((a.asname or a.name) == name for a in st.names):
                return _abs_module(self.pkg, module, st)
        for st in self.pkg.tree(module).body:
            if isinstance(st, ast.FunctionDef) and st.name == name:
                return module
        raise SourceError(f"{module}: where {name} comes from is not found")

    def _find_function(self, module: str, name: str) -> ast.FunctionDef:
        for st in self.pkg.tree(module).body:
            if isinstance(st, ast.FunctionDef) and st.name == name:
                return st
        raise SourceError(f"{module}: function {name} not found")

    def _follow_add_cli_args(self, module: str, cls_name: str):
        if cls_name in {"cls", "self"}:
            return
        cmod, cnode = resolve(self.pkg, module, cls_name)
        if not isinstance(cnode, ast.ClassDef):
            raise SourceError(f"{module}: {cls_name} is not a class")
        meth, mmod, mcls = self._find_method(cmod, cnode, "add_cli_args")
        body_src = ast.unparse(meth)
        if "get_kwargs(cls)" in body_src:
            self._dataclass_frontend(cmod, cnode)
        else:
            self.walk_function(mmod, mcls, meth)

    def _find_method(self, cmod, cnode, name):
        for st in cnode.body:
            if isinstance(st, ast.FunctionDef) and st.name == name:
                return st, cmod, cnode
        for base in cnode.bases:
            if isinstance(base, ast.Name):
                bmod, bnode = resolve(self.pkg, cmod, base.id)
                if isinstance(bnode, ast.ClassDef):
                    try:
                        return self._find_method(bmod, bnode, name)
                    except SourceError:
                        pass
        raise SourceError(f"{cmod}.{cnode.name} has no method {name}")

    def _dataclass_frontend(self, cmod: str, cnode: ast.ClassDef):
        """BaseFrontendArgs.add_cli_args: one `--field-name` per field, plus any
        `frontend_kwargs[field]["flags"] = [...]` set in _customize_cli_kwargs."""
        extra: dict[str, list[str]] = {}
        action_override: dict[str, str] = {}
        klass = cnode
        chain = [(cmod, cnode)]
        while True:  # collect _customize_cli_kwargs of the class and its bases
            bases = [b for b in klass.bases if isinstance(b, ast.Name)]
            if not bases:
                break
            bmod, bnode = resolve(self.pkg, chain[-1][0], bases[0].id)
            if not isinstance(bnode, ast.ClassDef):
                break
            chain.append((bmod, bnode))
            klass = bnode
        for _, c in chain:
            for st in ast.walk(c):
                if isinstance(st, ast.Assign) and len(st.targets) == 1:
                    t = st.targets[0]
                    if (
                        isinstance(t, ast.Subscript)
                        and isinstance(t.value, ast.Subscript)
                        and isinstance(t.slice, ast.Constant)
                        and isinstance(t.value.slice, ast.Constant)
                    ):
                        fname, key = t.value.slice.value, t.slice.value
                        if key == "flags" and isinstance(st.value, (ast.List, ast.Tuple)):
                            extra[fname] = [e.value for e in st.value.elts]
                        if key == "action":
                            action_override[fname] = ast.unparse(st.value)
        for fname, ann, amod in class_fields(self.pkg, cmod, cnode):
            opts = [*extra.get(fname, []), f"--{fname.replace('_', '-')}"]
            boolean = is_boolean_optional(self.pkg, amod, ann) and fname not in action_override
            self._record(opts, boolean, (cmod, cnode, fname))

    # --- results ------------------------------------------------------------------
    def all_options(self) -> list[str]:
        out = set(self.options)
        for o in self.boolean:
            if o.startswith("--"):
                out.add("--no-" + o[2:])  # argparse.BooleanOptionalAction
                for prefix, inverse in (("--enable-", "--disable-"), ("--disable-", "--enable-")):
                    if o.startswith(prefix):
                        out.add(inverse + o[len(prefix):])  # EnableDisableAction
        out.update({"-h", "--help"})  # argparse add_help (serve's add_parser keeps it)
        return sorted(out)

    def choices(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for opt, vals in self.explicit_choices.items():
            out[opt] = sorted(vals)
        for opt, (cmod, cnode, fname) in self.field_of.items():
            if not opt.startswith("--") or opt in out:
                continue
            ann, amod = self._field_annotation(cmod, cnode, fname)
            vals = self._values(amod, ann, cnode, fname)
            if vals:
                out[opt] = vals
        # --load-format: at runtime LoadFormats is `str` (the Literal exists only for
        # type checkers); get_model_loader accepts the keys of
        # _LOAD_FORMAT_TO_MODEL_LOADER, which must equal the Literal.
        loader_mod = "vllm.model_executor.model_loader"
        keys = self._dict_keys(loader_mod, "_LOAD_FORMAT_TO_MODEL_LOADER")
        literal = self._literal_values(loader_mod, "LoadFormats")
        if sorted(keys) != sorted(literal):
            raise SourceError(
                f"{loader_mod}: _LOAD_FORMAT_TO_MODEL_LOADER keys {sorted(keys)} differ from LoadFormats {sorted(literal)}"
            )
        out["--load-format"] = sorted(keys)
        return dict(sorted(out.items()))

    def _values(self, module, ann, cnode: ast.ClassDef, fname: str) -> list:
        leaves = type_leaves(self.pkg, module, ann, type_checking=True)
        vals: list = []
        for kind, v in leaves:
            if kind == "Literal":
                vals.extend(v)
            elif kind == "enum":
                # an Enum field is parsed by a pydantic validator from the member name
                # (case-insensitive); AttentionConfig also maps "auto" to None
                vals.extend(v)
        if any(k == "enum" for k, _ in leaves) and self._validator_maps_auto(cnode, fname):
            vals.append("auto")
        return sorted({x for x in vals if x is not None}, key=str)

    @staticmethod
    def _validator_maps_auto(cnode: ast.ClassDef, fname: str) -> bool:
        """A `@field_validator("fname", ...)` of the class that compares with "auto"
        and returns None (AttentionConfig.validate_backend_before)."""
        for st in cnode.body:
            if not isinstance(st, ast.FunctionDef):
                continue
            for d in st.decorator_list:
                if (
                    isinstance(d, ast.Call)
                    and _name_of(d.func) == "field_validator"
                    and any(isinstance(a, ast.Constant) and a.value == fname for a in d.args)
                ):
                    consts = {n.value for n in ast.walk(st) if isinstance(n, ast.Constant)}
                    returns_none = any(
                        isinstance(n, ast.Return) and isinstance(n.value, ast.Constant) and n.value.value is None
                        for n in ast.walk(st)
                    )
                    if "auto" in consts and returns_none:
                        return True
        return False

    def _dict_keys(self, module, name) -> list[str]:
        _, node = resolve(self.pkg, module, name)
        if not isinstance(node, ast.Dict):
            raise SourceError(f"{module}.{name} is not a dict literal")
        return [k.value for k in node.keys if isinstance(k, ast.Constant)]

    def _literal_values(self, module, name) -> list:
        _, node = resolve(self.pkg, module, name, type_checking=True)
        leaves = type_leaves(self.pkg, module, node, type_checking=True)
        return [x for k, v in leaves if k == "Literal" for x in v]


def package_version(pkg_dir: Path, wheel: Path | None) -> tuple[str, str]:
    """(version, where it was read)."""
    if wheel is not None:
        with zipfile.ZipFile(wheel) as zf:
            metas = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
            if len(metas) != 1:
                raise SourceError(f"{wheel}: expected one .dist-info/METADATA, found {len(metas)}")
            text = zf.read(metas[0]).decode("utf-8", "replace")
        m = re.search(r"^Version:\s*(\S+)\s*$", text, re.M)
        if not m:
            raise SourceError(f"{wheel}: METADATA has no Version line")
        return m.group(1), f"{wheel.name}:{metas[0]}"
    for dist in sorted(pkg_dir.glob("vllm-*.dist-info/METADATA")):
        m = re.search(r"^Version:\s*(\S+)\s*$", dist.read_text("utf-8", "replace"), re.M)
        if m:
            return m.group(1), str(dist)
    vfile = pkg_dir / "vllm" / "_version.py"
    if vfile.is_file():
        m = re.search(r"^__version__\s*=\s*version\s*=\s*['\"]([^'\"]+)['\"]", vfile.read_text("utf-8"), re.M)
        if m:
            return m.group(1), str(vfile)
    raise SourceError(f"{pkg_dir}: no vllm-*.dist-info/METADATA or vllm/_version.py with a version")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_write(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pkg_dir", type=Path, help="directory holding vllm/ (an unzipped wheel), or vllm/ itself")
    ap.add_argument("--wheel", type=Path, help="the wheel the tree came from: its METADATA version and sha256 go in the header")
    ap.add_argument("--expect-version", default=PINNED_VERSION)
    ap.add_argument("--flags-out", type=Path, help="write the option list here (default: stdout)")
    ap.add_argument("--choices-out", type=Path, help="write the flag -> allowed values JSON here")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code else EXIT_OK

    pkg_dir = args.pkg_dir
    if pkg_dir.name == "vllm" and (pkg_dir / "__init__.py").is_file():
        pkg_dir = pkg_dir.parent
    if not (pkg_dir / "vllm" / "__init__.py").is_file():
        print(f"error: {args.pkg_dir}: no vllm/__init__.py there", file=sys.stderr)
        return EXIT_INVALID
    try:
        version, version_src = package_version(pkg_dir, args.wheel)
        if version != args.expect_version:
            raise SourceError(f"{version_src}: vllm version {version}, expected {args.expect_version}")
        ext = Extractor(Package(pkg_dir))
        serve_mod = "vllm.entrypoints.cli.serve"
        serve_cls = resolve(ext.pkg, serve_mod, "ServeSubcommand")[1]
        init = next(
            (st for st in serve_cls.body if isinstance(st, ast.FunctionDef) and st.name == "subparser_init"),
            None,
        )
        if init is None:
            raise SourceError(f"{serve_mod}: ServeSubcommand.subparser_init not found")
        ext.walk_function(serve_mod, serve_cls, init)
        options = ext.all_options()
        choices = ext.choices()
        missing = [f for f in REQUIRED_FLAGS if f not in options]
        if missing:
            raise SourceError(f"required options missing from the extracted list: {missing}")
        empty = [f for f in REQUIRED_CHOICES if not choices.get(f)]
        if empty:
            raise SourceError(f"no allowed values found for {empty}")
        wheel_sha = sha256_of(args.wheel) if args.wheel else "not given (--wheel)"
    except SourceError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except (OSError, zipfile.BadZipFile) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_IO

    header = [
        f"# Option strings accepted by `vllm serve` at vLLM {version} ({len(options)} options).",
        "# Generated by benches/vllm/extract_serve_flags.py (stdlib ast; vllm not imported):",
        "#   python3 benches/vllm/extract_serve_flags.py <unzipped wheel dir> --wheel "
        + (args.wheel.name if args.wheel else "<wheel>"),
        f"# version read from: {Path(version_src).name if not args.wheel else version_src}",
        f"# wheel sha256: {wheel_sha}",
        "# Includes the --no-X forms of BooleanOptionalAction flags and the --enable-X/--disable-X",
        "# inverses FlexibleArgumentParser's EnableDisableAction adds. Not listed: underscore",
        "# spellings (--max_model_len; FlexibleArgumentParser rewrites _ to - before parsing),",
        "# dotted JSON keys (--compilation-config.mode 3), -O<n> (rewritten to --optimization-level),",
        "# and options runtime plugins may add.",
    ]
    flags_text = "\n".join(header + options) + "\n"
    choices_text = json.dumps(choices, indent=2, sort_keys=True) + "\n"
    try:
        if args.flags_out:
            atomic_write(args.flags_out, flags_text)
        else:
            sys.stdout.write(flags_text)
        if args.choices_out:
            atomic_write(args.choices_out, choices_text)
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_IO
    for opt, expr in sorted(ext.unresolved_choices.items()):
        print(f"note: {opt}: choices computed at runtime, not recorded: {expr}", file=sys.stderr)
    print(f"{len(options)} options, {len(choices)} flags with allowed values", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
