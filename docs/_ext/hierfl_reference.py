"""Reference pages generated from the code, at build time.

The scenario keys come from the pydantic models (``hierfl.scenario.schema`` and every plug-in's
config model: type, default, constraints, ``Field(description=…)``); the plug-in pages from the
registries (``hierfl.config.registry.Registry.instances()``: one page per kind, one section per
registered name, from its docstrings and config model); the output contract from
``hierfl.output.contract``. A new plug-in, key or metrics event therefore documents itself, and
:func:`undocumented` lists what has no description (``tests/interface/test_docs.py`` fails on it).

Sphinx is needed only by :func:`setup`; the rest runs without it.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OUT = DOCS / "reference" / "generated"


# --------------------------------------------------------------------------------------------- models


def _registries() -> list[Any]:
    import hierfl.scenario.schema  # noqa: F401  (assembles the schema: every plug-in is registered)
    from hierfl.config.registry import Registry

    return Registry.instances()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class _Plugins(dict):
    """Registered config class → (registry, name); a subclass (a field's variant) maps as its base."""

    def _find(self, cls: Any) -> Any:
        for base in getattr(cls, "__mro__", ())[:3]:
            if dict.__contains__(self, base):
                return dict.__getitem__(self, base)
        return None

    def __contains__(self, cls: object) -> bool:
        return self._find(cls) is not None

    def __getitem__(self, cls: Any) -> tuple[Any, str]:
        found = self._find(cls)
        if found is None:
            raise KeyError(cls)
        return found  # type: ignore[no-any-return]


def _plugin_index() -> dict[type, tuple[Any, str]]:
    """Registered config class → (registry, name)."""
    out = _Plugins()
    for reg in _registries():
        for name in reg.names():
            out[reg.get(name)] = (reg, name)
    return out


def _is_model(t: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(t, type) and issubclass(t, BaseModel)


def _strip_annotated(t: Any) -> Any:
    while typing.get_origin(t) is typing.Annotated:
        t = typing.get_args(t)[0]
    return t


def _models_in(t: Any) -> list[type]:
    t = _strip_annotated(t)
    if _is_model(t):
        return [t]
    out: list[type] = []
    for a in typing.get_args(t):
        out += _models_in(a)
    return out


def _constraints(metadata: list[Any]) -> str:
    ops = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥", "max_length": "length ≤"}
    parts = []
    for m in metadata:
        for attr, op in ops.items():
            v = getattr(m, attr, None)
            if v is not None and type(m).__name__.lower().startswith(("gt", "ge", "lt", "le", "min", "max", "interval")):
                parts.append(f"{op} {v:g}" if isinstance(v, (int, float)) else f"{op} {v}")
    return ", ".join(dict.fromkeys(parts))


def type_text(t: Any, plugins: dict[type, tuple[Any, str]]) -> str:
    """A readable type: Literal values, plug-in names, constraints of annotated numbers."""
    if t is type(None):
        return "null"
    origin = typing.get_origin(t)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(t)
        inner = type_text(base, plugins)
        cons = _constraints(meta)
        return f"{inner} ({cons})" if cons else inner
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(t))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(t)
        models = [a for a in (_strip_annotated(x) for x in args) if _is_model(a)]
        if models and all(m in plugins for m in models):
            reg = plugins[models[0]][0]
            rest = [type_text(a, plugins) for a in args if not _is_model(_strip_annotated(a))]
            return " \\| ".join([f"{reg.kind} (by name)", *rest])
        return " \\| ".join(type_text(a, plugins) for a in args)
    if origin in (list, tuple, dict, set):
        args = ", ".join(type_text(a, plugins) for a in typing.get_args(t) if a is not Ellipsis)
        return f"{origin.__name__}[{args}]" if args else origin.__name__
    if _is_model(t):
        if t in plugins:
            return f"{plugins[t][0].kind} (by name)"
        return "mapping"
    return getattr(t, "__name__", str(t))


def default_text(f: Any, plugins: dict[type, tuple[Any, str]]) -> str:
    from pydantic_core import PydanticUndefined

    if f.default_factory is not None:
        value = f.default_factory()
    elif f.default is PydanticUndefined:
        return "required"
    else:
        value = f.default
    if _is_model(type(value)):
        value = value.model_dump(mode="json")
    try:
        text = json.dumps(value, ensure_ascii=False)
    except TypeError:
        text = str(value)
    return f"`{text}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|") if "\\|" not in str(text) else " ".join(str(text).split())


def _is_section(f: Any) -> bool:
    return _is_model(_strip_annotated(f.annotation))


def _registry_keys() -> set[str]:
    return {r.key for r in _registries()}


def _event_kinds() -> set[str]:
    from hierfl.dynamics.events import EVENTS

    return set(EVENTS.names())


def key_rows(model: type, prefix: str, plugins: dict[type, tuple[Any, str]], skip: set[str] = frozenset()
             ) -> list[tuple[str, str, str, str]]:
    """(key path, type, default, description) of every key of ``model``, through nested sections."""
    rows = []
    for name, f in model.model_fields.items():
        if name in skip:
            continue
        path = f"{prefix}{name}"
        sub = _strip_annotated(f.annotation)
        if _is_section(f) and sub not in plugins:
            rows.append((path, "section", default_text(f, plugins) if not f.is_required() else "required",
                         f.description or _first_line(sub.__doc__)))
            rows += key_rows(sub, f"{path}.", plugins)
        else:
            cons = _constraints(f.metadata)
            typ = type_text(f.annotation, plugins) + (f" ({cons})" if cons else "")
            rows.append((path, typ, default_text(f, plugins), f.description or ""))
    return rows


def _first_line(doc: str | None) -> str:
    return _md((doc or "").strip().split("\n\n")[0])


def undocumented() -> list[str]:
    """Scenario keys and plug-ins with no description (each ``where: what``); empty when all are."""
    from hierfl.scenario.schema import Scenario

    problems: list[str] = []
    keys = _registry_keys()
    events = _event_kinds()
    seen: set[type] = set()
    plugins = _plugin_index()

    def walk(model: type, where: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, f in model.model_fields.items():
            sub = _strip_annotated(f.annotation)
            section = _is_model(sub)
            if (name in keys and model in plugins) or (name in events and model.__name__ == "EventConfig"):
                pass  # a plug-in's name, or an event kind: described by the plug-in's docstring
            elif section and (sub.__doc__ or "").strip():
                pass  # a section: described by its model's docstring
            elif not (f.description or "").strip():
                problems.append(f"{where}.{name}: no Field(description=...)")
            for m in _models_in(f.annotation):
                walk(m, f"{m.__module__}.{m.__qualname__}")

    walk(Scenario, "Scenario")
    for reg in _registries():
        for name in reg.names():
            cls = reg.get(name)
            if not (cls.__doc__ or "").strip() or cls.__doc__ == _base_doc(cls):
                problems.append(f"{reg.kind} {name!r} ({cls.__module__}.{cls.__qualname__}): no docstring")
            walk(cls, f"{reg.kind} {name!r}")
    return problems


def _base_doc(cls: type) -> str | None:
    for base in cls.__mro__[1:]:
        if base.__doc__:
            return base.__doc__
    return None


# --------------------------------------------------------------------------------------------- text

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|obj|exc|ref|doc):`~?([^`]+)`")


def _md(text: str) -> str:
    """A reST-flavoured docstring as Markdown: roles and ``literals`` as code, underlined headings bold."""
    text = _ROLE.sub(lambda m: f"`{m.group(1).split('.')[-1] if '<' not in m.group(1) else m.group(1)}`", text)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    lines = text.split("\n")
    out: list[str] = []
    for i, line in enumerate(lines):
        if re.fullmatch(r"\s*[-=~^]{3,}\s*", line) and out and out[-1].strip():
            out[-1] = f"**{out[-1].strip()}**"
            continue
        out.append(line)
    text = "\n".join(out)
    text = re.sub(r"::\n", ":\n", text)
    return text


def _dedent_doc(doc: str | None) -> str:
    import inspect

    return _md(inspect.cleandoc(doc or ""))


def _table(rows: list[tuple[str, ...]], head: tuple[str, ...]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def scenario_page() -> str:
    """``reference/generated/scenario.md``: every scenario key, by section."""
    from hierfl.scenario.schema import Scenario

    plugins = _plugin_index()
    parts = ["# Scenario keys", "",
             "Generated from the scenario's pydantic models (`hierfl/scenario/schema.py` and the plug-ins' "
             "config models). A key whose type is a plug-in kind takes a registered name, as a string or as a "
             "mapping `{name: …, <its keys>}`; the plug-in's own keys are on its page under "
             "{doc}`Plug-ins </reference/generated/plugins/index>`. Unknown keys are errors.", ""]
    top = Scenario.model_fields
    simple = [(n, f) for n, f in top.items() if not _is_section(f) or _strip_annotated(f.annotation) in plugins]
    rows = [r for r in key_rows(Scenario, "", plugins) if r[0] in dict(simple)]
    parts += ["## Top level", "", _table(rows, ("key", "type", "default", "description")), ""]
    for name, f in top.items():
        sub = _strip_annotated(f.annotation)
        if not _is_section(f) or sub in plugins:
            continue
        parts += [f"## `{name}`", "", _first_line(sub.__doc__), "",
                  _table(key_rows(sub, f"{name}.", plugins, skip=_event_kinds() if name == "events" else set()),
                         ("key", "type", "default", "description")), ""]
    for name, f in top.items():  # lists of entries (events:)
        t = _strip_annotated(f.annotation)
        if typing.get_origin(t) is list and _models_in(t) and not any(m in plugins for m in _models_in(t)):
            entry = _models_in(t)[0]
            kinds = ", ".join(f"{{ref}}`{k} <event-kind-{_slug(k)}>`" for k in sorted(_event_kinds()))
            parts += [f"## `{name}`", "", f.description or _first_line(entry.__doc__), "",
                      f"Each entry has the keys below and exactly one event kind as a key: {kinds}.", "",
                      _table(key_rows(entry, f"{name}[].", plugins, skip=_event_kinds()),
                             ("key", "type", "default", "description")), ""]
    return "\n".join(parts)


def plugin_page(reg: Any) -> str:
    """One page per plug-in kind: a section per registered name."""
    plugins = _plugin_index()
    mods: dict[str, int] = {}
    for name in reg.names():
        mods[reg.get(name).__module__] = mods.get(reg.get(name).__module__, 0) + 1
    title = reg.kind[0].upper() + reg.kind[1:]
    parts = [f"# {title}s" if not title.endswith("s") else f"# {title}", "",
             f"Registered names: {', '.join(f'`{n}`' for n in reg.names())}. In YAML each is given by its "
             f"`{reg.key}`" + (" (the event's key in an `events:` entry)." if reg.kind == "event kind" else "."), ""]
    for name in reg.names():
        cls = reg.get(name)
        parts += [f"({_slug(reg.kind)}-{_slug(name)})=", f"## `{name}`", "", _dedent_doc(cls.__doc__), ""]
        module = sys.modules.get(cls.__module__)
        if module is not None and module.__doc__ and mods[cls.__module__] == 1:
            parts += ["```{admonition} About this plug-in", ":class: note", "", _dedent_doc(module.__doc__),
                      "```", ""]
        rows = key_rows(cls, "", plugins, skip={reg.key})
        if rows:
            parts += [_table(rows, ("key", "type", "default", "description")), ""]
        else:
            parts += ["No keys.", ""]
        points = getattr(cls, "aggregation_points", None)
        if points:
            parts += _points_section(points)
        parts += _read_with_section(getattr(cls, "read_only_with", {}))
        parts += [f"Defined in `{cls.__module__}.{cls.__qualname__}`.", ""]
    return "\n".join(parts)


def _read_with_section(rules: Any) -> list[str]:
    """A plug-in's keys read only under another key's values (``read_only_with``): set otherwise, refused or
    warned about."""
    if not rules:
        return []
    rows = [(f"`{key}`", f"`{rule.sibling}`: " + ", ".join(f"`{str(v).lower() if isinstance(v, bool) else v}`"
                                                            for v in rule.values),
             "warning" if rule.warn else "refused (exit 2)") for key, rule in rules.items()]
    return ["Keys read only with another key's value (set to anything but their default otherwise, they "
            "would be ignored):", "", _table(rows, ("key", "read only with", "otherwise")), ""]


def _points_section(points: Any) -> list[str]:
    """A protocol's declared aggregation points and the straggler policies each accepts (with
    ``partial: true`` where a policy has that key), from the declarations and the policies' refusals."""
    from hierfl.policies.straggler import STRAGGLERS

    rows = []
    for p in points:
        accepted = []
        for n in STRAGGLERS.names():
            example = STRAGGLERS.example(n)
            variants = [(f"`{n}`", example)]
            if "partial" in type(example).model_fields:
                variants.append((f"`{n}` (partial: {str(not example.partial).lower()})",
                                 example.model_copy(update={"partial": not example.partial})))
            accepted += [label for label, policy in variants if policy.refusal(p) is None]
        kind = ("synchronous" if p.closable else "synchronous, closed by no policy" if p.synchronous
                else "asynchronous")
        rows.append((f"`{p.key}`", p.flow, kind, p.participants, ", ".join(accepted)))
    intro = "Aggregation points (where a `straggler:` policy may stand; see {doc}`/explanation/stragglers`):"
    return [intro, "",
            _table(rows, ("key", "point", "kind", "participants", "straggler policies accepted")), ""]


def plugins_index(regs: list[Any]) -> str:
    parts = ["# Plug-ins", "",
             "Every open set of hierfl is a registry of plug-ins, each a pydantic config model registered "
             "under the name used in YAML (see {doc}`/howto/extend`). These pages are generated from the "
             "registries.", "", "| kind | names |", "|---|---|"]
    for reg in regs:
        parts.append(f"| {{doc}}`{reg.kind} <{_slug(reg.kind)}>` | {', '.join(f'`{n}`' for n in reg.names())} |")
    parts += ["", "```{toctree}", ":hidden:", "", *[_slug(r.kind) for r in regs], "```", ""]
    return "\n".join(parts)


def outputs_page() -> str:
    """``reference/generated/outputs.md``: the output contract."""
    from hierfl.output import contract as c

    def rows(d: dict[str, tuple[str, str, str]]) -> list[tuple[str, ...]]:
        return [(f"`{k}`", t, u, m) for k, (t, u, m) in d.items()]

    head = ("field", "type", "unit", "meaning")
    parts = ["# Output contract", "",
             f"**Contract version {c.CONTRACT_VERSION}** (written as `contract_version` in `summary.json`). "
             "The version changes when a documented field is removed, renamed, or changes meaning or unit; "
             "new fields and events may appear without a change, so readers ignore what they do not know. "
             "Generated from `hierfl/output/contract.py` and the typed records of `hierfl/env/records.py`; "
             "`tests/output/test_output_contract.py` checks real runs against it.", "",
             "Units: `t` and every `*_s` field are **virtual** seconds, except the wall-clock fields "
             + ", ".join(f"`{n}`" for n in sorted(c.WALL_CLOCK_FIELDS)) + " (real seconds, marked wall clock); "
             "`*_ms` milliseconds, `*_mbps` Mbit/s (10⁶ bit/s), `bytes*` bytes, `*_j` joules.", "",
             "## Files of a run directory", "", _table([(f"`{k}`", v) for k, v in c.FILES.items()], ("file", "content")),
             "", "Only in some situations:", "",
             _table([(f"`{k}`", v) for k, v in c.OPTIONAL_FILES.items()], ("file", "content")), "", "## `metrics.jsonl`", "", "Every line starts with:", "", _table(rows(c.LINE_FIELDS), head), "",
             "then the fields of its `event`. Per-update lists longer than `output.list_limit` are written as "
             "`{count, min, max, mean}`. Events marked *open* append protocol-specific fields after the "
             "declared ones.", ""]
    for event, spec in c.metric_events().items():
        flags = [w for w, on in (("open", spec["open"]),) if on]
        parts += [f"### `{event}`" + (f" ({', '.join(flags)})" if flags else ""), "", _md(spec["doc"]), ""]
        if spec["fields"]:
            parts += [_table([(f"`{n}`", t, u, "optional" if n in spec["optional"] else "")
                              for n, (t, u) in spec["fields"].items()], ("field", "type", "unit", "")), ""]
        if event == "eval":
            parts += ["`eval` lines also carry every counter:", "", _table(rows(c.EVAL_EXTRA), head), ""]
    parts += ["## `summary.json`", "", "Top-level keys (the optional ones appear with the feature that "
              "produces them):", "", _table(rows(c.SUMMARY_KEYS), head), "",
              "## `devices.csv`", "", _table(rows(c.DEVICES_COLUMNS), ("column", "type", "unit", "meaning")), "",
              "## `clusters.jsonl`", "", _table(rows(c.CLUSTERS_FIELDS), head), "",
              "## `trace.json`", "", c.FILES["trace.json"] + ".", "",
              "## `config.yaml`", "", c.FILES["config.yaml"] + ".", ""]
    return "\n".join(parts)


TAG_LEGEND = ("```{admonition} Provenance tags\n:class: tip\n\n"
              "**[B]**: a design reading, a plausible interpretation of a secondary description of the method, "
              "unconfirmed. **[D]**: a default chosen here because no source says; always a key you can change. "
              "The full legend, with the other tags ([V], [V3], [K]): {ref}`algorithms-provenance-tags`.\n```\n")
"""The legend put on every generated page where a [B] or [D] tag appears."""

_TAGGED = re.compile(r"\[(?:B|D)\]")


def with_tag_legend(page: str) -> str:
    """``page`` with :data:`TAG_LEGEND` after its title and first paragraph, if a [B] or [D] tag appears."""
    if not _TAGGED.search(page):
        return page
    title, sep, rest = page.partition("\n\n")
    intro, sep2, body = rest.partition("\n\n")
    return f"{title}{sep}{intro}{sep2 or chr(10) * 2}{TAG_LEGEND}\n{body}"
_API_GROUPS = (
    ("Registries", lambda obj: type(obj).__name__ == "Registry" or obj is _server_tasks()),
    ("Base classes and values", lambda obj: isinstance(obj, type)),
    ("Functions and constants", lambda obj: True),
)


def _server_tasks() -> Any:
    from hierfl.learn import server_tasks

    server_tasks.discover()  # the shipped tasks register when their modules are imported
    return server_tasks.SERVER_TASKS


def plugin_api_page() -> str:
    """``plugin-api.md``: every public name of :mod:`hierfl.plugin`, where it is defined and what it is."""
    import importlib

    import hierfl.plugin as api

    lines = ["# Plug-in API: `hierfl.plugin`", "",
             f"API version **{api.API_VERSION}** (`hierfl.plugin.API_VERSION`). Generated from "
             "`hierfl/plugin/__init__.py`: each name, the module that defines it and its docstring's first line. "
             "A plug-in imports only from here; the {doc}`how-to <../../howto/extend>` and the "
             "{doc}`tutorial <../../tutorials/own-method>` show complete ones.", "",
             "```{eval-rst}", ".. automodule:: hierfl.plugin", "```", ""]
    names = [n for n in api.__all__ if n != "API_VERSION"]
    done: set[str] = set()
    for title, keep in _API_GROUPS:
        rows = []
        for name in names:
            if name in done:
                continue
            obj = getattr(api, name)
            if not keep(obj):
                continue
            done.add(name)
            module = api._EXPORTS[name]
            if type(obj).__name__ == "Registry":
                what = f"the {obj.kind} registry: {', '.join(f'`{n}`' for n in obj.names())}"
            elif obj is _server_tasks():
                what = f"the server tasks (name → function; register with `server_task`): {', '.join(f'`{n}`' for n in sorted(obj))}"
            elif isinstance(obj, dict):
                what = f"a mapping: {', '.join(f'`{n}`' for n in sorted(obj))}"
            else:
                what = _first_line(getattr(obj, "__doc__", None)) if not isinstance(obj, str) else f"`{obj!r}`"
            rows.append((f"`{name}`", f"`{module}`", _cell(what)))
        lines += [f"## {title}", "", _table(rows, ("name", "defined in", "what it is")), ""]
    importlib.import_module("hierfl.plugin.testing")
    lines += ["## Loading and checking plug-ins", "", "```{eval-rst}",
              ".. autofunction:: hierfl.config.plugins.load_plugins",
              ".. autofunction:: hierfl.config.plugins.load_entry_points",
              ".. autoclass:: hierfl.config.plugins.PluginRef",
              "   :members: describe",
              ".. autofunction:: hierfl.plugin.testing.check_plugin",
              ".. autoclass:: hierfl.plugin.testing.CheckReport",
              "   :members: passed, table",
              "```", ""]
    return "\n".join(lines)


def generate(out: Path = OUT) -> list[Path]:
    """Write every generated page (a file is rewritten only when its text changed)."""
    regs = sorted(_registries(), key=lambda r: r.kind)
    pages = {"scenario.md": scenario_page(), "outputs.md": outputs_page(), "plugins/index.md": plugins_index(regs),
             "plugin-api.md": plugin_api_page()}
    for reg in regs:
        pages[f"plugins/{_slug(reg.kind)}.md"] = plugin_page(reg)
    pages = {rel: with_tag_legend(text) for rel, text in pages.items()}
    written = []
    for rel, text in pages.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def setup(app: Any) -> dict[str, Any]:
    """Sphinx entry point: generate the pages when the builder starts."""
    app.connect("builder-inited", lambda app: generate())
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
