"""The head a transformers class puts on its model, from the config's ``architectures`` (the class the
checkpoint was saved from, the class ``from_pretrained`` builds).

Suffixes, as the transformers model classes name them:

* ``*ForCausalLM``, ``*LMHeadModel``: ``head: lm`` (tied to the embedding where the config says so);
* ``*ForSequenceClassification``: ``head: classification`` of ``num_labels`` (``id2label``). Decoders put
  one bias-free ``score`` linear on the last token; BERT adds its pooler; RoBERTa's and DeBERTa's
  dense + out_proj heads count as a pooler plus a classifier (the same tensors);
* ``*ForTokenClassification``, ``*ForQuestionAnswering``: a linear on every token, no pooler;
* an encoder's ``*ForMultipleChoice``: its pooler and a classifier of one output per choice, the tensors of
  its sequence classifier with ``num_labels`` 1; each choice is a sequence of the batch;
* ``*ForMaskedLM``: the MLM head (transform, LayerNorm, vocabulary decoder with bias), no pooler;
* ``BertForPreTraining``: MLM head, pooler and the next-sentence classifier;
* bare ``*Model``: no head (BERT/RoBERTa and ViT keep their pooler).
"""

from __future__ import annotations

from typing import Any

from vramcalc.spec.hf_reader import Reader
from vramcalc.units import quoted

#: Class-name suffixes and the heads they carry (the first that matches wins).
SUFFIXES = (
    ("ForCausalLM", "lm"),
    ("LMHeadModel", "lm"),
    ("ForConditionalGeneration", "lm"),
    ("ForSequenceClassification", "classification"),
    ("ForImageClassification", "classification"),
    ("ForTokenClassification", "token_classification"),
    ("ForQuestionAnswering", "question_answering"),
    ("ForMultipleChoice", "multiple_choice"),
    ("ForMaskedLM", "mlm"),
    ("ForPreTraining", "pretraining"),
    ("EncoderModel", "encoder"),
    ("Model", "none"),
)
#: Classes whose names end like a supported one but carry a head vramcalc does not model.
UNSUPPORTED = ("DoubleHeadsModel",)


def head_kind(r: Reader, default: str) -> str:
    """The head of ``architectures[0]`` (``default`` when the config names no class); a class whose head
    vramcalc does not model (multiple choice, next-sentence prediction, double heads) is an error."""
    names = r.architectures().split()
    if not names:
        return default
    for suffix, kind in SUFFIXES:
        if names[0].endswith(suffix) and not names[0].endswith(UNSUPPORTED):
            return kind
    supported = ", ".join(f"*{suffix}" for suffix, _ in SUFFIXES)
    raise r.fail("architectures", f"{quoted(names[0])}: this head is not supported (supported: {supported})")


def decoder_head(r: Reader, kind: str, *, generic_token_head: bool = True) -> dict[str, Any]:
    """Head keys of a decoder-only model (no pooler in any of these classes; no multiple-choice head is
    modelled on a decoder). ``generic_token_head``: the
    family's token classifier is transformers' ``GenericForTokenClassification`` (modeling_layers.py), whose
    ``score`` has a bias unless ``token_classification_bias`` is false; the GPT-style families' own
    classes (``GPT2ForTokenClassification``, ``BloomForTokenClassification``, ...) always have one."""
    if kind in ("lm", "mlm", "pretraining"):
        return {"head": "lm"}
    if kind == "multiple_choice":
        raise r.fail("architectures", f"{quoted(r.architectures())}: a decoder's multiple-choice head is not modelled")
    if kind == "classification":
        return {"head": "classification", "num_labels": r.label_count(), "head_bias": False}
    if kind == "token_classification":
        bias = r.flag("token_classification_bias", True) if generic_token_head else True
        return {"head": "token_classification", "num_labels": r.label_count(), "head_bias": bias}
    if kind == "question_answering":  # start and end logits whatever num_labels says
        return {"head": "question_answering", "head_bias": True}
    return {"head": "none"}


def encoder_head(r: Reader, kind: str, bare_pooler: bool) -> dict[str, Any]:
    """Head keys of a BERT-style encoder; ``bare_pooler``: whether its bare ``*Model`` class has a pooler
    (BERT, RoBERTa: yes; DeBERTa: no)."""
    if kind in ("lm", "mlm"):
        return {"head": "lm", "pooler": False}
    if kind == "pretraining":
        return {"head": "pretraining", "pooler": True}
    if kind == "classification":
        return {"head": "classification", "num_labels": r.label_count(), "pooler": True, "head_bias": True}
    if kind == "multiple_choice":  # BertForMultipleChoice & co: the pooled output -> Linear(hidden, 1) per choice
        return {"head": "classification", "num_labels": 1, "pooler": True, "head_bias": True}
    if kind == "token_classification":
        return {"head": "token_classification", "num_labels": r.label_count(), "pooler": False, "head_bias": True}
    if kind == "question_answering":  # the encoders' qa_outputs: hidden -> num_labels (2: start and end)
        return {"head": "question_answering", "num_labels": r.label_count(), "pooler": False, "head_bias": True}
    return {"head": "none", "pooler": bare_pooler}


#: Said of a multiple-choice class: how its batch is counted.
MULTIPLE_CHOICE_NOTE = (
    "{name}: one classifier output per choice; each choice is a sequence of the batch (batch_size counts "
    "questions x choices)"
)


def head_notes(r: Reader) -> list[str]:
    """What the estimate should say about the class's head beyond its tensors."""
    names = r.architectures().split()
    if names and names[0].endswith("ForMultipleChoice"):
        return [MULTIPLE_CHOICE_NOTE.format(name=names[0])]
    return []
