#!/usr/bin/python3
"""Models dtcc has not seen: HuggingFace transformers' architectures, trained.

Each architecture of the table below, in a small random configuration, is
built by HuggingFace transformers (PyPI, pinned), wrapped to return its own
loss (the library's: shifted causal-LM cross-entropy, masked-LM with ignored
positions, sequence-to-sequence, image classification, semantic
segmentation), exported by Debian's PyTorch 1.13 in training mode (opset 17)
and compiled with `dtcc compile --train`. Both then train from the same
weights on the same batches with AdamW (lr 1e-3, no weight decay, constant
schedule), at the same thread count:

  PyTorch 1.13 eager  the model itself, torch.optim.AdamW
  dtcc                the executable dtcc builds from the ONNX file

Printed per model: its size, the ONNX file's node count, dtcc's compile
time, whether the losses agree (steps 1 and 2 within --rtol: the first loss
checks the forward, the second every gradient and the update; where they
are not within --rtol of PyTorch's f32 run but are of the same model
trained in double by PyTorch, the table says so and how far PyTorch's f32
run is from its own f64 one: PyTorch 1.13's f32 gradients of Wav2Vec2's
feature encoder vary from run to run by up to 1e-3 of the loss; later steps
are reported, not judged: Adam's first steps move a weight by lr whatever
its gradient's size, so rounding-level differences in small gradients grow,
and PyTorch's own f32 run leaves its f64 run by several percent by step 3
on some of these configurations, e.g. LeViT), and each system's median
step time after --warmup steps (dtcc's as its training loop logs them;
its losses as the program computed them, from --dump-outputs in f32, not
the log's 5 decimals).

With --exporter dynamo, PyTorch 2's exporter (torch.onnx.export(...,
dynamo=True, optimize=False): torch.export, then onnxscript; PyTorch 2's
default exporter) writes the ONNX file instead, in an environment made of
the benchmarks' PyTorch 2 (cpu_compare.py's) and a newer transformers, and
the reference trains in that PyTorch.

transformers is installed with pip into a virtual environment under a cache
directory that also sees Debian's packages (its PyTorch 1.13, onnx, numpy),
created on first use; never into the system or the test path.

This file is also the child process (`hf_models.py child SPEC.json`), run in
that environment once per model.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import cpu_compare  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from e2e_common import MPI_ENV, step_losses  # noqa: E402

# transformers 4.36 is the newest that runs on Debian's PyTorch 1.13.
REQUIREMENTS = ("transformers==4.36.2",)
# --exporter dynamo: PyTorch 2's ONNX exporter (torch.export, then
# onnxscript) on the benchmarks' PyTorch 2 environment, with a transformers
# of its time.
DYNAMO_REQUIREMENTS = ("onnxscript==0.7.2", "onnx==1.23.2", "transformers==5.24.0")
VOCAB = 500

# name: (transformers class, config class, config, kind). Kinds: causal and
# mlm (token ids -> token labels, mlm ignoring every other position),
# seq2seq (ids -> target ids), cls (ids -> a class), image (3 x 32 x 32 ->
# a class), image128 (3 x 128 x 128: LeViT's fixed 16x stem), seg (3 x 32 x
# 32 -> a class per pixel), audio (a waveform of 1600 samples -> a class),
# mel (16 mel bins x 64 frames -> a class: Whisper's encoder), spectrogram
# (64 frames x 16 mel bins -> a class: the Audio Spectrogram Transformer).
_NO_DROP = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
_ENC = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128)
_DEC = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64)
_GPT = dict(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64,
            resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
_S2S = dict(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=128,
            max_position_embeddings=64, dropout=0, attention_dropout=0,
            activation_dropout=0)
_VIT = dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
            num_attention_heads=4, intermediate_size=128, num_labels=10,
            **_NO_DROP)
# Wav2Vec2's family: two strided convolutions over the waveform, then the
# transformer with its convolutional positions.
_SPEECH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, conv_dim=(16, 16), conv_stride=(5, 4),
               conv_kernel=(10, 8), num_conv_pos_embeddings=16,
               num_conv_pos_embedding_groups=4, hidden_dropout=0.0,
               activation_dropout=0.0, attention_dropout=0.0,
               feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
               mask_time_prob=0.0, num_labels=2, classifier_proj_size=32)
MODELS = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", _GPT, "causal"),
    "llama": ("LlamaForCausalLM", "LlamaConfig",
              dict(_DEC, num_key_value_heads=2), "causal"),
    "mistral": ("MistralForCausalLM", "MistralConfig",
                dict(_DEC, num_key_value_heads=2, sliding_window=16), "causal"),
    "gpt-neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig",
                 dict(_DEC, hidden_dropout=0, attention_dropout=0), "causal"),
    "opt": ("OPTForCausalLM", "OPTConfig",
            dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                 num_attention_heads=4, ffn_dim=128,
                 max_position_embeddings=64, dropout=0, attention_dropout=0,
                 word_embed_proj_dim=64), "causal"),
    "bloom": ("BloomForCausalLM", "BloomConfig",
              dict(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4,
                   hidden_dropout=0, attention_dropout=0), "causal"),
    "gptj": ("GPTJForCausalLM", "GPTJConfig", dict(_GPT, rotary_dim=8),
             "causal"),
    "codegen": ("CodeGenForCausalLM", "CodeGenConfig",
                dict(_GPT, n_ctx=64, rotary_dim=8), "causal"),
    "gpt-bigcode": ("GPTBigCodeForCausalLM", "GPTBigCodeConfig", _GPT,
                    "causal"),
    "phi": ("PhiForCausalLM", "PhiConfig",
            dict(_DEC, resid_pdrop=0, embd_pdrop=0, attention_dropout=0),
            "causal"),
    "falcon": ("FalconForCausalLM", "FalconConfig",
               dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                    num_attention_heads=4, hidden_dropout=0,
                    attention_dropout=0), "causal"),
    "mixtral": ("MixtralForCausalLM", "MixtralConfig",
                dict(_DEC, num_key_value_heads=2, num_local_experts=4,
                     num_experts_per_tok=2), "causal"),
    "bert": ("BertForMaskedLM", "BertConfig", dict(_ENC, **_NO_DROP), "mlm"),
    "roberta": ("RobertaForMaskedLM", "RobertaConfig", dict(_ENC, **_NO_DROP),
                "mlm"),
    "xlm-roberta": ("XLMRobertaForMaskedLM", "XLMRobertaConfig",
                    dict(_ENC, **_NO_DROP), "mlm"),
    "albert": ("AlbertForMaskedLM", "AlbertConfig",
               dict(_ENC, embedding_size=32, **_NO_DROP), "mlm"),
    "electra": ("ElectraForMaskedLM", "ElectraConfig",
                dict(_ENC, embedding_size=32, **_NO_DROP), "mlm"),
    "deberta-v2": ("DebertaV2ForMaskedLM", "DebertaV2Config",
                   dict(_ENC, max_position_embeddings=64, **_NO_DROP), "mlm"),
    "mpnet": ("MPNetForMaskedLM", "MPNetConfig", dict(_ENC, **_NO_DROP),
              "mlm"),
    "distilbert": ("DistilBertForSequenceClassification", "DistilBertConfig",
                   dict(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4,
                        hidden_dim=128, dropout=0, attention_dropout=0,
                        seq_classif_dropout=0), "cls"),
    "t5": ("T5ForConditionalGeneration", "T5Config",
           dict(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                num_heads=4, dropout_rate=0, decoder_start_token_id=0,
                pad_token_id=0), "seq2seq"),
    "bart": ("BartForConditionalGeneration", "BartConfig", _S2S, "seq2seq"),
    "mbart": ("MBartForConditionalGeneration", "MBartConfig", _S2S, "seq2seq"),
    "pegasus": ("PegasusForConditionalGeneration", "PegasusConfig",
                dict(_S2S, decoder_start_token_id=0), "seq2seq"),
    "vit": ("ViTForImageClassification", "ViTConfig", _VIT, "image"),
    "deit": ("DeiTForImageClassification", "DeiTConfig", _VIT, "image"),
    "beit": ("BeitForImageClassification", "BeitConfig",
             dict(_VIT, use_relative_position_bias=True, drop_path_rate=0),
             "image"),
    "swin": ("SwinForImageClassification", "SwinConfig",
             dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                  num_heads=[2, 2], window_size=4, num_labels=10,
                  drop_path_rate=0, **_NO_DROP), "image"),
    "levit": ("LevitForImageClassification", "LevitConfig",
              dict(image_size=128, patch_size=16, hidden_sizes=[32, 48, 64],
                   num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                   key_dim=[8, 8, 8], num_labels=10, drop_path_rate=0),
              "image128"),
    "mobilevit": ("MobileViTForImageClassification", "MobileViTConfig",
                  dict(image_size=32, num_labels=10, hidden_sizes=[16, 24, 32],
                       neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
                       classifier_dropout_prob=0, **_NO_DROP), "image"),
    "resnet": ("ResNetForImageClassification", "ResNetConfig",
               dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                    depths=[1, 1], num_labels=10), "image"),
    "regnet": ("RegNetForImageClassification", "RegNetConfig",
               dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                    depths=[1, 1], groups_width=8, num_labels=10), "image"),
    "convnext": ("ConvNextForImageClassification", "ConvNextConfig",
                 dict(num_channels=3, num_stages=2, hidden_sizes=[16, 32],
                      depths=[1, 1], num_labels=10, image_size=32,
                      drop_path_rate=0), "image"),
    "poolformer": ("PoolFormerForImageClassification", "PoolFormerConfig",
                   dict(num_channels=3, hidden_sizes=[16, 32], depths=[1, 1],
                        num_encoder_blocks=2, patch_sizes=[7, 3],
                        strides=[4, 2], padding=[2, 1], num_labels=10,
                        drop_path_rate=0), "image"),
    "segformer": ("SegformerForSemanticSegmentation", "SegformerConfig",
                  dict(num_channels=3, num_encoder_blocks=2, depths=[1, 1],
                       sr_ratios=[2, 1], hidden_sizes=[16, 32],
                       patch_sizes=[7, 3], strides=[4, 2],
                       num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                       decoder_hidden_size=32, num_labels=5,
                       classifier_dropout_prob=0, drop_path_rate=0,
                       **_NO_DROP), "seg"),
    # Architectures added in the thirty-eighth session (models dtcc had not
    # seen: local and ALiBi attention, convolutions inside transformers,
    # bottlenecks without norms, funnel pooling, rotary encoders,
    # sinusoidal positions, weight-standardized and depthwise convolutions,
    # global response norms, cosine attention, speech front ends).
    "gpt-neo": ("GPTNeoForCausalLM", "GPTNeoConfig",
                dict(vocab_size=VOCAB, hidden_size=64, num_layers=2,
                     num_heads=4, attention_types=[[["global", "local"], 1]],
                     window_size=8, intermediate_size=128,
                     max_position_embeddings=64, embed_dropout=0,
                     attention_dropout=0, resid_dropout=0), "causal"),
    "mpt": ("MptForCausalLM", "MptConfig",
            dict(vocab_size=VOCAB, d_model=64, n_heads=4, n_layers=2,
                 expansion_ratio=2, max_seq_len=64, resid_pdrop=0,
                 emb_pdrop=0), "causal"),
    "persimmon": ("PersimmonForCausalLM", "PersimmonConfig",
                  dict(_DEC, hidden_dropout=0, attention_dropout=0), "causal"),
    "xglm": ("XGLMForCausalLM", "XGLMConfig",
             dict(vocab_size=VOCAB, d_model=64, num_layers=2,
                  attention_heads=4, ffn_dim=128, max_position_embeddings=64,
                  dropout=0, attention_dropout=0, activation_dropout=0),
             "causal"),
    "biogpt": ("BioGptForCausalLM", "BioGptConfig",
               dict(_DEC, hidden_dropout_prob=0,
                    attention_probs_dropout_prob=0), "causal"),
    "rwkv": ("RwkvForCausalLM", "RwkvConfig",
             dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                  attention_hidden_size=64, intermediate_size=128,
                  context_length=64), "causal"),
    "convbert": ("ConvBertForMaskedLM", "ConvBertConfig",
                 dict(_ENC, embedding_size=32, head_ratio=2,
                      conv_kernel_size=5, **_NO_DROP), "mlm"),
    "squeezebert": ("SqueezeBertForMaskedLM", "SqueezeBertConfig",
                    dict(_ENC, embedding_size=64, q_groups=4, k_groups=4,
                         v_groups=4, post_attention_groups=1,
                         intermediate_groups=4, output_groups=4,
                         **_NO_DROP), "mlm"),
    "mobilebert": ("MobileBertForMaskedLM", "MobileBertConfig",
                   dict(_ENC, embedding_size=32, intra_bottleneck_size=32,
                        true_hidden_size=32, num_feedforward_networks=2,
                        normalization_type="no_norm", **_NO_DROP), "mlm"),
    "funnel": ("FunnelForMaskedLM", "FunnelConfig",
               dict(vocab_size=VOCAB, block_sizes=[1, 1], d_model=64,
                    n_head=4, d_head=16, d_inner=128, hidden_dropout=0,
                    attention_dropout=0, activation_dropout=0), "mlm"),
    "roformer": ("RoFormerForMaskedLM", "RoFormerConfig",
                 dict(_ENC, embedding_size=64, **_NO_DROP), "mlm"),
    "esm": ("EsmForMaskedLM", "EsmConfig",
            dict(_ENC, pad_token_id=1, mask_token_id=2, token_dropout=False,
                 position_embedding_type="rotary", max_position_embeddings=64,
                 **_NO_DROP), "mlm"),
    "megatron-bert": ("MegatronBertForMaskedLM", "MegatronBertConfig",
                      dict(_ENC, **_NO_DROP), "mlm"),
    "rembert": ("RemBertForMaskedLM", "RemBertConfig",
                dict(_ENC, input_embedding_size=32, output_embedding_size=32,
                     **_NO_DROP, classifier_dropout_prob=0), "mlm"),
    "big-bird": ("BigBirdForMaskedLM", "BigBirdConfig",
                 dict(_ENC, attention_type="original_full", **_NO_DROP),
                 "mlm"),
    "marian": ("MarianMTModel", "MarianConfig",
               dict(_S2S, decoder_start_token_id=0, pad_token_id=0),
               "seq2seq"),
    "m2m100": ("M2M100ForConditionalGeneration", "M2M100Config",
               dict(_S2S, decoder_start_token_id=2, pad_token_id=1,
                    encoder_layerdrop=0, decoder_layerdrop=0), "seq2seq"),
    "blenderbot": ("BlenderbotForConditionalGeneration", "BlenderbotConfig",
                   dict(_S2S, decoder_start_token_id=1), "seq2seq"),
    "umt5": ("UMT5ForConditionalGeneration", "UMT5Config",
             dict(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128,
                  num_layers=2, num_heads=4, dropout_rate=0,
                  decoder_start_token_id=0, pad_token_id=0), "seq2seq"),
    "dinov2": ("Dinov2ForImageClassification", "Dinov2Config",
               dict(_VIT, image_size=32, layerscale_value=0.1,
                    drop_path_rate=0), "image"),
    "vit-msn": ("ViTMSNForImageClassification", "ViTMSNConfig", _VIT,
                "image"),
    "data2vec-vision": ("Data2VecVisionForImageClassification",
                        "Data2VecVisionConfig",
                        dict(_VIT, use_relative_position_bias=True,
                             drop_path_rate=0), "image"),
    "bit": ("BitForImageClassification", "BitConfig",
            dict(num_channels=3, embedding_size=32, hidden_sizes=[64, 128],
                 depths=[1, 1], num_labels=10, layer_type="bottleneck",
                 global_padding="SAME", num_groups=8, drop_path_rate=0),
            "image"),
    "mobilenet-v2": ("MobileNetV2ForImageClassification", "MobileNetV2Config",
                     dict(image_size=32, depth_multiplier=0.25, num_labels=10,
                          classifier_dropout_prob=0), "image"),
    "convnextv2": ("ConvNextV2ForImageClassification", "ConvNextV2Config",
                   dict(num_channels=3, num_stages=2, hidden_sizes=[16, 32],
                        depths=[1, 1], num_labels=10, image_size=32,
                        drop_path_rate=0), "image"),
    "focalnet": ("FocalNetForImageClassification", "FocalNetConfig",
                 dict(image_size=32, patch_size=4, embed_dim=16,
                      depths=[1, 1], focal_levels=[2, 2],
                      focal_windows=[3, 3], num_labels=10, drop_path_rate=0,
                      hidden_dropout_prob=0), "image"),
    "swinv2": ("Swinv2ForImageClassification", "Swinv2Config",
               dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                    num_heads=[2, 2], window_size=4, num_labels=10,
                    drop_path_rate=0, **_NO_DROP), "image"),
    "cvt": ("CvtForImageClassification", "CvtConfig",
            dict(num_channels=3, patch_sizes=[7, 3, 3], patch_stride=[4, 2, 2],
                 patch_padding=[2, 1, 1], embed_dim=[16, 32, 48],
                 num_heads=[1, 2, 2], depth=[1, 2, 3],
                 mlp_ratio=[2.0, 2.0, 2.0], attention_drop_rate=[0.0] * 3,
                 drop_rate=[0.0] * 3, drop_path_rate=[0.0] * 3,
                 qkv_bias=[True] * 3, cls_token=[False, False, True],
                 qkv_projection_method=["dw_bn"] * 3, kernel_qkv=[3] * 3,
                 padding_kv=[1] * 3, stride_kv=[2] * 3, padding_q=[1] * 3,
                 stride_q=[1] * 3, num_labels=10), "image"),
    "pvt": ("PvtForImageClassification", "PvtConfig",
            dict(image_size=32, num_encoder_blocks=2, depths=[1, 1],
                 sequence_reduction_ratios=[2, 1], hidden_sizes=[16, 32],
                 patch_sizes=[4, 2], strides=[4, 2], num_attention_heads=[1, 2],
                 mlp_ratios=[2, 2], num_labels=10, drop_path_rate=0,
                 hidden_dropout_prob=0, attention_probs_dropout_prob=0),
            "image"),
    "van": ("VanForImageClassification", "VanConfig",
            dict(image_size=32, hidden_sizes=[16, 32], depths=[1, 1],
                 patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
                 num_labels=10, drop_path_rate=0, dropout_rate=0), "image"),
    "wav2vec2": ("Wav2Vec2ForSequenceClassification", "Wav2Vec2Config",
                 _SPEECH, "audio"),
    "hubert": ("HubertForSequenceClassification", "HubertConfig", _SPEECH,
               "audio"),
    "wavlm": ("WavLMForSequenceClassification", "WavLMConfig",
              dict(_SPEECH, num_buckets=32, max_bucket_distance=64), "audio"),
    "whisper": ("WhisperForAudioClassification", "WhisperConfig",
                dict(vocab_size=VOCAB, num_mel_bins=16, d_model=64,
                     encoder_layers=2, encoder_attention_heads=4,
                     encoder_ffn_dim=128, decoder_layers=1,
                     decoder_attention_heads=4, decoder_ffn_dim=128,
                     max_source_positions=32, dropout=0, attention_dropout=0,
                     activation_dropout=0, num_labels=2,
                     classifier_proj_size=32), "mel"),
    "ast": ("ASTForAudioClassification", "ASTConfig",
            dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=128, patch_size=8, frequency_stride=8,
                 time_stride=8, max_length=64, num_mel_bins=16, num_labels=2,
                 **_NO_DROP), "spectrogram"),
}

# Architectures newer than transformers 4.36 (Debian's PyTorch 1.13 runs no
# later one): with --exporter dynamo only, in its environment's
# transformers.
_KV = dict(_DEC, num_key_value_heads=2)
NEWER_MODELS = {
    "gemma": ("GemmaForCausalLM", "GemmaConfig", dict(_KV, head_dim=16),
              "causal"),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config",
               dict(_KV, head_dim=16, sliding_window=8,
                    attn_logit_softcapping=50.0,
                    final_logit_softcapping=30.0), "causal"),
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config", _KV, "causal"),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(_KV, head_dim=16),
              "causal"),
    "olmo": ("OlmoForCausalLM", "OlmoConfig", _KV, "causal"),
    "stablelm": ("StableLmForCausalLM", "StableLmConfig",
                 dict(_KV, qk_layernorm=True, hidden_dropout=0), "causal"),
    "starcoder2": ("Starcoder2ForCausalLM", "Starcoder2Config",
                   dict(_KV, residual_dropout=0, embedding_dropout=0),
                   "causal"),
    "phi3": ("Phi3ForCausalLM", "Phi3Config",
             dict(_KV, resid_pdrop=0, embd_pdrop=0, pad_token_id=0),
             "causal"),
    "granite": ("GraniteForCausalLM", "GraniteConfig",
                dict(_KV, embedding_multiplier=2.0, residual_multiplier=0.5,
                     attention_multiplier=0.25, logits_scaling=2.0),
                "causal"),
    "cohere": ("CohereForCausalLM", "CohereConfig", _KV, "causal"),
    "helium": ("HeliumForCausalLM", "HeliumConfig", dict(_KV, head_dim=16),
               "causal"),
    "nemotron": ("NemotronForCausalLM", "NemotronConfig",
                 dict(_KV, head_dim=16), "causal"),
    "modernbert": ("ModernBertForMaskedLM", "ModernBertConfig",
                   dict(_ENC, max_position_embeddings=64,
                        global_attn_every_n_layers=2, local_attention=8,
                        embedding_dropout=0, mlp_dropout=0,
                        attention_dropout=0, pad_token_id=0, eos_token_id=1,
                        bos_token_id=2, cls_token_id=3, sep_token_id=4),
                   "mlm"),
}

# Kinds whose inputs are not token ids (sized() leaves their widths).
SIGNALS = ("image", "image128", "seg", "audio", "mel", "spectrogram")


# ------------------------------------------------------------ the child

def batch(kind, b, s, step):
    import torch
    g = torch.Generator().manual_seed(100 + step)
    if kind in ("image", "image128", "seg"):
        side = 128 if kind == "image128" else 32
        x = torch.randn(b, 3, side, side, generator=g)
        if kind == "seg":
            return x, torch.randint(0, 5, (b, side, side), generator=g)
        return x, torch.randint(0, 10, (b,), generator=g)
    if kind in ("audio", "mel", "spectrogram"):
        shape = {"audio": (b, 1600), "mel": (b, 16, 64),
                 "spectrogram": (b, 64, 16)}[kind]
        return torch.randn(*shape, generator=g), torch.randint(0, 2, (b,), generator=g)
    x = torch.randint(0, VOCAB, (b, s), generator=g)
    if kind == "cls":
        return x, torch.randint(0, 2, (b,), generator=g)
    y = torch.randint(0, VOCAB, (b, s), generator=g)
    if kind == "mlm":
        y[:, ::2] = -100
    return x, y


def sized(cfg, kind, spec):
    """A text model's configuration at --width (hidden size; feed-forward 2x,
    T5's d_kv width / heads, ALBERT's and ELECTRA's embeddings width / 2) and
    with positions for --seq tokens."""
    cfg = dict(cfg)
    if kind in SIGNALS:
        return cfg
    w = spec["width"]
    # Embeddings as wide as the hidden size stay so (SqueezeBERT's must).
    tied = cfg.get("embedding_size") == cfg.get("hidden_size")
    for key in ("hidden_size", "n_embd", "d_model", "dim", "word_embed_proj_dim"):
        if key in cfg:
            cfg[key] = w
    for key in ("intermediate_size", "ffn_dim", "hidden_dim", "d_ff",
                "encoder_ffn_dim", "decoder_ffn_dim"):
        if key in cfg:
            cfg[key] = 2 * w
    if "n_embd" in cfg:
        cfg["n_inner"] = 2 * w
    if "d_kv" in cfg:
        cfg["d_kv"] = w // cfg["num_heads"]
    if "embedding_size" in cfg:
        cfg["embedding_size"] = w if tied else w // 2
    for key in ("n_positions", "max_position_embeddings", "n_ctx"):
        if key in cfg or kind in ("mlm", "cls"):
            # RoBERTa's positions start after the padding index.
            cfg[key] = max(cfg.get(key, 0), spec["seq"] + 2)
    return cfg


def child(spec_path):
    """Builds the model, exports it, writes the batches and trains it in
    PyTorch; writes the results beside the spec."""
    import torch
    import transformers
    from onnx import numpy_helper
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    spec = json.load(open(spec_path))
    torch.set_num_threads(spec["threads"])
    torch.manual_seed(0)
    cls, cfg_cls, cfg, kind = dict(MODELS, **NEWER_MODELS)[spec["name"]]
    model = getattr(transformers, cls)(
        getattr(transformers, cfg_cls)(**sized(cfg, kind, spec)))
    # The keyword each kind's input goes by.
    keyword = {"image": "pixel_values", "image128": "pixel_values",
               "seg": "pixel_values", "audio": "input_values",
               "mel": "input_features",
               "spectrogram": "input_values"}.get(kind, "input_ids")

    class Loss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, a, b):
            return self.m(**{keyword: a}, labels=b).loss

    wrapped = Loss(model).train()
    # The same model in double, for the first two steps: where the f32 runs
    # part, which one left the exact result (PyTorch's own f32 gradients
    # can vary from run to run: Wav2Vec2's feature encoder in 1.13).
    # (Built again from the same seed: a deep copy refuses weight-normed
    # convolutions, whose weights are not leaves.)
    torch.manual_seed(0)
    wrapped64 = Loss(getattr(transformers, cls)(
        getattr(transformers, cfg_cls)(**sized(cfg, kind, spec)))).train()
    work, steps = spec["work"], spec["steps"]
    out = {"params": sum(p.numel() for p in model.parameters())}
    batches = [batch(kind, spec["batch"], spec["seq"], i) for i in range(steps)]
    try:
        if spec.get("exporter") == "dynamo":
            # torch.export traces the module in train(); optimize=False keeps
            # each parameter an initializer of its own (the optimizer merges
            # initializers of equal value, as every norm's ones).
            import copy
            opset = {"opset_version": spec["opset"]} if spec.get("opset") else {}
            torch.onnx.export(copy.deepcopy(wrapped), batches[0],
                              os.path.join(work, "model.onnx"), dynamo=True,
                              optimize=False, input_names=["a", "b"],
                              output_names=["loss"], **opset)
        else:
            torch.onnx.export(wrapped, batches[0], os.path.join(work, "model.onnx"),
                              input_names=["a", "b"], output_names=["loss"],
                              opset_version=17, do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
    except Exception as e:  # the exporter's failure, not dtcc's
        out["error"] = f"PyTorch's export: {type(e).__name__}: {e}"[:300]
        json.dump(out, open(os.path.join(work, "torch.json"), "w"))
        return
    import onnx
    out["nodes"] = len(onnx.load(os.path.join(work, "model.onnx"),
                                 load_external_data=False).graph.node)
    for i, pair in enumerate(batches):
        d = os.path.join(work, "batches", f"{i:05d}")
        os.makedirs(d, exist_ok=True)
        for name, t in zip(("a", "b"), pair):
            with open(os.path.join(d, name + ".pb"), "wb") as f:
                f.write(numpy_helper.from_array(t.numpy(), name).SerializeToString())
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3, weight_decay=0.0)
    losses, times = [], []
    for x, y in batches:
        start = time.perf_counter()
        opt.zero_grad()
        loss = wrapped(x, y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
        losses.append(loss.item())
    out.update(losses=losses, times=times)
    # (Some models do not run in double: their masks' fill, the type's
    # lowest value, overflows the float tensors they write it to.)
    try:
        wrapped64 = wrapped64.double()
        opt = torch.optim.AdamW(wrapped64.parameters(), lr=1e-3, weight_decay=0.0)
        exact = []
        for x, y in batches[:2]:
            opt.zero_grad()
            loss = wrapped64(x.double() if x.is_floating_point() else x, y)
            loss.backward()
            opt.step()
            exact.append(loss.item())
        out["losses_f64"] = exact
    except Exception:
        pass
    json.dump(out, open(os.path.join(work, "torch.json"), "w"))


# ------------------------------------------------------------ the parent

def mesh_ranks(mesh):
    """The ranks of a --mesh value ("dp=2,tp=2 --zero 3": 4)."""
    ranks = 1
    for axis in mesh.split()[0].split(","):
        ranks *= int(axis.split("=")[1])
    return ranks


def run_dtcc(args, work, mesh=None):
    """Compiles (on `mesh`: "dp=2", "tp=2 --zero 3", ...) and trains; the
    losses and step times, or an error."""
    exe = os.path.join(work, "train" if mesh is None else "train-mesh")
    cmd = [args.dtcc, "compile", os.path.join(work, "model.onnx"), "--train",
           "--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0",
           "--schedule", "constant", "--warmup", "0", "-o", exe] + args.dtcc_flag
    if mesh is not None:
        cmd += ["--mesh"] + mesh.split()
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    compile_s = time.perf_counter() - start
    if proc.returncode != 0:
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        return {"error": "dtcc compile: " + " | ".join(lines[:3])[:300]}
    # The losses as the program computed them (--dump-outputs, f32), not
    # the log's 5 decimals.
    dump = exe + ".dump"
    shutil.rmtree(dump, ignore_errors=True)
    run = [exe, "--batches", os.path.join(work, "batches"), "--steps",
           str(args.steps), "--log-every", "1", "--dump-outputs", dump]
    env = cpu_compare.thread_env(args.threads)
    if mesh is not None:
        run = ["mpirun", "-n", str(mesh_ranks(mesh))] + run
        env = dict(env, **MPI_ENV)
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(run, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": "dtcc run: " + proc.stderr.strip()[-300:]}
    times = []
    for line in proc.stdout.splitlines():
        if line.startswith("step "):
            words = line.split()
            times.append(float(words[words.index("step", 1) + 1]))
    try:
        losses = [float(x) for x in step_losses(dump, len(times))]
    except OSError as e:
        return {"error": f"dtcc run: no loss in --dump-outputs ({e})"}
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    return {"compile_s": compile_s, "losses": losses, "times": times}


def plan_model(args, work):
    """`dtcc plan model.onnx --cluster <args.plan> --json`: how the planner
    reads the model (its transformer sizes, or why it is not one) and the
    plan it chooses; or an error."""
    proc = subprocess.run([args.dtcc, "plan", os.path.join(work, "model.onnx"),
                           "--cluster", args.plan, "--global-batch", str(args.batch),
                           "--json"],
                          capture_output=True, text=True)
    if proc.returncode not in (0, 2):
        lines = [l.strip() for l in proc.stderr.splitlines() if l.strip()]
        return {"error": " | ".join(lines[:2])[:300]}
    report = json.loads(proc.stdout)
    m = report.get("model", {})
    source = report.get("modelSource", "")
    if m.get("layers", 0) > 0:
        kv = f" ({m['kvHeads']} kv)" if m.get("kvHeads") != m.get("heads") else ""
        read = (f"transformer: {m['layers']} layers, hidden {m['hidden']}, "
                f"{m['heads']} heads{kv}, ffn {m['ffnHidden']}, vocab {m['vocab']}")
    else:
        read = source[source.find("(") + 1:source.rfind(")")] if "(" in source else source
    plan = report.get("summary", "")
    return {"read": read, "plan": plan, "priced": report.get("pricedBy", "")}


def exporter_python(args, stem, requirements, dynamo_requirements, note,
                    dynamo_note, **classic):
    """The python of the environment for args.exporter: `stem`-dynamo-venv
    (dynamo_requirements layered on the benchmarks' PyTorch 2) or
    `stem`-venv (requirements beside Debian's packages; `classic`: more
    ensure_venv arguments), under the cache unless --venv names one."""
    if args.exporter == "dynamo":
        return cpu_compare.ensure_venv(
            args.venv or os.path.join(cpu_compare.cache_dir(), stem + "-dynamo-venv"),
            dynamo_requirements, base=cpu_compare.default_venv(), note=dynamo_note)
    return cpu_compare.ensure_venv(
        args.venv or os.path.join(cpu_compare.cache_dir(), stem + "-venv"),
        requirements, system_site_packages=True, note=note, **classic)


def model_names(ap, args, models):
    """--models as a list, each one of `models`; --steps and --warmup checked."""
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in models]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(models)}")
    if args.steps < max(2, args.warmup + 1):
        ap.error("--steps must exceed --warmup and be at least 2")
    return names


def torch_child(python, script, root, name, threads, **spec):
    """Runs `script child SPEC.json` with the environment's `python` for
    model `name` in root/name (the spec: name, work, threads and `spec`):
    (that directory, the child's torch.json, or {"failed": "PyTorch: ..."}
    where the child failed)."""
    work = os.path.join(root, name)
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "spec.json")
    json.dump(dict(spec, name=name, work=work, threads=threads), open(path, "w"))
    proc = subprocess.run([python, os.path.abspath(script), "child", path],
                          capture_output=True, text=True,
                          env=cpu_compare.thread_env(threads))
    result = os.path.join(work, "torch.json")
    if proc.returncode != 0 or not os.path.exists(result):
        print(f"{name}: PyTorch failed", file=sys.stderr, flush=True)
        return work, {"failed": "PyTorch: " + proc.stderr.strip()[-300:]}
    return work, json.load(open(result))


def tally(name, failed, ok):
    """Says on stderr whether model `name` agrees (`ok`), adds it to
    `failed` if not; returns `ok` (1 or 0) to count."""
    if not ok:
        failed.append(name)
    print(f"{name}: {'agrees' if ok else 'DIFFERS or failed'}", file=sys.stderr,
          flush=True)
    return int(ok)


def compared(out, torch_out, args):
    """A dtcc run against PyTorch's: (whether it ran every step with its
    first two losses within --rtol, their largest relative difference, the
    later steps', and the reference of the first two: "" for PyTorch's run,
    or "f64" where they are not within --rtol of it but are of the same
    model trained in double, the exact result PyTorch's f32 run left)."""
    def relative(losses, reference):
        return [abs(d - t) / abs(t) if t else abs(d - t)
                for d, t in zip(losses, reference)]
    rel = relative(out["losses"], torch_out["losses"])
    ran = len(out["losses"]) == args.steps
    agree = ran and all(r <= args.rtol for r in rel[:2])
    basis = ""
    exact = torch_out.get("losses_f64")
    if ran and not agree and exact:
        rel64 = relative(out["losses"], exact)
        if all(r <= args.rtol for r in rel64[:2]):
            agree, basis = True, "f64"
            rel[:2] = rel64[:2]
    return agree, max(rel[:2], default=0), max(rel[2:], default=0), basis


def verdict(agree, first, basis, torch_out):
    """A table cell: agree or DIFFER, the largest relative difference of the
    first two steps, and against what when not PyTorch's own f32 run."""
    if basis != "f64":
        return f"{'agree' if agree else 'DIFFER'} ({first:.1e})"
    f32 = max(abs(a - b) / abs(b) for a, b in
              zip(torch_out["losses"][:2], torch_out["losses_f64"][:2]))
    return (f"agree with PyTorch f64 ({first:.1e}; PyTorch f32 is "
            f"{f32:.1e} from it)")


def error_cell(out):
    """A failed run's error, fit for a table cell."""
    return out["error"].replace("|", "/").replace("\n", " ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated, of: " + ", ".join(MODELS) +
                    "; with --exporter dynamo also " + ", ".join(NEWER_MODELS))
    ap.add_argument("--dtcc", default=os.path.join(REPO, "build", "bin", "dtcc"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2,
                    help="steps not timed (default 2)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32, help="tokens per sequence")
    ap.add_argument("--width", type=int, default=64,
                    help="text models' hidden size (default 64)")
    ap.add_argument("--rtol", type=float, default=2e-4,
                    help="relative tolerance of the first two losses")
    ap.add_argument("--dtcc-flag", action="append", default=[],
                    metavar="FLAG", help="an extra flag for dtcc compile")
    ap.add_argument("--mesh", action="append", default=[],
                    help="also train on this mesh under mpirun, one thread "
                         "a rank (repeatable; a --mesh value, optionally "
                         "with flags: 'dp=2', 'tp=2', 'pp=2', "
                         "'dp=2 --zero 3'), against PyTorch's losses")
    ap.add_argument("--plan", metavar="CLUSTER",
                    help="also plan each model with `dtcc plan --cluster CLUSTER` "
                         "(e.g. dgx-h100): how the planner reads it and what it "
                         "chooses")
    ap.add_argument("--opset", type=int,
                    help="with --exporter dynamo: the opset to export at (PyTorch 2 "
                         "writes F.scaled_dot_product_attention as ONNX Attention and "
                         "F.rms_norm as RMSNormalization from 23 on); default the "
                         "exporter's")
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"),
                    default="torchscript",
                    help="torchscript: Debian's PyTorch 1.13 exports in "
                         "training mode (opset 17); dynamo: PyTorch 2's "
                         "torch.onnx.export(..., dynamo=True, optimize=False), "
                         "PyTorch 2's default exporter, in the benchmarks' "
                         "PyTorch 2 environment with transformers "
                         + DYNAMO_REQUIREMENTS[-1].split("==")[1]
                         + " (both train in that PyTorch)")
    ap.add_argument("--venv", default=None,
                    help="the environment (default: hf-venv, or "
                         "hf-dynamo-venv with --exporter dynamo, under "
                         + cpu_compare.cache_dir() + ")")
    ap.add_argument("--work", default=None,
                    help="keep each model's files here (default: a "
                         "temporary directory)")
    args = ap.parse_args()
    names = model_names(ap, args, dict(MODELS, **NEWER_MODELS)
                        if args.exporter == "dynamo" else MODELS)
    python = exporter_python(
        args, "hf", REQUIREMENTS, DYNAMO_REQUIREMENTS,
        "transformers and its dependencies; Debian's PyTorch 1.13",
        "onnxscript, onnx and transformers; the benchmarks' PyTorch 2")
    import tempfile
    root = args.work or tempfile.mkdtemp(prefix="dtcc-hf-")
    rows, mesh_rows, agreed, failed, plans = [], [], 0, [], {}
    for name in names:
        work, torch_out = torch_child(python, __file__, root, name, args.threads,
                                      seq=args.seq, width=args.width,
                                      steps=args.steps, batch=args.batch,
                                      exporter=args.exporter, opset=args.opset)
        if "failed" in torch_out:
            rows.append((name, {}, {"error": torch_out["failed"]}))
            failed.append(name)
            continue
        dtcc_out = torch_out if "error" in torch_out else run_dtcc(args, work)
        rows.append((name, torch_out, dtcc_out))

        def agrees(out):
            return "error" not in out and compared(out, torch_out, args)[0]
        ok = agrees(dtcc_out)
        meshes = {}
        for mesh in args.mesh if "error" not in torch_out else []:
            out = run_dtcc(args, work, mesh)
            meshes[mesh] = out
            ok = ok and agrees(out)
        mesh_rows.append((name, torch_out, meshes))
        if args.plan and "error" not in torch_out:
            plans[name] = plan_model(args, work)
        agreed += tally(name, failed, ok)

    if args.exporter == "dynamo":
        made = (f"HuggingFace transformers {DYNAMO_REQUIREMENTS[-1].split('==')[1]} "
                f"models, exported by PyTorch 2's torch.onnx.export(dynamo=True, "
                f"optimize=False{f', opset_version={args.opset}' if args.opset else ''}), "
                f"trained in that PyTorch")
    else:
        made = (f"HuggingFace transformers {REQUIREMENTS[0].split('==')[1]} models, "
                f"exported by PyTorch 1.13 (training mode, opset 17)")
    print(f"{made}; batch "
          f"{args.batch}, {args.seq} tokens, width {args.width} (images 32 x 32, "
          f"LeViT 128 x 128); "
          f"AdamW lr 1e-3; {args.steps} steps, {args.threads} thread(s); "
          f"step times: medians after {args.warmup}; dtcc {cpu_compare.git_version()}")
    print()
    print("| model | params | ONNX nodes | dtcc compile | steps 1-2 | later steps, "
          "largest relative difference | PyTorch "
          f"{'2' if args.exporter == 'dynamo' else '1.13'} eager ms/step | dtcc ms/step | "
          "dtcc faster |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t, d in rows:
        if "error" in d:
            params = f"{t['params']:,}" if "params" in t else "-"
            print(f"| {name} | {params} | {t.get('nodes', '-')} | {error_cell(d)} "
                  f"| | | | | |")
            continue
        agree, first, later, basis = compared(d, t, args)
        tm = statistics.median(t["times"][args.warmup:])
        dm = statistics.median(d["times"][args.warmup:])
        print(f"| {name} | {t['params']:,} | {t['nodes']} | {d['compile_s']:.1f} s | "
              f"{verdict(agree, first, basis, t)} | "
              f"{later:.1e} | {tm:.1f} | {dm:.1f} | {tm / dm:.2f}x |")
    if args.mesh:
        print()
        print("On meshes (MPI ranks, one thread each): the first two losses "
              "against PyTorch's (largest relative difference), and later "
              "steps'")
        print()
        print("| model | " + " | ".join(f"`--mesh {m}`" for m in args.mesh) + " |")
        print("|---|" + "---|" * len(args.mesh))
        for name, t, meshes in mesh_rows:
            cells = []
            for m in args.mesh:
                out = meshes.get(m, {"error": "-"})
                if "error" in out:
                    cells.append(error_cell(out)[:160])
                    continue
                agree, first, later, basis = compared(out, t, args)
                cells.append(f"{verdict(agree, first, basis, t)}; later {later:.1e}")
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.plan:
        print()
        print(f"`dtcc plan model.onnx --cluster {args.plan}` (the model's batch of "
              f"{args.batch} as the global batch):")
        print()
        print("| model | the planner reads | chosen plan | priced by |")
        print("|---|---|---|---|")
        for name in names:
            p = plans.get(name, {"error": "-"})
            if "error" in p:
                print(f"| {name} | {p['error'][:160]} | | |")
            else:
                print(f"| {name} | {p['read']} | {p['plan']} | {p['priced']} |")
        described = sum(1 for p in plans.values() if p.get("read", "").startswith("transformer"))
        print()
        print(f"{described} of {len(plans)} described as transformers")
    print()
    print(f"{agreed} of {len(names)} models train as PyTorch does (the first two "
          f"losses within {args.rtol:g} relative"
          + (", on one device and every mesh" if args.mesh else "") + ")"
          + (f"; not: {', '.join(failed)}" if failed else ""))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "child":
        child(sys.argv[2])
    else:
        main()
