//! Hugging Face `config.json` (stub, replaced by the real parser).
