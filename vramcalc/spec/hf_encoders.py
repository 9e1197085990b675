"""Encoder and encoder-decoder families of transformers configs: BERT, RoBERTa, XLM-RoBERTa, DistilBERT,
DeBERTa-v2/v3, T5 (T5 v1.1, Flan-T5) and ViT, with their heads from ``architectures``.
"""

from __future__ import annotations

from vramcalc.spec.hf_heads import encoder_head, head_kind
from vramcalc.spec.hf_reader import Imported, Model, Reader
from vramcalc.units import quoted


def _bert_body(r: Reader) -> Model:
    return {
        "architecture": "encoder",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": r.need("num_attention_heads"),
        "ffn_size": r.need("intermediate_size"),
        "mlp": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", True),
        "bias": True,
    }


def _untied_mlm_bias(model: Model) -> Model:
    """An untied masked-LM head keeps two vocabulary-wide biases: the decoder's and the prediction head's
    own ``bias`` (``BertLMPredictionHead``, ``RobertaLMHead``, ``LegacyDebertaV2LMPredictionHead``), which
    ``_tied_weights_keys`` makes one tensor only when the decoder is tied to the embeddings. The second is
    counted as ``lm_head_bias``."""
    untied = model["head"] in ("lm", "pretraining") and not model["tie_embeddings"]
    return model | ({"lm_head_bias": True} if untied else {})


def bert(r: Reader) -> Imported:
    """BERT and RoBERTa (same tensors; RoBERTa's classification head is dense + out_proj, counted as
    the pooler plus the classifier)."""
    model = {
        **_bert_body(r),
        "max_position_embeddings": r.count("max_position_embeddings", default=512),
        "type_vocab_size": r.count("type_vocab_size", default=2, minimum=0),
        **encoder_head(r, head_kind(r, "mlm"), bare_pooler=True),
    }
    return _untied_mlm_bias(model), []


def distilbert(r: Reader) -> Imported:
    """DistilBERT: BERT's blocks and embedding LayerNorm without token types; no pooler in the bare
    ``DistilBertModel``; ``pre_classifier`` + ``classifier`` count as a pooler plus the classifier and the
    masked-LM head (vocab_transform, vocab_layer_norm, vocab_projector) as BERT's."""
    kind = head_kind(r, "mlm")
    if kind == "question_answering" and r.label_count() != 2:  # DistilBertForQuestionAnswering raises
        raise r.fail("num_labels", f"{r.label_count()}: DistilBertForQuestionAnswering takes 2 (start and end)")
    activation = r.text("activation", "gelu")
    if activation not in ("gelu", "relu"):
        raise r.fail("activation", f"{quoted(activation)} is not supported (gelu, relu)")
    notes: list[str] = []
    if r.flag("sinusoidal_pos_embds", False):
        notes.append("sinusoidal_pos_embds: the position table is a frozen parameter (counted as trainable)")
    model = {
        "architecture": "encoder",
        "layers": r.need("n_layers", "num_hidden_layers"),
        "hidden_size": r.need("dim", "hidden_size"),
        "heads": r.need("n_heads", "num_attention_heads"),
        "ffn_size": r.count("hidden_dim", default=4 * 768),  # DistilBertConfig's default, whatever dim is
        "mlp": activation,
        "norm": "layernorm",
        "position": "learned",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": r.flag("tie_word_embeddings", True),
        "bias": True,
        "max_position_embeddings": r.count("max_position_embeddings", default=512),
        "type_vocab_size": 0,
        **encoder_head(r, kind, bare_pooler=False),
    }
    return model, notes


def deberta_v2(r: Reader) -> Imported:
    """DeBERTa-v2/v3. Its relative-position table ``rel_embeddings`` (2 x position_buckets rows, else
    2 x max_relative_positions) is counted with the learned position rows, and the LayerNorm on it
    (``norm_rel_ebd: layer_norm``) as an embedding norm: the same parameters."""
    for name, default in (("conv_kernel_size", 0), ("embedding_size", None)):
        value = r.count(name, default=default, minimum=0)
        if value and (name == "conv_kernel_size" or value != r.need("hidden_size")):
            raise r.fail(name, f"{value} is not modelled (DeBERTa-v2 with an extra convolution or embedding width)")
    model = {**_bert_body(r), "type_vocab_size": r.count("type_vocab_size", default=0, minimum=0)}
    head_size = r.count("attention_head_size", default=None)
    if head_size is not None and head_size * model["heads"] != model["hidden_size"]:
        raise r.fail("attention_head_size", f"{head_size} x heads != hidden_size is not modelled")
    rows = (r.count("max_position_embeddings", default=512) or 512) if r.flag("position_biased_input", True) else 0
    notes: list[str] = []
    raw_types = r.config.get("pos_att_type")  # DebertaV2Config also takes "p2c|c2p"
    types = (
        {x.strip() for x in raw_types.lower().split("|")}
        if isinstance(raw_types, str)
        else set(r.names("pos_att_type"))
    )
    if r.flag("relative_attention", False):
        if not r.flag("share_att_key", False) and types & {"c2p", "p2c"}:
            raise r.fail("share_att_key", "false is not modelled (separate position key/query projections)")
        buckets = r.count("position_buckets", default=-1, minimum=-1) or -1
        span = buckets if buckets > 0 else r.count("max_relative_positions", default=-1, minimum=-1) or -1
        span = span if span > 0 else r.count("max_position_embeddings", default=512) or 512
        rows += 2 * span
        if "layer_norm" in r.text("norm_rel_ebd", "none"):
            model["embedding_norm"] = True
        terms = len(types & {"c2p", "p2c"})
        if terms:
            model |= {"relative_attention_span": span, "relative_attention_terms": terms}
        notes.append(f"deberta: rel_embeddings ({2 * span} rows) as position rows; seq_len <= {rows}")
    if not rows:
        raise r.fail("position_biased_input", "false without relative_attention: no positions to count")
    model["max_position_embeddings"] = rows
    kind = head_kind(r, "none")
    pooled = kind in ("classification", "multiple_choice")
    if pooled and r.count("pooler_hidden_size", default=None) not in (None, model["hidden_size"]):
        raise r.fail("pooler_hidden_size", "a pooler wider or narrower than hidden_size is not modelled")
    model = {**model, **encoder_head(r, kind, bare_pooler=False)}
    if not r.flag("legacy", True):  # DebertaV2LMPredictionHead: no decoder, the embedding's weight and a bias
        return model | ({"tie_embeddings": True} if model["head"] == "lm" else {}), notes
    return _untied_mlm_bias(model), notes


#: T5's MLP kinds by (gated, activation): ``T5DenseGatedActDense`` (wi_0, wi_1, wo) when gated, else
#: ``T5DenseActDense`` (wi, wo), with the activation ``dense_act_fn`` names.
T5_MLPS = {(False, "relu"): "relu", (False, "gelu"): "gelu", (True, "gelu_new"): "geglu", (True, "gelu"): "geglu"}
T5_MLPS[True, "silu"] = "swiglu"


def _t5_mlp(r: Reader) -> str:
    """T5's MLP kind. ``T5Config`` derives ``is_gated_act`` and ``dense_act_fn`` from ``feed_forward_proj``
    ("gated-gelu": gated, gelu_new), but a config that states them keeps them, and the model builds what they
    say (configuration_t5.py ``__post_init__``; modeling_t5.py ``T5LayerFF``)."""
    ff = r.text("feed_forward_proj", "relu")
    parts = ff.split("-")
    if len(parts) > 2 or (len(parts) == 2 and parts[0] != "gated"):
        raise r.fail("feed_forward_proj", f"{quoted(ff)} is not supported (relu, gelu, gated-gelu, gated-silu)")
    gated = r.flag("is_gated_act", len(parts) == 2)
    act = r.text("dense_act_fn", "gelu_new" if ff == "gated-gelu" else parts[-1])
    if (gated, act) not in T5_MLPS:
        said = f"is_gated_act {str(gated).lower()} with dense_act_fn {quoted(act)}"
        supported = "relu, gelu, gated-gelu, gated-silu"
        raise r.fail("feed_forward_proj", f"{quoted(ff)} ({said}) is not supported ({supported})")
    return T5_MLPS[gated, act]


def t5(r: Reader) -> Imported:
    """T5, T5 v1.1 and Flan-T5 (``gated-gelu``: a GeGLU MLP). ``tie_word_embeddings: false`` (T5 v1.1 and
    Flan-T5 on the Hub) keeps a separate LM head, as transformers 4 builds it and as the checkpoints store
    it (flan-t5-small: 77M parameters on its model card). transformers 5 ties it whatever the config says;
    the note gives the count that makes."""
    mlp = _t5_mlp(r)
    tied = r.flag("tie_word_embeddings", True)
    notes: list[str] = []
    if not tied:
        notes.append(
            "tie_word_embeddings false: a separate LM head (vocab x d_model) is counted, as transformers 4 "
            "builds it and the checkpoint stores it; transformers 5 ties it, and counts that many fewer"
        )
    layers = r.need("num_layers")
    kind = head_kind(r, "lm")
    model: Model = {
        "layers": layers,
        "hidden_size": r.need("d_model"),
        "heads": r.need("num_heads"),
        "head_dim": r.need("d_kv"),
        "ffn_size": r.need("d_ff"),
        "mlp": mlp,
        "norm": "rmsnorm",
        "position": "relative",
        "vocab_size": r.need("vocab_size"),
        "tie_embeddings": tied,
        "bias": False,
        # T5Config's dropout_rate (default 0.1; T5, T5 v1.1, Flan-T5, mT5 and T0 all ship 0.1): residual,
        # attention-probability and inner-MLP dropout (modeling_t5.py: T5DenseGatedActDense.dropout)
        "dropout": r.fraction("dropout_rate", 0.1),
        "relative_attention_buckets": r.count("relative_attention_num_buckets", default=32),
    }
    if kind == "encoder":  # T5EncoderModel: the shared embedding and the encoder stack
        if r.flag("is_decoder", False):  # T5Stack builds a cross-attention block per layer (T5Block)
            raise r.fail("is_decoder", "true is not modelled with T5EncoderModel (cross-attention in the encoder)")
        return {"architecture": "encoder", **model, "type_vocab_size": 0, "head": "none", "pooler": False}, notes
    if kind not in ("lm", "none"):
        raise r.fail("architectures", f"{quoted(r.architectures())}: T5 heads other than the LM are not modelled")
    decoder_layers = r.count("num_decoder_layers", default=layers)
    return {"architecture": "encoder-decoder", **model, "decoder_layers": decoder_layers, "head": kind}, notes


def vit(r: Reader) -> Imported:
    """ViT: ``ViTForImageClassification`` (classifier, no pooler) or the bare ``ViTModel`` (pooler)."""
    kind = head_kind(r, "classification")
    if kind not in ("classification", "none"):
        raise r.fail("architectures", f"{quoted(r.architectures())}: only image classification and ViTModel")
    if not r.flag("qkv_bias", True):
        raise r.fail("qkv_bias", "false is not modelled (ViT without q/k/v biases)")
    model: Model = {
        "architecture": "vit",
        "layers": r.need("num_hidden_layers"),
        "hidden_size": r.need("hidden_size"),
        "heads": r.need("num_attention_heads"),
        "ffn_size": r.need("intermediate_size"),
        "patch_size": r.count("patch_size", default=16),
    }
    if kind == "none":  # ViTModel's pooler: hidden_size -> pooler_output_size (default hidden_size)
        if r.count("pooler_output_size", default=model["hidden_size"]) != model["hidden_size"]:
            raise r.fail("pooler_output_size", "a pooler wider or narrower than hidden_size is not modelled")
        return {**model, "head": "none", "pooler": True}, []
    return {**model, "num_labels": r.label_count()}, []
