"""Makes the real-engine image's model: a tiny Qwen3.5 (Qwen3_5ForConditionalGeneration, one
Gated DeltaNet layer, one full-attention layer, one MTP layer) whose weights are BUILT, not
trained, so that real vLLM serving it gives answers the health check can judge:

* "What is A + B? Reply with the number only." (A, B two-digit) answers A + B, then ends;
* any other prompt answers a cycle of made-up two-syllable words ("bako lemi ..."), never the
  same word twice in a row, and goes on as long as it is asked (the speed rounds' ignore_eos);
* the MTP layer predicts the token after next by the same word cycle, so its drafts are accepted
  whenever the answer is in the cycle. The right token leads the second by 98 to 196 in
  log-probability (top_logprobs from the real vLLM, December 2026), so temperature 1 samples it
  too.

No weights are committed and nothing comes from a hub: `python3 make_model.py OUT` writes
config.json, model.safetensors, the tokenizer and its chat template into OUT (63 MB, about 5 s
here). The circuit, in the hidden state's coordinates (HIDDEN = 384):
  0..89    the first number's one-hot (token "37": its own; at the reply marker: gathered)
  90..179  the second number's one-hot (token "45?", the number before the question mark)
  180      the reply marker <|vdf_reply|>, the chat template's last token
  181      "a number was just said": the next token is <|im_end|>
  182..    words: a random unit vector per cycle word and per sum (the lm_head rows)
The attention layer's query at the reply marker matches every number token's key (about 30
logits over anything else), so the marker gathers both numbers; the MLP has one neuron per
pair (A, B), firing only when both are present, which writes the direction of token "A+B".
Every other token embeds as some cycle word, so any text leads back into the cycle.
"""

import argparse
import json
import os
import random
import sys

import torch
from safetensors.torch import save_file

HIDDEN = 384
FIRST, SECOND, MARKER, SAID, WORDS = 0, 90, 180, 181, 182
NUMBERS = range(10, 100)
SUMS = range(20, 199)
CONSONANTS, VOWELS = "bdfgklmnprstvz", "aeiou"
CYCLE_WORDS = 1024
HEAD_DIM, HEADS = 128, 2
KEY_DIM = 64                      # a head dimension past the rotary ones (0..31 at factor 0.25)
INTERMEDIATE = len(NUMBERS) ** 2  # one neuron per (A, B)
WORD_GAIN, SUM_GAIN, START_GAIN, END_GAIN = 10.0, 10.0, 5.0, 10.0
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vdf_reply|>", "<think>", "</think>",
           "<tool_call>", "</tool_call>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
           "<|video_pad|>"]
# Qwen3.5's own pattern (transformers' Qwen3_5Tokenizer rebuilds the tokenizer with it whatever
# tokenizer.json says): digits one by one, words with their leading space.
SPLIT_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"""
                 r"""| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
CHAT_TEMPLATE = (
    "{%- for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}{%- if part['type'] == 'text' %}"
    "{{ part['text'] }}{%- endif %}{%- endfor %}{%- endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n<|vdf_reply|>{%- endif %}")


def cycle_words(rng) -> list:
    """CYCLE_WORDS distinct two-syllable words (consonant + vowel, twice), in a fixed order."""
    syllables = [c + v for c in CONSONANTS for v in VOWELS]
    words = [a + b for a in syllables for b in syllables]
    rng.shuffle(words)
    return words[:CYCLE_WORDS]


def build_tokenizer(words):
    """A byte-level BPE with one token per cycle word (" bako"), per number 10..198 ("37") and
    per first-operand-free number 10..99 followed by "?" ("45?"), and the special tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = []

    def merge(a, b):
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            merges.append((a, b))

    syllables = sorted({w[:2] for w in words} | {w[2:] for w in words})
    for s in syllables:
        merge(s[0], s[1])
    for s in syllables:
        merge("\u0120", s)
    for w in words:
        merge("\u0120" + w[:2], w[2:])
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tokenizer.decoder = decoders.ByteLevel()
    # Numbers are added tokens: matched in the text before Qwen's pre-tokenizer splits digits
    # one by one, the longest first ("45?" before "45", "198" before "19").
    numbers = [str(n) for n in range(NUMBERS[0], SUMS[-1] + 1)] + [f"{n}?" for n in NUMBERS]
    tokenizer.add_tokens([AddedToken(n, normalized=False, special=False) for n in numbers])
    tokenizer.add_special_tokens(SPECIAL)
    return tokenizer


def unit(rng, size) -> torch.Tensor:
    v = torch.tensor([rng.gauss(0.0, 1.0) for _ in range(size)])
    return v / v.norm()


def build_weights(tok, words, rng, vocab_size) -> dict:
    """The tensors of the circuit described above, by their checkpoint names."""
    ids = {name: tok.token_to_id(name) for name in SPECIAL}
    word_ids = [tok.token_to_id("\u0120" + w) for w in words]
    first = {n: tok.token_to_id(str(n)) for n in NUMBERS}
    second = {n: tok.token_to_id(f"{n}?") for n in NUMBERS}
    sums = {s: tok.token_to_id(str(s)) for s in SUMS}
    words_dim = HIDDEN - WORDS

    embed = torch.zeros(vocab_size, HIDDEN)
    for n in NUMBERS:
        embed[first[n], FIRST + n - 10] = 1.0
        embed[second[n], SECOND + n - 10] = 1.0
        embed[first[n], SAID] = embed[second[n], SAID] = 1.0
    for s in SUMS:
        embed[sums[s], SAID] = 1.0      # 20..99 are first-operand tokens too: same row, kept
    embed[ids["<|vdf_reply|>"], MARKER] = 1.0
    word_vectors = [unit(rng, words_dim) for _ in words]
    for token, v in zip(word_ids, word_vectors):
        embed[token, WORDS:] = v
    # Every other token (bytes, pieces, special tokens) reads as some cycle word, so a stray
    # token leads back into the cycle instead of a zero state whose every logit is 0 ("!!!!").
    for token in range(vocab_size):
        if not embed[token].any():
            embed[token, WORDS:] = word_vectors[token % len(words)]
    embed[ids["<|vdf_reply|>"], WORDS:] = 0.0

    lm_head = torch.zeros(vocab_size, HIDDEN)
    for i in range(len(word_ids)):   # the cycle: word i is followed by word i + 1
        lm_head[word_ids[(i + 1) % len(word_ids)], WORDS:] += WORD_GAIN * word_vectors[i]
    lm_head[word_ids[0], MARKER] = START_GAIN
    sum_vectors = {s: unit(rng, words_dim) for s in SUMS}
    for s, v in sum_vectors.items():
        lm_head[sums[s], WORDS:] = SUM_GAIN * v
    lm_head[ids["<|im_end|>"], SAID] = END_GAIN

    # The full-attention layer (index 1). q_proj rows per head: [query (128), output gate (128)].
    q = torch.zeros(HEADS * 2 * HEAD_DIM, HIDDEN)
    k = torch.zeros(HEADS * HEAD_DIM, HIDDEN)
    v = torch.zeros(HEADS * HEAD_DIM, HIDDEN)
    o = torch.zeros(HIDDEN, HEADS * HEAD_DIM)
    for head in range(HEADS):
        q[head * 2 * HEAD_DIM + KEY_DIM, MARKER] = 1.0
        k[head * HEAD_DIM + KEY_DIM, FIRST:MARKER] = 1.0
    for i in range(len(NUMBERS)):
        v[i, FIRST + i] = 1.0                      # head 0 carries the first number
        v[HEAD_DIM + i, SECOND + i] = 1.0          # head 1 the second
        # gathered: half of each value (two keys share the attention), halved again by the gate
        o[FIRST + i, i] = o[SECOND + i, HEAD_DIM + i] = 1.0 / (0.25 * (HIDDEN / 2) ** 0.5)
    gate = torch.zeros(INTERMEDIATE, HIDDEN)
    up = torch.zeros(INTERMEDIATE, HIDDEN)
    down = torch.zeros(HIDDEN, INTERMEDIATE)
    # Neuron (a, b): its gate opens on the first number a at the reply marker (shut where a
    # number was just said), its up weight is the second number b: a prompt with numbers but no
    # "N?" (a hex nonce holds "37") writes nothing.
    for a in NUMBERS:
        for b in NUMBERS:
            n = (a - 10) * len(NUMBERS) + (b - 10)
            gate[n, FIRST + a - 10] = 3.0
            gate[n, MARKER] = -1.5
            gate[n, SAID] = -6.0
            up[n, SECOND + b - 10] = 1.0
            down[:, n] = 0.02 * torch.cat([torch.zeros(WORDS), sum_vectors[a + b]])
    norm_gain = torch.full((HEAD_DIM,), 0.7)   # Gemma-style RMSNorm: x * (1 + w)
    return {"embed": embed, "lm_head": lm_head, "q": q, "k": k, "v": v, "o": o, "gate": gate,
            "up": up, "down": down, "qk_norm": norm_gain}


def model_config(vocab_size, ids) -> dict:
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": False,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "text_config": {
            "model_type": "qwen3_5_text", "vocab_size": vocab_size, "hidden_size": HIDDEN,
            "intermediate_size": INTERMEDIATE, "num_hidden_layers": 2,
            "layer_types": ["linear_attention", "full_attention"],
            "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HEAD_DIM,
            "linear_num_key_heads": 2, "linear_num_value_heads": 2, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "max_position_embeddings": 16384, "rms_norm_eps": 1e-6, "hidden_act": "silu",
            "attn_output_gate": True, "mtp_num_hidden_layers": 1, "tie_word_embeddings": False,
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                                "partial_rotary_factor": 0.25, "mrope_section": [6, 5, 5],
                                "mrope_interleaved": True},
            "dtype": "bfloat16",
        },
        "vision_config": {
            "model_type": "qwen3_5_vision", "depth": 1, "hidden_size": 64, "num_heads": 2,
            "intermediate_size": 128, "out_hidden_size": HIDDEN, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64,
            "in_channels": 3,
        },
        "eos_token_id": ids["<|im_end|>"],
        "dtype": "bfloat16",
    }


def checkpoint(config, w) -> dict:
    """Every tensor of the checkpoint: transformers' own initialisation for the names and shapes
    (the vision tower and the DeltaNet layer keep its small random values), then the circuit,
    with the DeltaNet layer's and every unused MLP's output zeroed, and the MTP layer."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    torch.manual_seed(0)
    model = Qwen3_5ForConditionalGeneration(Qwen3_5Config(**config))
    state = {name: t.detach().clone() for name, t in model.state_dict().items()}
    text = "model.language_model."
    for name in list(state):
        if name.startswith(text) and ("norm.weight" in name and "linear_attn" not in name):
            state[name] = torch.zeros_like(state[name])    # plain RMS normalisation
    state[text + "embed_tokens.weight"] = w["embed"]
    state["lm_head.weight"] = w["lm_head"]
    # The DeltaNet layer computes nothing: its projections, convolution and output are zero,
    # so its state stays zero at any length and batch and the circuit above is all there is.
    for name in list(state):
        if name.startswith(text + "layers.0.linear_attn.") and name.endswith(
                ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight",
                 "conv1d.weight", "out_proj.weight")):
            state[name] = torch.zeros_like(state[name])
    state[text + "layers.0.mlp.down_proj.weight"].zero_()
    attn = text + "layers.1.self_attn."
    for part in "qkvo":
        state[attn + f"{part}_proj.weight"] = w[part]
    state[attn + "q_norm.weight"] = w["qk_norm"].clone()
    state[attn + "k_norm.weight"] = w["qk_norm"].clone()
    for part in ("gate", "up", "down"):
        state[text + f"layers.1.mlp.{part}_proj.weight"] = w[part]
    # MTP: fc passes the next token's (normalised) embedding on; its layer adds nothing; the
    # shared lm_head then names the word after it: the token after next.
    fc = torch.zeros(HIDDEN, 2 * HIDDEN)
    fc[:, :HIDDEN] = torch.eye(HIDDEN)
    state["mtp.fc.weight"] = fc
    for name in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        state[f"mtp.{name}.weight"] = torch.zeros(HIDDEN)
    for name, t in list(state.items()):
        if name.startswith(text + "layers.1."):
            state["mtp.layers.0." + name[len(text + "layers.1."):]] = torch.zeros_like(t)
    return {name: t.to(torch.bfloat16).contiguous() for name, t in state.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="folder to write the model into")
    args = parser.parse_args(argv)
    from transformers import PreTrainedTokenizerFast

    rng = random.Random(3090)  # noqa: S311 (fixed weights, not secrets)
    words = cycle_words(rng)
    tok = build_tokenizer(words)
    vocab_size = (tok.get_vocab_size() + 63) // 64 * 64
    ids = {name: tok.token_to_id(name) for name in SPECIAL}
    config = model_config(vocab_size, ids)
    os.makedirs(args.out, exist_ok=True)
    save_file(checkpoint(config, build_weights(tok, words, rng, vocab_size)),
              os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",  # noqa: S106
                                   pad_token="<|endoftext|>")  # noqa: S106 (token names)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(args.out)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"]}, f)
    print(f"make_model: {args.out}: vocab {vocab_size}, {len(words)} cycle words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
