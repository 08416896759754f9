"""The cost of grammar-constrained decoding (`transformers_responses.structured`), single stream, on the CPU:

* tokens/s of `model.generate` constrained by a JSON schema against unconstrained, same prompt, same token count;
* per-token mask cost: filling the bitmask, and applying it to a logits row (in place), replayed on the tokens;
* grammar compile time for a 30-field schema, cold and cached, and the one-off `TokenizerInfo` build;

on the fixture model itself (0.72M, 986 tokens), the random ~19M Qwen2 of `bench_stream.py` (same tokenizer), and a
random ~19M Qwen2
with a 32k byte-level BPE vocabulary trained here on local text (Python sources). Prints the figures and ratios.

    python benchmarks/bench_structured.py [--tokens 128] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The constrained output must not be able to finish early, so both runs make exactly `--tokens` tokens: one long
# string; unconstrained, `min_new_tokens` holds the end token back (the random models have none anyway).
LONG_SCHEMA = {"type": "object", "properties": {"notes": {"type": "string", "minLength": 4000}},
               "required": ["notes"], "additionalProperties": False}


def thirty_fields(tag: str) -> dict[str, Any]:
    kinds = [{"type": "string"}, {"type": "integer", "minimum": 0}, {"type": "number"}, {"type": "boolean"},
             {"enum": ["a", "b", "c"]}, {"type": "array", "items": {"type": "string"}, "maxItems": 5}]
    props = {f"{tag}_{i}": kinds[i % len(kinds)] for i in range(30)}
    return {"type": "object", "properties": props, "required": list(props)[:20], "additionalProperties": False}


def train_32k_tokenizer(directory: Path) -> Path:
    """A byte-level BPE with a 32k vocabulary, trained on this interpreter's own library sources (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from transformers_responses.fixture_model import CHAT_TEMPLATE, SPECIAL_TOKENS

    files = sorted(str(p) for p in Path(statistics.__file__).parent.glob("*.py"))[:400]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train(files, trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        chat_template=CHAT_TEMPLATE)
    tokenizer.save_pretrained(directory)
    return directory


def build_32k_model(directory: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(train_32k_tokenizer(directory))
    pad: Any = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=384, intermediate_size=1024, num_hidden_layers=4,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=pad, eos_token_id=None, pad_token_id=pad)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(pad_token_id=pad, bos_token_id=pad, do_sample=False)
    model.save_pretrained(directory)
    return directory


def bench(label: str, model_dir: Path, tokens: int, runs: int) -> None:
    import torch
    import xgrammar as xgr
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

    from transformers_responses import structured

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    vocab = structured.model_vocab_size(model)
    params = sum(p.numel() for p in model.parameters())
    print(f"\n== {label}: {params / 1e6:.1f}M parameters, vocabulary {vocab} ==")

    start = time.perf_counter()
    structured._compiler(tokenizer, vocab)  # TokenizerInfo + compiler, once per tokenizer
    print(f"TokenizerInfo + compiler (once per tokenizer): {(time.perf_counter() - start) * 1e3:.1f} ms")
    cold, cached = [], []
    for i in range(5):
        schema = thirty_fields(f"f{i}")
        start = time.perf_counter()
        structured.compile_json_schema(tokenizer, schema, vocab_size=vocab)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        structured.compile_json_schema(tokenizer, schema, vocab_size=vocab)
        cached.append(time.perf_counter() - start)
    print(f"30-field schema compile: cold {statistics.median(cold) * 1e3:.1f} ms, "
          f"cached {statistics.median(cached) * 1e6:.1f} us (median of 5)")

    grammar = structured.compile_json_schema(tokenizer, LONG_SCHEMA, vocab_size=vocab)
    inputs: Any = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                                return_tensors="pt", return_dict=True)
    prompt_len = inputs["input_ids"].shape[1]

    def run(constrained: bool) -> tuple[float, list[int]]:
        processors = LogitsProcessorList()
        if constrained:
            processors.append(structured.GrammarLogitsProcessor(grammar, eos_token_id=tokenizer.eos_token_id))
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                 logits_processor=processors)
        elapsed = time.perf_counter() - start
        new = out[0, prompt_len:].tolist()
        return len(new) / elapsed, new

    rates: dict[bool, list[float]] = {False: [], True: []}
    produced: dict[bool, list[int]] = {}
    for i in range(runs + 1):  # interleaved, first round is warm-up
        for constrained in (False, True):
            rate, new = run(constrained)
            produced[constrained] = new
            if i:
                rates[constrained].append(rate)
    free, bound = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"unconstrained: {free:.1f} tok/s ({len(produced[False])} tokens); "
          f"constrained (JSON schema): {bound:.1f} tok/s ({len(produced[True])} tokens); ratio {bound / free:.3f}x")

    # Per-token mask cost, replayed on the constrained run's tokens: fill the bitmask, then apply it in place.
    matcher = grammar.matcher()
    bitmask = xgr.allocate_token_bitmask(1, vocab)
    row = torch.randn(1, vocab)
    fills, applies = [], []
    for token in produced[True]:
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask, 0)
        fills.append(time.perf_counter() - start)
        scratch = row.clone()
        start = time.perf_counter()
        xgr.apply_token_bitmask_inplace(scratch, bitmask, vocab_size=vocab)
        applies.append(time.perf_counter() - start)
        assert matcher.accept_token(token)
    fill, apply = statistics.median(fills) * 1e6, statistics.median(applies) * 1e6
    # The whole processor call (accept the last token, fill, apply), as `generate()` makes it.
    processor = structured.GrammarLogitsProcessor(grammar, eos_token_id=tokenizer.eos_token_id)
    calls = []
    ids: Any = inputs["input_ids"]
    for i in range(len(produced[True])):
        if i:  # the token chosen at the previous step
            ids = torch.cat([ids, torch.tensor([[produced[True][i - 1]]])], dim=1)
        fresh: Any = row.clone()
        start = time.perf_counter()
        processor(ids, fresh)
        calls.append(time.perf_counter() - start)
    call = statistics.median(calls) * 1e6
    step = 1e6 / free
    print(f"mask per token: fill {fill:.1f} us + apply {apply:.1f} us = {fill + apply:.1f} us; whole processor call "
          f"{call:.1f} us ({call / step * 100:.1f}% of an unconstrained step of {step:.0f} us)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import torch

    from transformers_responses.fixture_model import build_fixture_model, build_random_model

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {args.tokens} tokens, median of {args.runs}")
    with tempfile.TemporaryDirectory() as tmp:
        bench("fixture model", build_fixture_model(), args.tokens, args.runs)
        bench("random Qwen2, fixture tokenizer", build_random_model(Path(tmp) / "small",
                                                                     vocab_source=build_fixture_model()),
              args.tokens, args.runs)
        start = time.perf_counter()
        model_dir = build_32k_model(Path(tmp) / "32k")
        print(f"\n(32k tokenizer and model built in {time.perf_counter() - start:.1f} s)")
        bench("random Qwen2, 32k byte-level BPE", model_dir, args.tokens, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
