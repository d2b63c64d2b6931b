"""The published config.json of five Hugging Face checkpoints, written out field for field (nothing is downloaded
here): the real sizes `rosetta hf-ports` builds with random weights and ports both ways (shared/tools/hf_ports.py).

Each dict is the published file's architecture, token and generation fields as the model's hub page gives them
(Helsinki-NLP/opus-mt-en-de, facebook/bart-base, facebook/mbart-large-50, t5-small, google/flan-t5-small); left out
are the fields no model reads (`_name_or_path`, a local path of the uploader's; `id2label`/`label2id` and
`task_specific_params`, which only pipelines read). Plain data: numpy is not even needed.
"""

from __future__ import annotations

OPUS_MT_EN_DE = {  # Helsinki-NLP/opus-mt-en-de: MarianMTModel, published values
    "activation_dropout": 0.0, "activation_function": "swish", "add_bias_logits": False, "add_final_layer_norm": False,
    "architectures": ["MarianMTModel"], "attention_dropout": 0.0, "bad_words_ids": [[58100]], "bos_token_id": 0,
    "classif_dropout": 0.0, "classifier_dropout": 0.0, "d_model": 512, "decoder_attention_heads": 8,
    "decoder_ffn_dim": 2048, "decoder_layerdrop": 0.0, "decoder_layers": 6, "decoder_start_token_id": 58100,
    "decoder_vocab_size": 58101, "dropout": 0.1, "encoder_attention_heads": 8, "encoder_ffn_dim": 2048,
    "encoder_layerdrop": 0.0, "encoder_layers": 6, "eos_token_id": 0, "forced_eos_token_id": 0, "init_std": 0.02,
    "is_encoder_decoder": True, "max_length": 512, "max_position_embeddings": 512, "model_type": "marian",
    "normalize_before": False, "normalize_embedding": False, "num_beams": 4, "num_hidden_layers": 6,
    "pad_token_id": 58100, "scale_embedding": True, "share_encoder_decoder_embeddings": True,
    "static_position_embeddings": True, "use_cache": True, "vocab_size": 58101,
}  # fmt: skip

BART_BASE = {  # facebook/bart-base: BartModel's checkpoint (BartForConditionalGeneration loads it), published values
    "activation_dropout": 0.1, "activation_function": "gelu", "add_bias_logits": False, "add_final_layer_norm": False,
    "architectures": ["BartModel"], "attention_dropout": 0.1, "bos_token_id": 0, "classif_dropout": 0.1,
    "classifier_dropout": 0.0, "d_model": 768, "decoder_attention_heads": 12, "decoder_ffn_dim": 3072,
    "decoder_layerdrop": 0.0, "decoder_layers": 6, "decoder_start_token_id": 2, "dropout": 0.1, "early_stopping": True,
    "encoder_attention_heads": 12, "encoder_ffn_dim": 3072, "encoder_layerdrop": 0.0, "encoder_layers": 6,
    "eos_token_id": 2, "forced_bos_token_id": 0, "forced_eos_token_id": 2, "init_std": 0.02, "is_encoder_decoder": True,
    "max_position_embeddings": 1024, "model_type": "bart", "no_repeat_ngram_size": 3, "normalize_before": False,
    "normalize_embedding": True, "num_beams": 4, "num_hidden_layers": 6, "pad_token_id": 1, "scale_embedding": False,
    "torch_dtype": "float32", "use_cache": True, "vocab_size": 50265,
}  # fmt: skip

MBART_LARGE_50 = {  # facebook/mbart-large-50: MBartForConditionalGeneration, pre-norm, published values
    "activation_dropout": 0.0, "activation_function": "gelu", "add_bias_logits": False, "add_final_layer_norm": True,
    "architectures": ["MBartForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 0,
    "classif_dropout": 0.0, "classifier_dropout": 0.0, "d_model": 1024, "decoder_attention_heads": 16,
    "decoder_ffn_dim": 4096, "decoder_layerdrop": 0.0, "decoder_layers": 12, "decoder_start_token_id": 2,
    "dropout": 0.1, "early_stopping": True, "encoder_attention_heads": 16, "encoder_ffn_dim": 4096,
    "encoder_layerdrop": 0.0, "encoder_layers": 12, "eos_token_id": 2, "forced_eos_token_id": 2, "init_std": 0.02,
    "is_encoder_decoder": True, "max_length": 200, "max_position_embeddings": 1024, "model_type": "mbart",
    "normalize_before": True, "normalize_embedding": True, "num_beams": 5, "num_hidden_layers": 12, "output_past": True,
    "pad_token_id": 1, "scale_embedding": True, "static_position_embeddings": False, "tokenizer_class": "MBart50Tokenizer",
    "use_cache": True, "vocab_size": 250054,
}  # fmt: skip

T5_SMALL = {  # t5-small (google-t5/t5-small): T5ForConditionalGeneration v1.0, relu, tied, published values
    "architectures": ["T5ForConditionalGeneration"], "d_ff": 2048, "d_kv": 64, "d_model": 512,
    "decoder_start_token_id": 0, "dropout_rate": 0.1, "eos_token_id": 1, "feed_forward_proj": "relu",
    "initializer_factor": 1.0, "is_encoder_decoder": True, "layer_norm_epsilon": 1e-06, "model_type": "t5",
    "n_positions": 512, "num_heads": 8, "num_layers": 6, "output_past": True, "pad_token_id": 0,
    "relative_attention_max_distance": 128, "relative_attention_num_buckets": 32, "vocab_size": 32128,
}  # fmt: skip

FLAN_T5_SMALL = {  # google/flan-t5-small: T5 v1.1 (gated-gelu, untied lm_head), published values
    "architectures": ["T5ForConditionalGeneration"], "d_ff": 1024, "d_kv": 64, "d_model": 512,
    "decoder_start_token_id": 0, "dense_act_fn": "gelu_new", "dropout_rate": 0.1, "eos_token_id": 1,
    "feed_forward_proj": "gated-gelu", "initializer_factor": 1.0, "is_encoder_decoder": True, "is_gated_act": True,
    "layer_norm_epsilon": 1e-06, "model_type": "t5", "n_positions": 512, "num_decoder_layers": 8, "num_heads": 6,
    "num_layers": 8, "output_past": True, "pad_token_id": 0, "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32, "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
    "vocab_size": 32128,
}  # fmt: skip

# name -> (the checkpoint whose config.json it is, the config): the order `rosetta hf-ports` measures them in
REAL_SIZES = {
    "opus-mt-en-de": ("Helsinki-NLP/opus-mt-en-de", OPUS_MT_EN_DE),
    "t5-small": ("t5-small", T5_SMALL),
    "flan-t5-small": ("google/flan-t5-small", FLAN_T5_SMALL),
    "bart-base": ("facebook/bart-base", BART_BASE),
    "mbart-large-50": ("facebook/mbart-large-50", MBART_LARGE_50),
}
