"""The scripted fixture model: it builds, it is cached, and it says exactly what its script says."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from transformers_responses import fixture_model as fm


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    # The default cache (honouring $TRANSFORMERS_RESPONSES_CACHE): cold once, then instant on reruns.
    return fm.build_fixture_model()


@pytest.fixture(scope="session")
def tokenizer(fixture_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(fixture_dir)


def _by_name(name: str) -> fm.Scripted:
    return next(item for item in fm.SCRIPT if item.name == name)


def _render(tokenizer, messages: list[dict], **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)


TOOLS_HEADER = (
    "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(fm.WEATHER_TOOL_HF)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}"
    "\n</tool_call><|im_end|>\n"
)


def test_import_is_cheap() -> None:
    code = (
        "import sys, transformers_responses.fixture_model as m; "
        "assert not {'torch', 'transformers', 'tokenizers'} & set(sys.modules), sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])


def test_script_shape() -> None:
    names = [item.name for item in fm.SCRIPT]
    assert len(names) == len(set(names))
    assert {"greeting", "greeting_dev", "pirate", "name_intro", "name_recall", "weather_call", "weather_parallel",
            "weather_answer", "weather_parallel_answer", "think", "think_off", "json_cat", "count",
            "weather_pirate"} == set(names)
    assert fm.WEATHER_TOOL["strict"] is True and "strict" not in fm.WEATHER_TOOL_HF["function"]
    assert list(fm.WEATHER_TOOL_HF["function"]) == ["name", "description", "parameters"]
    assert fm.COUNT_REPLY.startswith("1, 2, 3, 4, 5, ") and fm.COUNT_REPLY.endswith(", 39, 40")
    assert json.loads(fm.JSON_CAT_REPLY) == {"animal": "cat", "legs": 4, "sound": "meow"}


def test_every_scripted_item_decodes_exactly(fixture_dir: Path) -> None:
    assert fm.verify(fixture_dir) == []


def test_layout_and_generation_config(fixture_dir: Path, tokenizer) -> None:
    from transformers import AutoConfig, AutoProcessor, GenerationConfig

    assert (fixture_dir / ".complete").is_file()
    assert fixture_dir.parent == fm.cache_dir() == fm.DEFAULT_CACHE_DIR
    config = AutoConfig.from_pretrained(fixture_dir)
    assert config.model_type == "qwen2" and config.tie_word_embeddings and config.vocab_size == len(tokenizer)
    generation = GenerationConfig.from_pretrained(fixture_dir)
    end, pad = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert generation.eos_token_id == [end, pad] and generation.pad_token_id == pad
    assert generation.do_sample is False
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    # What `transformers serve` loads.
    processor = AutoProcessor.from_pretrained(fixture_dir)
    assert processor.chat_template == tokenizer.chat_template == fm.CHAT_TEMPLATE


def test_tokens_special_or_not(tokenizer) -> None:
    for token in fm.SPECIAL_TOKENS + fm.ADDED_TOKENS:
        (token_id,) = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert tokenizer.convert_ids_to_tokens(token_id) == token
    decoded = tokenizer.decode(tokenizer("<think>x</think><|im_end|>")["input_ids"], skip_special_tokens=True)
    assert decoded == "<think>x</think>"  # like Qwen: only the chat markers are special


@pytest.mark.parametrize("text", [
    *(item.completion for item in fm.SCRIPT),
    "Hello, can you tell me a story about a dragon? Ünïcödé ✓ 日本語 🐍\n\n  indented\ttab",
    '{"a": [1, 2.5, null], "b": "x\\ny"}',
    " leading space and trailing space ",
])
def test_round_trip(tokenizer, text: str) -> None:
    from tokenizers.decoders import DecodeStream

    ids = tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=False) == text + "<|im_end|>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    stream = DecodeStream(skip_special_tokens=False)
    pieces = [stream.step(tokenizer.backend_tokenizer, i) for i in ids]
    assert "".join(p for p in pieces if p) == text + "<|im_end|>"


def test_template_plain_and_system(tokenizer) -> None:
    assert _render(tokenizer, [{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert _render(tokenizer, list(_by_name("pirate").messages)) == (
        "<|im_start|>system\nYou are a pirate.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    think_off = _by_name("think_off")
    assert _render(tokenizer, list(think_off.messages), **think_off.template_kwargs()).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert _render(tokenizer, list(think_off.messages), enable_thinking=True).endswith("<|im_start|>assistant\n")
    history = [{"role": "user", "content": "Q"},
               {"role": "assistant", "content": "A", "reasoning_content": "R"},
               {"role": "user", "content": "Q2"}]
    assert _render(tokenizer, history) == (
        "<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n"
        "<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n")


def test_template_tools(tokenizer) -> None:
    item = _by_name("weather_parallel_answer")
    assert _render(tokenizer, list(item.messages), **item.template_kwargs()) == (
        TOOLS_HEADER
        + "<|im_start|>user\nWhat is the weather in Paris and Tokyo?<|im_end|>\n<|im_start|>assistant\n"
        + fm.PARALLEL_CALLS + "<|im_end|>\n<|im_start|>user\n<tool_response>\n" + fm.PARIS_RESULT
        + "\n</tool_response>\n<tool_response>\n" + fm.TOKYO_RESULT + "\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    pirate = _by_name("weather_pirate")
    assert _render(tokenizer, list(pirate.messages), **pirate.template_kwargs()).startswith(
        "<|im_start|>system\nYou are a pirate.\n\n# Tools\n")
    # String arguments are used verbatim; content before calls is separated by a newline.
    mixed = [{"role": "user", "content": "Q"},
             {"role": "assistant", "content": "Sure.",
              "tool_calls": [{"name": "f", "arguments": '{"x":1}'}]}]
    assert _render(tokenizer, mixed).endswith(
        'assistant\nSure.\n<tool_call>\n{"name": "f", "arguments": {"x":1}}\n</tool_call><|im_end|>\n'
        "<|im_start|>assistant\n")


def test_prompt_ids_are_what_serve_computes(tokenizer) -> None:
    # Generation sees the prompt ids then the generated ids: the training pairs must be exactly that.
    for item in fm.SCRIPT:
        prompt, target = fm.encode(tokenizer, item)
        served = tokenizer.apply_chat_template(
            list(item.messages), add_generation_prompt=True, return_tensors="pt", return_dict=True,
            tokenize=True, **item.template_kwargs())["input_ids"][0].tolist()
        assert served == prompt
        assert tokenizer.decode(target) == item.completion + "<|im_end|>"
    assert len(fm.encode(tokenizer, _by_name("count"))[1]) >= 60


def test_cache_hit_is_fast(fixture_dir: Path) -> None:
    started = time.monotonic()
    assert fm.build_fixture_model(progress=True) == fixture_dir
    assert time.monotonic() - started < 2.0
    assert fm.fixture_path() == fixture_dir


def test_cache_hit_imports_nothing_heavy(fixture_dir: Path) -> None:
    code = (
        "import sys; from transformers_responses.fixture_model import build_fixture_model as b; print(b()); "
        "assert not {'torch', 'transformers'} & set(sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).parents[1])
    assert out.stdout.strip() == str(fixture_dir) and not out.stderr


def test_cache_root_follows_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRANSFORMERS_RESPONSES_CACHE", str(tmp_path / "x"))
    assert fm.cache_dir() == fm.DEFAULT_CACHE_DIR == tmp_path / "x"
    assert fm.fixture_path().parent == tmp_path / "x"
    assert fm.fixture_path(tmp_path / "y").parent == tmp_path / "y"


def test_random_model(tmp_path: Path, fixture_dir: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = fm.build_random_model(tmp_path / "random", vocab_source=fixture_dir)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    count = sum(p.numel() for p in model.parameters())
    assert 15_000_000 <= count <= 25_000_000, count
    assert model.generation_config.eos_token_id is None and model.generation_config.do_sample is False
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**prompt, max_new_tokens=24)
    assert out.shape[-1] - prompt["input_ids"].shape[-1] == 24


def test_random_model_trains_its_own_tokenizer(tmp_path: Path, tokenizer) -> None:
    from transformers import AutoConfig, AutoTokenizer

    path = fm.build_random_model(tmp_path / "small", hidden_size=64, num_layers=1, intermediate_size=128)
    assert AutoTokenizer.from_pretrained(path).get_vocab() == tokenizer.get_vocab()  # the tokenizer is deterministic
    assert AutoConfig.from_pretrained(path).num_hidden_layers == 1
