"""Shapes added by the lead while testing the generator."""
SPECS = [
    dict(
        id="llama-3.2-1b",
        arch="llama",
        name="Llama-3.2-1B-Instruct",
        source="https://huggingface.co/meta-llama/Llama-3.2-1B-Instruct/blob/main/config.json",
        n_vocab=128256,
        n_ctx_train=131072,
        metadata=[
            ("llama.block_count", "UINT32", 16),
            ("llama.context_length", "UINT32", 131072),
            ("llama.embedding_length", "UINT32", 2048),
            ("llama.feed_forward_length", "UINT32", 8192),
            ("llama.attention.head_count", "UINT32", 32),
            ("llama.attention.head_count_kv", "UINT32", 8),
            ("llama.rope.freq_base", "FLOAT32", 500000.0),
            ("llama.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("llama.rope.dimension_count", "UINT32", 64),
            ("llama.vocab_size", "UINT32", 128256),
        ],
        note="tied output: no output.weight in the file",
    ),
]
