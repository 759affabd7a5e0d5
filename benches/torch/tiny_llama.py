#!/usr/bin/env python3
"""Write a tiny random Llama checkpoint (safetensors + a fast BPE tokenizer trained here) and a train.jsonl.

    tiny_llama.py OUT_DIR DATA.jsonl

hidden 64, 2 layers, 4 heads, 2 KV heads, intermediate 128; the tokenizer is a byte-level BPE of 512 tokens
trained with `tokenizers` on the texts the script writes, saved as PreTrainedTokenizerFast so AutoTokenizer loads
it. For the end-to-end CPU run of `optimizer resolve`'s training launch artifact (benches/torch/README.md).
"""
import json
import pathlib
import sys

# Enough text that the packed dataset holds a few sequences of the plan's length (the plans of this model ask
# 1024-4096 tokens) with a 512-token vocabulary.
SENTENCES = 4000
VOCAB = 512


def texts():
    words = ["the", "model", "plans", "memory", "for", "training", "on", "one", "GPU", "with", "adapters",
             "and", "a", "quantized", "base", "while", "the", "optimizer", "keeps", "its", "state"]
    for i in range(SENTENCES):
        n = 6 + i % 9
        yield " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(n)) + f" number {i}."


def main():
    out, data = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    lines = list(texts())
    with data.open("w") as f:
        for k in range(0, len(lines), 20):
            f.write(json.dumps({"text": " ".join(lines[k:k + 20])}) + "\n")

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<s>", "</s>", "<pad>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.save_pretrained(out)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, max_position_embeddings=4096,
                      bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    print(f"{out}: {sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())} parameters, vocab "
          f"{tok.get_vocab_size()}; {data}: {len(lines) // 20} lines")


if __name__ == "__main__":
    main()
