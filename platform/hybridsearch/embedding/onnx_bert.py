"""A BERT encoder's configuration and torch weights read off its fp32 ONNX graph (:func:`bert_weights_from_onnx`):
each ``MatMul`` weight is stored ``[in, out]`` and may carry a generic name such as ``onnx::MatMul_1525``, so it is
named after the bias its output is added to, or failing that the node's own name, and transposed into
``nn.Linear``'s ``[out, in]``; heads and layer-norm epsilon are read off the graph's constants."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from hybridsearch.errors import ModelError

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.")


def bert_weights_from_onnx(onnx_path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(BertConfig keyword arguments, BertModel state dict)`` read off a BERT encoder's fp32 ONNX graph (inputs
    ``input_ids``, ``attention_mask``, ``token_type_ids``; output ``last_hidden_state``). Raises ModelError."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:  # an exporter that deduplicates equal tensors names the copies with Identity nodes
        if node.op_type == "Identity" and node.input[0] in inits:
            inits[node.output[0]] = inits[node.input[0]]

    def arr(name: str) -> np.ndarray:
        return np.asarray(numpy_helper.to_array(inits[name]), dtype=np.float32)

    weights: dict[str, np.ndarray] = {}
    for name in inits:
        clean = _param_name(name.split("."))
        if clean is not None and clean.endswith((".weight", ".bias")):
            weights[clean] = arr(name)
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    for node in graph.node:
        if node.op_type not in {"MatMul", "Gemm"}:
            continue
        w = next((i for i in node.input[1:2] if i in inits), None)
        if w is None or len(inits[w].dims) != 2:
            continue
        value = arr(w)
        if node.op_type == "Gemm":
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            target = _linear_name(node, consumers, inits, bias=node.input[2] if len(node.input) > 2 else None)
            weights[target] = value if trans_b else value.T
            if len(node.input) > 2 and node.input[2] in inits:
                weights[target.removesuffix(".weight") + ".bias"] = arr(node.input[2])
        else:
            weights[_linear_name(node, consumers, inits)] = value.T  # MatMul: x @ W with W [in, out]
    for name in [k for k in weights if not k.endswith((".weight", ".bias"))]:
        del weights[name]
    try:
        vocab, hidden = weights["embeddings.word_embeddings.weight"].shape
        positions = weights["embeddings.position_embeddings.weight"].shape[0]
        types = weights["embeddings.token_type_embeddings.weight"].shape[0]
        intermediate = weights["encoder.layer.0.intermediate.dense.bias"].shape[0]
    except KeyError as exc:
        raise ModelError(f"{onnx_path.name} is not a BERT encoder this builder knows: no initializer {exc}") from exc
    layers = 1 + max((int(m.group(1)) for k in weights if (m := _LAYER.match(k))), default=-1)
    config = {"vocab_size": int(vocab), "hidden_size": int(hidden), "num_hidden_layers": layers,
              "num_attention_heads": _heads(graph, int(hidden)), "intermediate_size": int(intermediate),
              "hidden_act": "gelu", "max_position_embeddings": int(positions), "type_vocab_size": int(types),
              "layer_norm_eps": _layer_norm_eps(graph), "pad_token_id": 0}
    return config, weights


def _linear_name(node: Any, consumers: dict[str, list[Any]], inits: dict[str, Any], bias: str | None = None) -> str:
    """The ``nn.Linear`` weight name of a MatMul/Gemm: from the bias initializer added to its output (``X.bias`` →
    ``X.weight``), else from the node's name (``/encoder/layer.0/attention/self/query/MatMul``)."""
    names = [bias] if bias else []
    for c in consumers.get(node.output[0], []):
        if c.op_type == "Add":
            names += [i for i in c.input if i in inits]
    for n in names:
        clean = _param_name(n.split("."))
        if clean is not None and clean.endswith(".bias"):
            return clean.removesuffix(".bias") + ".weight"
    path = _param_name([p for p in node.name.strip("/").split("/")[:-1] if p])
    return f"{path}.weight" if path else f"unnamed:{node.name or node.output[0]}"


def _param_name(parts: list[str]) -> str | None:
    """BertModel's name for a dotted (or ``/``-separated) path, whatever wraps the model (``bert.``, ``0.auto_model.``,
    a wrapper module): the path from its first ``embeddings`` or ``encoder`` component on; None without one."""
    for i, part in enumerate(parts):
        if part in {"embeddings", "encoder"}:
            return ".".join(parts[i:])
    return None


def _consts(graph: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    out = {t.name: numpy_helper.to_array(t) for t in graph.initializer if np.prod(t.dims or [1]) <= 4}
    for n in graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].type == 4:  # TENSOR
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _heads(graph: Any, hidden: int) -> int:
    """Attention heads: from the ``[batch, seq, heads, head_dim]`` shapes the attention reshapes to (heads may be
    -1 there), else from the ``sqrt(head_dim)`` the scores are divided by. Raises ModelError."""
    consts = _consts(graph)
    votes: dict[int, int] = {}
    for n in graph.node:
        if n.op_type == "Concat" and "attention" in n.name and len(n.input) == 4:
            tail = [consts.get(i) for i in n.input[2:]]
            if all(t is not None and t.size == 1 for t in tail):
                a, b = (int(np.asarray(t).reshape(-1)[0]) for t in tail if t is not None)
                if b > 0 and hidden % b == 0 and a in {-1, hidden // b}:
                    votes[hidden // b] = votes.get(hidden // b, 0) + 1
        if n.op_type == "Reshape" and "attention" in n.name and n.input[1] in consts:
            shape = np.asarray(consts[n.input[1]]).reshape(-1)
            if shape.size == 4 and shape[3] > 0 and hidden % int(shape[3]) == 0:
                votes[hidden // int(shape[3])] = votes.get(hidden // int(shape[3]), 0) + 1
    if votes:
        return max(votes, key=lambda h: votes[h])
    for n in graph.node:
        if n.op_type == "Div" and "attention/self" in n.name and n.input[1] in consts:
            head_dim = round(float(np.asarray(consts[n.input[1]]).reshape(-1)[0]) ** 2)
            if head_dim > 0 and hidden % head_dim == 0:
                return hidden // head_dim
    raise ModelError("cannot tell the number of attention heads from the ONNX graph")


def _layer_norm_eps(graph: Any) -> float:
    """The epsilon of the first layer norm (the constant added to the variance), else BERT's 1e-12."""
    consts = _consts(graph)
    for n in graph.node:
        if n.op_type == "LayerNormalization":
            return float(next((a.f for a in n.attribute if a.name == "epsilon"), 1e-12))
        if n.op_type == "Add" and "LayerNorm" in n.name:
            for i in n.input:
                v = consts.get(i)
                if v is not None and v.size == 1 and 0 < float(np.asarray(v).reshape(-1)[0]) < 1e-3:
                    return float(np.asarray(v).reshape(-1)[0])
    return 1e-12
