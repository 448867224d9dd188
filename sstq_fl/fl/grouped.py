"""Per-client gradients of a round in one forward and one backward pass ("grouped" gradients).

A round's ``C`` clients each take the gradient of their own mean batch loss.  For a layer
``y = f(a; w)`` whose parameter gradient is a sum over records of a product of the layer's input
``a`` and the gradient of its output ``g = ∂L/∂y`` (Linear, convolutions, embeddings, layer and
group normalisation), the gradient of client ``c`` is that sum over client ``c``'s records alone:
``∇_W L_c = Σ_{b ∈ c} g_b ⊗ a_b`` for a Linear layer.  So one forward over all ``C·B`` records,
one backward of ``Σ_c L_c`` down to the layers' outputs (the clients' losses share no record, so
``∂(Σ_c L_c)/∂y_b = ∂L_c/∂y_b`` for ``b ∈ c``), and one batched product per layer give every
client's gradient without materialising a per-record gradient: Goodfellow's per-example
gradient trick (arXiv:1510.01799) and Opacus's grad samplers (Yousefpour et al., arXiv:2109.12298,
§3), summed per client instead of per record.

It holds when the model treats records independently (no batch statistics, no mixing across the
batch dimension) and every parameter sits in a layer of a supported type.
:func:`grouped_reason` names the first obstacle; :class:`~sstq_fl.fl.module_task.ModuleTask`
also checks the grouped gradients against ``vmap`` on a small batch before it uses them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GROUPED_LAYERS", "clients_outer", "grouped_reason", "layer_grads", "per_client_loss"]


def clients_outer(a: torch.Tensor, g: torch.Tensor, clients: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """``Σ_b a_bᵀ g_b`` over each client's rows: ``a`` ``[C·R, m]``, ``g`` ``[C·R, k]`` → ``[C, m, k]`` (into
    ``out``, which may be a strided view, when given)."""
    return torch.bmm(a.reshape(clients, -1, a.shape[-1]).transpose(1, 2), g.reshape(clients, -1, g.shape[-1]),
                     out=out)


def _client_sum(t: torch.Tensor, clients: int, keep: int) -> torch.Tensor:
    """``t`` (``[C·B, …]``) summed over each client's records and every axis but ``keep`` → ``[C, t.shape[keep]]``."""
    t = t.reshape(clients, -1, *t.shape[1:])
    axes = [i for i in range(1, t.dim()) if i != keep + 1]
    return t.sum(dim=axes)


def _linear(m: nn.Linear, a: torch.Tensor, g: torch.Tensor, clients: int) -> dict[str, torch.Tensor]:
    out = {"weight": clients_outer(g.reshape(-1, g.shape[-1]), a.reshape(-1, a.shape[-1]), clients)}
    if m.bias is not None:
        out["bias"] = _client_sum(g.reshape(-1, g.shape[-1]), clients, 1)
    return out


def _conv(m: nn.Conv1d | nn.Conv2d, a: torch.Tensor, g: torch.Tensor, clients: int) -> dict[str, torch.Tensor]:
    """The convolution's weight gradient from the unfolded input (``im2col``): ``Σ_{b,l} g_{b,:,l} ⊗ A_{b,:,l}``."""
    if isinstance(m, nn.Conv1d):  # as a 2-D convolution of height 1
        a, g = a.unsqueeze(2), g.unsqueeze(2)
        kernel, dilation, stride = (1, *m.kernel_size), (1, *m.dilation), (1, *m.stride)
        padding: Any = (0, *m.padding)
    else:
        kernel, dilation, stride = m.kernel_size, m.dilation, m.stride
        padding = m.padding  # a tuple: string padding is refused (_conv_refuse)
    cols = F.unfold(a, kernel, dilation=dilation, padding=padding, stride=stride)  # [C·B, in·k, L]
    gl = g.reshape(clients, -1, g.shape[1], cols.shape[-1])  # [C, B, out, L]
    w = torch.einsum("cbol,cbil->coi", gl, cols.reshape(clients, -1, *cols.shape[1:]))
    out = {"weight": w.reshape(clients, *m.weight.shape)}
    if m.bias is not None:
        out["bias"] = _client_sum(g, clients, 1)
    return out


def _embedding(m: nn.Embedding, a: torch.Tensor, g: torch.Tensor, clients: int) -> dict[str, torch.Tensor]:
    """Each client's rows of ``g`` added into its own ``[V, dim]`` table at the looked-up indices."""
    per = a.reshape(clients, -1)
    flat = (per + torch.arange(clients, device=a.device)[:, None] * m.num_embeddings).reshape(-1)
    w = torch.zeros(clients * m.num_embeddings, m.embedding_dim, dtype=g.dtype, device=g.device)
    w.index_add_(0, flat, g.reshape(-1, m.embedding_dim))
    w = w.reshape(clients, m.num_embeddings, m.embedding_dim)
    if m.padding_idx is not None:
        w[:, m.padding_idx] = 0.0
    return {"weight": w}


def _layer_norm(m: nn.LayerNorm, a: torch.Tensor, g: torch.Tensor, clients: int) -> dict[str, torch.Tensor]:
    xhat = F.layer_norm(a, m.normalized_shape, eps=m.eps)
    shape = (clients, -1, *m.normalized_shape)
    out = {"weight": (g * xhat).reshape(shape).sum(1)} if m.weight is not None else {}
    if m.bias is not None:
        out["bias"] = g.reshape(shape).sum(1)
    return out


def _group_norm(m: nn.GroupNorm, a: torch.Tensor, g: torch.Tensor, clients: int) -> dict[str, torch.Tensor]:
    xhat = F.group_norm(a, m.num_groups, eps=m.eps)
    out = {"weight": _client_sum(g * xhat, clients, 1)} if m.weight is not None else {}
    if m.bias is not None:
        out["bias"] = _client_sum(g, clients, 1)
    return out


Rule = Callable[..., dict[str, torch.Tensor]]


@dataclass(frozen=True)
class LayerRule:
    """How one layer type's per-client parameter gradients follow from its input and output gradient,
    and which configurations of it the rule covers (``refuse``: why not, or ``None``)."""

    grads: Rule
    refuse: Callable[[nn.Module], str | None] = lambda m: None


def _conv_refuse(m: nn.Module) -> str | None:
    assert isinstance(m, nn.Conv1d | nn.Conv2d)
    if m.groups != 1:
        return "a grouped convolution"
    if m.padding_mode != "zeros" or isinstance(m.padding, str):
        return f"padding {m.padding!r} / {m.padding_mode}"
    return None


def _embedding_refuse(m: nn.Module) -> str | None:
    assert isinstance(m, nn.Embedding)
    if m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
        return "an embedding with max_norm, scale_grad_by_freq or sparse gradients"
    return None


GROUPED_LAYERS: dict[type[nn.Module], LayerRule] = {
    nn.Linear: LayerRule(_linear),
    nn.Conv1d: LayerRule(_conv, _conv_refuse),
    nn.Conv2d: LayerRule(_conv, _conv_refuse),
    nn.Embedding: LayerRule(_embedding, _embedding_refuse),
    nn.LayerNorm: LayerRule(_layer_norm),
    nn.GroupNorm: LayerRule(_group_norm),
}
"""The layer types with a grouped gradient rule (exact types: a subclass may change the forward)."""


def grouped_reason(module: nn.Module) -> str | None:
    """Why ``module``'s per-client gradients cannot be grouped (the first parameter outside a supported
    layer, or an unsupported configuration of one), or ``None``."""
    for name, m in module.named_modules():
        own = list(m.named_parameters(recurse=False))
        if not own:
            continue
        rule = GROUPED_LAYERS.get(type(m))
        if rule is None:
            return f"{type(m).__name__} at {name!r} has parameters and no grouped gradient rule"
        why = rule.refuse(m)
        if why is not None:
            return f"{type(m).__name__} at {name!r} is {why}"
    return None


def layer_grads(module: nn.Module, a: torch.Tensor, g: torch.Tensor, clients: int) -> dict[str, torch.Tensor]:
    """Per-client gradients ``{parameter name: [C, *shape]}`` of one supported layer from its input ``a`` and
    output gradient ``g`` over all ``C·B`` records."""
    return GROUPED_LAYERS[type(module)].grads(module, a, g, clients)


def per_client_loss(loss_of: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], out: torch.Tensor,
                    y: torch.Tensor, clients: int) -> torch.Tensor:
    """``Σ_c loss_of(out_c, y_c)`` over the clients' record blocks (``vmap`` over clients, else a loop)."""
    oc, yc = out.reshape(clients, -1, *out.shape[1:]), y.reshape(clients, -1, *y.shape[1:])
    try:
        return torch.func.vmap(loss_of)(oc, yc).sum()
    except Exception:  # noqa: BLE001  (a user's loss vmap cannot batch: one call per client)
        return torch.stack([loss_of(o, t) for o, t in zip(oc, yc, strict=True)]).sum()
