"""The front end: capture a model's computation with ``torch.export`` and map it onto the rules.

``torch.export.export(..., strict=False)`` traces the model's own Python code (Hugging Face models,
nanoGPT-style modules, torch's encoder) down to ATen operations with the parameters as graph
inputs. Why export and not ``torch.fx.symbolic_trace``: export runs the code on real shapes, so
data-dependent Python (Hugging Face's mask builders, ``if`` on shapes) traces, and every operation
arrives as one ATen overload with its recorded shapes, which is what the rule table is keyed by.

What depends on no selected parameter (mask and position builders, embeddings of unselected
weights, everything before the first selected weight) is evaluated once by torch as a constant; only
the operations on the way from a selected parameter to the loss need rules. An operation there
without one is refused, with its name, module and source line, before any sweep. Torch's attribute
names are read here and nowhere else in the engine.
"""

from __future__ import annotations

import dataclasses
import operator
import re
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.fx import Node
from torch.utils import _pytree as pytree

from . import ops  # noqa: F401  (fills the rule table)
from .checks import call_leaves, check_integer_inputs, check_ranges, check_weights
from .contract import ITEMS, RULES, Op
from .custom import ForwardFailed, mark_of
from .custom import check_choice as check_custom_choice
from .decompose import inline_decompositions
from .inplace import out_of_place
from .inputs import model_inputs
from .ops.losses import causal_lm, cross_entropy, mse_loss
from .params import parameter_names, select
from .precision import capture_mode
from .wrap import Wrapped, distinct, export

aten = torch.ops.aten

#: the losses by name
LOSSES = {"mse": mse_loss, "cross_entropy": cross_entropy, "causal_lm": causal_lm}

#: operations that only check metadata; skipped on differentiated values (a cast there keeps the
#: Hessian's precision, so a dtype assertion after it would not hold)
_CHECKS = {aten._assert_tensor_metadata.default}
for _name in ("_assert_scalar", "sym_constrain_range_for_size", "_assert_async"):
    _pkt = getattr(aten, _name, None)
    if _pkt is not None:
        _CHECKS.update(getattr(_pkt, o) for o in _pkt.overloads())


class UnsupportedOperation(ValueError):
    """An operation on the way from a selected parameter to the loss has no rule."""


def _where(node: Node) -> str:
    """'module path (type), file:line' of a captured node, as far as export recorded it."""
    parts = []
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, kind = list(stack.values())[-1]
        path = re.sub(r"^L\['self'\]\.?", "", str(path)).removeprefix("model.")
        parts.append(f"module {path or '<model>'} ({getattr(kind, '__name__', kind)})")
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)\n\s*(.*)', trace)
    if frames:
        f, line, fn, code = frames[-1]
        parts.append(f"{f}:{line} in {fn}: {code.strip()}")
    return "; ".join(parts) or "source unknown"


@dataclass
class Step:
    """One differentiated operation: its graph node and its rule."""

    node: Node
    op: Op
    #: its position among the steps
    pos: int = 0


@dataclass
class Captured:
    """A captured model with its rules: what the sweeps (:mod:`.sweep`) run."""

    graph: torch.fx.Graph
    #: placeholder -> value (parameters, buffers, constants, user inputs, targets)
    leaves: dict[Node, object]
    #: selected name -> its placeholders (a tied weight has several)
    placeholders: dict[str, list[Node]]
    #: selected names in the order of H's rows and columns, and their shapes
    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    steps: list[Step]
    loss: Node
    #: the nodes that depend on a selected parameter
    live: set[Node] = field(default_factory=set)
    dtype: torch.dtype = torch.float64
    device: torch.device = torch.device("cpu")
    #: the placeholders of the user's inputs and targets, in the order of their pytree leaves, and
    #: the placeholder of the targets of a loss named by string (None for a callable loss)
    user: list[Node] = field(default_factory=list)
    targets: Node | None = None
    #: a name for each of ``user`` in the user's terms (``inputs['input_ids']``, ``targets``)
    user_names: list[str] = field(default_factory=list)
    #: the custom autograd.Functions on the way to the loss whose forward is differentiated
    custom: list[str] = field(default_factory=list)
    #: "float64" (a float64 model's casts to float32 computed in float64) or "model" (as written)
    precision: str = "float64"

    def rebind(self, inputs_leaves: list, targets) -> Captured:
        """The same graph and rules on another batch of the same shapes (the leaves of the user's
        inputs and targets replaced): what a data set's batches share. The rules keep the state of
        the last :class:`.sweep.Run` evaluated (``Run.activate`` restores a run's own)."""
        if len(inputs_leaves) < len(self.user):
            raise ValueError(f"data: a batch has {len(inputs_leaves)} input leaves, the capture {len(self.user)}")
        leaves = dict(self.leaves)
        leaves.update(zip(self.user, inputs_leaves[: len(self.user)], strict=True))
        if self.targets is not None:
            leaves[self.targets] = targets
        out = dataclasses.replace(self, leaves=leaves)
        check_ranges(out)
        return out


def capture(
    model: nn.Module, inputs, targets, *, loss="mse", head=None, params=None, precision="float64",
    custom_functions="refuse",
) -> Captured:  # fmt: skip
    """Export ``model`` on ``inputs`` with its loss and map the operations on the way from the
    selected parameters to the loss onto the rules (:class:`UnsupportedOperation` otherwise).
    ``precision`` (:mod:`.precision`): "float64" computes a float64 model's float32 casts in
    float64, "model" keeps them. ``custom_functions`` (:mod:`.custom`): "refuse" a custom
    ``autograd.Function`` on the way to the loss, or differentiate its "forward"."""
    check_custom_choice(custom_functions)
    named_loss, loss_fn = _loss_of(model, loss, head)
    named = parameter_names(model, head)
    names = select(named, params, [n for n, _ in model.named_parameters()])
    check_weights(named, names)
    # one tensor passed twice (``(ids, ids)`` as inputs and targets) would be one placeholder of the
    # capture, and another batch's two tensors could not be told apart: each use gets its own
    args, kwargs, targets = distinct(model_inputs(model, inputs) + (targets,))
    user_names, user_values = call_leaves(args, kwargs, targets, isinstance(inputs, torch.Tensor))
    wrapped = Wrapped(model, head, loss_fn)
    ep, precision = _export_at(wrapped, (args, kwargs, targets), precision, named[names[0]].dtype)
    graph = ep.graph_module.graph
    inline_decompositions(graph)  # torch's losses, einsum, group_norm, weight_norm: operations with rules
    leaves, selected, user_nodes = _leaves(ep, wrapped, named, names, user_values)
    out_node = next(n for n in graph.nodes if n.op == "output")
    out = pytree.tree_leaves(out_node.args)
    if len(out) != 1 or not isinstance(out[0], Node):
        raise RuntimeError("model: the capture returned more than one output")
    result, tnode = _append_loss(graph, named_loss, out[0], targets, leaves)
    unused = [n for n, phs in selected.items() if not phs]
    if unused:
        raise ValueError(f"params: {unused} take no part in the model's computation on these inputs")
    p0 = named[names[0]]
    cap = Captured(
        graph=graph,
        leaves=leaves,
        placeholders=selected,
        names=names,
        shapes={n: tuple(named[n].shape) for n in names},
        steps=[],
        loss=result,
        dtype=p0.dtype,
        device=p0.device,
        user=user_nodes,
        targets=tnode,
        user_names=user_names[: len(user_nodes)],
        precision=precision,
    )
    _check_parameters(named, names, p0)
    _map_rules(cap, custom_functions)
    for fn in cap.custom:
        warnings.warn(
            f"custom_functions='forward': the forward of the autograd.Function {fn} is differentiated, its backward "
            "is not called (HessianOperator.metadata lists it)",
            stacklevel=3,
        )
    check_integer_inputs(cap)
    check_ranges(cap)
    return cap


def _loss_of(model, loss, head) -> tuple:
    """(named loss function or None, callable loss or None), the arguments checked."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected an nn.Module, got {type(model).__name__}")
    if head is not None and not isinstance(head, nn.Module):
        raise TypeError(f"head: expected an nn.Module, got {type(head).__name__}")
    if head is not None and loss != "cross_entropy":
        raise ValueError("head: only used with loss='cross_entropy' (the head on the token mean)")
    if callable(loss) and not isinstance(loss, str):
        return None, loss
    if loss in LOSSES:
        return LOSSES[loss], None
    raise ValueError(f"loss: {loss!r} is not supported ({', '.join(map(repr, LOSSES))} or a callable)")


def _export_at(wrapped, call: tuple, precision: str, dtype):
    """(exported program, the precision it was captured at): float64 throughout where asked and
    possible, else as written with a warning (:mod:`.precision`)."""
    mode = capture_mode(precision, dtype)
    try:
        return export(wrapped, call, mode), precision
    except ForwardFailed:
        raise
    except Exception as err:  # noqa: BLE001 (a model whose code needs float32 where it asks for it)
        if mode is None:
            raise
        warnings.warn(
            f"precision='float64': the model could not be captured computing float64 throughout "
            f"({type(err).__name__}: {str(err).splitlines()[0][:160]}); captured as written, its casts to float32 "
            "kept (HessianOperator.metadata says 'model')",
            stacklevel=3,
        )
        return export(wrapped, call, None), "model"


def _leaves(ep, wrapped, named: dict, names: list[str], user_values: list):
    """(placeholder -> value, selected name -> its placeholders, the user inputs' placeholders)."""
    by_id = {}
    for n, p in named.items():
        by_id.setdefault(id(p), n)
    placeholders = [n for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
    leaves: dict[Node, object] = {}
    user_iter, user_nodes = iter(user_values), []
    selected: dict[str, list[Node]] = {n: [] for n in names}
    for ph, spec in zip(placeholders, ep.graph_signature.input_specs, strict=True):
        kind = spec.kind.name
        if kind == "PARAMETER":
            p = wrapped.get_parameter(spec.target)
            leaves[ph] = p.detach()
            name = by_id.get(id(p))
            if name in selected:
                selected[name].append(ph)
        elif kind == "BUFFER":
            leaves[ph] = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
        elif kind in ("CONSTANT_TENSOR", "CUSTOM_OBJ"):
            leaves[ph] = ep.constants[spec.target]
        elif kind == "USER_INPUT":
            leaves[ph] = next(user_iter)
            user_nodes.append(ph)
        else:
            raise RuntimeError(f"model: captured input of kind {kind} is not supported")
    return leaves, selected, user_nodes


def _append_loss(graph, named_loss, result: Node, targets, leaves: dict) -> tuple[Node, Node | None]:
    """(loss node, targets placeholder): a loss named by string appended to the graph after the
    model's output, its targets a new placeholder; a callable loss was captured with the model."""
    if named_loss is None:
        return result, None
    nodes = list(graph.nodes)
    out_node = next(n for n in nodes if n.op == "output")
    first = next((n for n in nodes if n.op == "placeholder"), out_node)
    with graph.inserting_before(first):
        tnode = graph.placeholder("engine_targets")
    leaves[tnode] = targets
    with graph.inserting_before(out_node):
        return graph.call_function(named_loss, (result, tnode)), tnode


def _check_parameters(named, names, p0) -> None:
    for n in names:
        p = named[n]
        if not p.is_floating_point() or p.dtype != p0.dtype:
            raise ValueError(
                f"params: {n!r} is {p.dtype}; every selected parameter must share one floating dtype ({p0.dtype})"
            )
        if p.device.type == "meta":
            raise ValueError(f"params: {n!r} is on the meta device (it has no values)")
        if p.device != p0.device:
            raise ValueError(f"params: {n!r} is on {p.device}, {names[0]!r} on {p0.device}")


#: floating results with a zero derivative almost everywhere
_STEPS = {aten.sign.default, aten.floor.default, aten.ceil.default, aten.round.default, aten.trunc.default}
#: results that read only their input's shape, dtype and device (constant factories)
_FACTORIES = {
    aten.new_ones.default, aten.new_zeros.default, aten.new_full.default, aten.new_empty.default,
    aten.ones_like.default, aten.zeros_like.default, aten.full_like.default, aten.empty_like.default,
}  # fmt: skip


def _flat(node: Node) -> bool:
    """The node's result does not change under small changes of its inputs (almost everywhere): a
    bool or integer result (a comparison such as ``x > 0``, ``argmax``), a step function, or a
    constant factory (``x.new_ones(shape)``, ``torch.full_like(x, 2.0)``). Like
    autograd, the engine takes it as a constant of the point, so ``where(x > 0, x, 0.01 * x)``
    differentiates as a leaky ReLU."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and not (val.is_floating_point() or val.is_complex()):
        return True
    return node.target in _STEPS or node.target in _FACTORIES


def _map_rules(cap: Captured, custom_functions: str = "refuse") -> None:
    """Mark what depends on a selected parameter and give each such operation its rule."""
    live: set[Node] = {ph for phs in cap.placeholders.values() for ph in phs}
    refused: list[str] = []
    steps: list[Step] = []
    order = {n: i for i, n in enumerate(cap.graph.nodes)}
    for node in cap.graph.nodes:
        if node.op != "call_function" or node in live:
            continue
        if not any(i in live for i in node.all_input_nodes):
            continue
        if _flat(node):
            continue  # no derivative almost everywhere: evaluated once, a constant of the point
        live.add(node)
        fn = mark_of(node)
        if fn is not None and fn not in cap.custom:
            cap.custom.append(fn)
            if custom_functions == "refuse":
                refused.append(
                    f"the autograd.Function {fn} (at {_where(node)}): the engine would differentiate its forward "
                    "and never call its backward; custom_functions='forward' to take the forward's derivatives"
                )
        why = out_of_place(node, order)  # x += y in the model's code: its functional form
        if why is not None:
            refused.append(f"{node.target}: {why} ({_where(node)})")
            continue
        t = node.target
        if t in _CHECKS:
            continue
        if t in ITEMS:
            continue  # its getitem outputs are the steps
        if t is operator.getitem:
            src = node.args[0]
            cls = ITEMS.get(src.target) if isinstance(src, Node) else None
            if cls is None:
                refused.append(f"getitem of {getattr(src, 'target', src)} ({_where(node)})")
                continue
        else:
            cls = RULES.get(t)
            if cls is None:
                refused.append(f"{t} ({_where(node)})")
                continue
        try:
            op = cls(node)
        except NotImplementedError as err:
            refused.append(f"{t}: {err} ({_where(node)})")
            continue
        for idx in op.index_nodes:
            if isinstance(idx, Node) and idx in live:
                refused.append(f"{t}: its index or mask depends on a selected parameter ({_where(node)})")
        steps.append(Step(node, op, len(steps)))
    if refused:
        raise UnsupportedOperation(
            "exact_hessian: no rule for these operations on the way from the selected parameters to the loss "
            "(docs/theory.md lists the supported ones):\n  " + "\n  ".join(refused)
        )
    if cap.loss not in live:
        raise ValueError("params: the loss does not depend on the selected parameters")
    cap.steps, cap.live = steps, live
