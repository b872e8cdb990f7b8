"""Hugging Face architectures beyond GPT-2, Llama, BERT and ViT, each from a tiny random configuration (no
weights are downloaded), with what each brings the engine: ALiBi (Bloom's ``baddbmm``, MPT's add),
in-place adds (Falcon), squared ReLU (Persimmon), a relative position bias that is a parameter inside
the attention mask (T5), tiled relative embeddings (DeBERTa's ``repeat``), a bias table resized
bilinearly (BEiT), padded and rolled windows with a pooled output (Swin), a convolution with
``padding="valid"`` (SigLIP), partial and interleaved rotary embeddings (GPT-NeoX, Phi, GPT-J),
sliding windows (Mistral), logit soft-capping (Gemma 2), q/k norms (Qwen3), shared layers (ALBERT),
multi-query attention (GPT-BigCode), encoders whose output has no logits (T5, CLIP, SigLIP), einsum and
upsampling by repeat_interleave (Funnel), 1-d convolutions (Whisper's encoder), group norm and the
weight-norm parametrisation (Wav2Vec2, HuBERT)."""

from __future__ import annotations

import torch

from .models import DT, hf

V, T, B, D = 11, 5, 2, 8


def _common(**kw):
    base = dict(
        vocab_size=V, hidden_size=D, num_hidden_layers=1, num_attention_heads=2, intermediate_size=6,
        max_position_embeddings=16, pad_token_id=0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    base.update(kw)
    return base


_VISION = dict(
    image_size=6, patch_size=3, num_channels=1, hidden_size=D, num_hidden_layers=1, num_attention_heads=2,
    intermediate_size=6,
)  # fmt: skip


def _configs(tr):
    """name -> (model class, its configuration, loss)."""
    return {
        "bloom": (tr.BloomForCausalLM, tr.BloomConfig(vocab_size=V, hidden_size=D, n_layer=1, n_head=2), "causal_lm"),
        "falcon": (
            tr.FalconForCausalLM,
            tr.FalconConfig(vocab_size=V, hidden_size=D, num_hidden_layers=1, num_attention_heads=2, multi_query=True),
            "causal_lm",
        ),
        "persimmon": (tr.PersimmonForCausalLM, tr.PersimmonConfig(**_common()), "causal_lm"),
        "t5-encoder": (
            tr.T5EncoderModel,
            tr.T5Config(
                vocab_size=V,
                d_model=D,
                d_kv=4,
                d_ff=6,
                num_layers=1,
                num_heads=2,
                relative_attention_num_buckets=4,
                relative_attention_max_distance=8,
            ),
            "mse",
        ),
        "clip-text": (
            tr.CLIPTextModel,
            tr.CLIPTextConfig(
                vocab_size=V,
                hidden_size=D,
                intermediate_size=6,
                num_hidden_layers=1,
                num_attention_heads=2,
                max_position_embeddings=16,
            ),
            "mse",
        ),
        "gpt-neox": (tr.GPTNeoXForCausalLM, tr.GPTNeoXConfig(**_common(rotary_pct=0.5)), "causal_lm"),
        "phi": (tr.PhiForCausalLM, tr.PhiConfig(**_common(partial_rotary_factor=0.5)), "causal_lm"),
        "gpt-j": (
            tr.GPTJForCausalLM,
            tr.GPTJConfig(vocab_size=V, n_embd=D, n_layer=1, n_head=2, rotary_dim=2, n_positions=16),
            "causal_lm",
        ),
        "mistral": (
            tr.MistralForCausalLM,
            tr.MistralConfig(**_common(num_key_value_heads=1, sliding_window=2)),
            "causal_lm",
        ),
        "gemma2": (
            tr.Gemma2ForCausalLM,
            tr.Gemma2Config(
                **_common(num_key_value_heads=1, head_dim=4, attn_logit_softcapping=5.0, final_logit_softcapping=3.0)
            ),
            "causal_lm",
        ),
        "mpt": (
            tr.MptForCausalLM,
            tr.MptConfig(vocab_size=V, d_model=D, n_heads=2, n_layers=1, expansion_ratio=1, max_seq_len=16),
            "causal_lm",
        ),
        "gpt-bigcode": (
            tr.GPTBigCodeForCausalLM,
            tr.GPTBigCodeConfig(vocab_size=V, n_embd=D, n_layer=1, n_head=2, n_positions=16, multi_query=True),
            "causal_lm",
        ),
        "qwen3": (tr.Qwen3ForCausalLM, tr.Qwen3Config(**_common(num_key_value_heads=1, head_dim=4)), "causal_lm"),
        "deberta-v2": (
            tr.DebertaV2ForSequenceClassification,
            tr.DebertaV2Config(
                vocab_size=V,
                hidden_size=D,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=6,
                max_position_embeddings=16,
                relative_attention=True,
                position_buckets=4,
                max_relative_positions=8,
                pos_att_type=["p2c", "c2p"],
                num_labels=3,
            ),
            "cross_entropy",
        ),
        "beit": (
            tr.BeitForImageClassification,
            tr.BeitConfig(**_VISION, use_relative_position_bias=True, num_labels=3),
            "image",
        ),
        "swin": (
            tr.SwinForImageClassification,
            tr.SwinConfig(
                image_size=6,
                patch_size=2,
                num_channels=1,
                embed_dim=4,
                depths=[2],
                num_heads=[2],
                window_size=2,
                num_labels=3,
            ),
            "image",
        ),
        "siglip-vision": (tr.SiglipVisionModel, tr.SiglipVisionConfig(**_VISION), "image-mse"),
        "albert": (
            tr.AlbertForSequenceClassification,
            tr.AlbertConfig(
                vocab_size=V,
                embedding_size=6,
                hidden_size=D,
                num_hidden_layers=2,
                num_attention_heads=2,
                intermediate_size=6,
                max_position_embeddings=16,
                num_labels=3,
            ),
            "cross_entropy",
        ),
        "funnel": (
            tr.FunnelModel,
            tr.FunnelConfig(
                vocab_size=V,
                block_sizes=[1, 1],
                num_decoder_layers=1,
                d_model=D,
                n_head=2,
                d_head=4,
                d_inner=6,
                max_position_embeddings=16,
            ),
            "mse",
        ),  # fmt: skip
        "whisper-encoder": (
            tr.models.whisper.modeling_whisper.WhisperEncoder,
            tr.WhisperConfig(
                vocab_size=V,
                num_mel_bins=4,
                encoder_layers=1,
                encoder_attention_heads=2,
                decoder_layers=1,
                decoder_attention_heads=2,
                d_model=D,
                encoder_ffn_dim=6,
                decoder_ffn_dim=6,
                max_source_positions=4,
                max_target_positions=8,
                pad_token_id=0,
                bos_token_id=0,
                eos_token_id=0,
                decoder_start_token_id=0,
            ),
            "audio",
        ),  # fmt: skip
        "wav2vec2": (tr.Wav2Vec2Model, tr.Wav2Vec2Config(**_AUDIO, do_stable_layer_norm=False), "audio"),
        "hubert": (tr.HubertModel, tr.HubertConfig(**_AUDIO), "audio"),
    }


#: Wav2Vec2's and HuBERT's convolutional front end (group norm) and positional convolution (weight norm)
_AUDIO = dict(
    hidden_size=D, num_hidden_layers=1, num_attention_heads=2, intermediate_size=6, conv_dim=(4, 4),
    conv_stride=(3, 2), conv_kernel=(5, 3), num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
    feat_extract_norm="group",
)  # fmt: skip


NAMES = [
    "bloom", "falcon", "persimmon", "t5-encoder", "clip-text", "deberta-v2", "beit", "swin", "siglip-vision",
    "gpt-neox", "phi", "gpt-j", "mistral", "gemma2", "mpt", "gpt-bigcode", "qwen3", "albert", "funnel",
    "whisper-encoder", "wav2vec2", "hubert",
]  # fmt: skip

#: computed as the model is, not under the library's ``Float64Throughout`` (DeBERTa's export fails under
#: it; the model casts no differentiated value to float32, so both sides compute one function)
NATIVE = {"deberta-v2"}


def build(name: str, seed: int):
    """(model in float64 eval mode, inputs, targets, loss name) of an architecture, tokens and
    targets drawn from ``seed`` (classification with a padding mask on the second sequence)."""
    tr = hf()
    cls, cfg, loss = _configs(tr)[name]
    torch.manual_seed(seed)
    model = cls(cfg).to(DT).eval()
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(1, V, (B, T), generator=g)
    if loss == "causal_lm":
        return model, {"input_ids": ids, "use_cache": False}, ids, loss
    if loss.startswith("image"):
        x = {"pixel_values": torch.randn(B, 1, 6, 6, dtype=DT, generator=g)}
        if loss == "image":
            return model, x, torch.randint(0, 3, (B,), generator=g), "cross_entropy"
        with torch.no_grad():
            shape = model(**x)[0].shape
        return model, x, torch.randn(shape, dtype=DT, generator=g), "mse"
    if loss in ("mse", "audio"):
        if loss == "audio":  # log-mel features (Whisper) or a waveform
            x = {"input_features": torch.randn(B, 4, 8, dtype=DT, generator=g)} if "whisper" in name else {}
            x = x or {"input_values": torch.randn(B, 40, dtype=DT, generator=g)}
        else:
            x = {"input_ids": ids}
        with torch.no_grad():
            shape = model(**x)[0].shape
        return model, x, torch.randn(shape, dtype=DT, generator=g), "mse"
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, -2:] = 0
    return model, {"input_ids": ids, "attention_mask": mask}, torch.randint(0, 3, (B,), generator=g), loss
