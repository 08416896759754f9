"""A tiny, real, scripted chat model: the fixture behind the end-to-end tests and `transformers responses demo`.

This module owns:

* `SCRIPT`: a dozen conversations (HF chat messages, optional tools and chat-template kwargs) with the exact
  assistant text a greedy decoder must produce for each;
* the chat template (Qwen2.5/Qwen3 style: `<|im_start|>`/`<|im_end|>`, Hermes `<tool_call>` blocks, `<think>`);
* `build_fixture_model()`: trains, once, a byte-level BPE tokenizer and a 0.72M-parameter, 3-layer Qwen2 causal LM
  on the CPU until every scripted prompt decodes exactly, and caches the result (atomically) for `from_pretrained`;
* `build_random_model()`: an untrained ~19M-parameter Qwen2 on the same tokenizer, for benchmarks;
* `verify()`: greedy-decodes every scripted prompt with a saved model and names those that differ.

Nothing heavy is imported at module import time: `torch`, `transformers` and `tokenizers` are imported inside the
functions, so a CLI can import this module for free.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    DEFAULT_CACHE_DIR: Path  # computed on access by `cache_dir()`, see `__getattr__`

__all__ = [
    "CHAT_TEMPLATE", "DEFAULT_CACHE_DIR", "FORMAT_VERSION", "HYPERPARAMETERS", "SCRIPT", "Scripted", "WEATHER_TOOL", "WEATHER_TOOL_HF",
    "build_fixture_model", "build_random_model", "build_tokenizer", "cache_dir", "encode", "fixture_path", "verify",
]

# Bump whenever the on-disk layout or the training recipe changes in a way the hash below would not see.
FORMAT_VERSION = 1

# ----- prompts and completions (tests import these instead of repeating literals) -----
GREETING = "Hi"
PIRATE_SYSTEM = "You are a pirate."
BRIEF_SYSTEM = "Be brief."
NAME_INTRO = "My name is Ada."
NAME_QUESTION = "What is my name?"
WEATHER_PARIS = "What is the weather in Paris?"
WEATHER_PARIS_TOKYO = "What is the weather in Paris and Tokyo?"
THINK_PROMPT = "What is 2+2? Think first."
JSON_CAT = "Describe a cat as JSON."
COUNT_PROMPT = "Count from 1 to 40."
PARIS_RESULT = '{"temperature": 22, "condition": "sunny"}'
TOKYO_RESULT = '{"temperature": 18, "condition": "rainy"}'

GREETING_REPLY = "Hello! How can I help you today?"
PIRATE_REPLY = "Ahoy, matey! What be ye needin'?"
BRIEF_REPLY = "Hi!"
NAME_INTRO_REPLY = "Nice to meet you, Ada!"
NAME_RECALL_REPLY = "Your name is Ada."
PARIS_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOKYO_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>'
PARALLEL_CALLS = PARIS_CALL + "\n" + TOKYO_CALL
WEATHER_ANSWER = "It is sunny and 22 degrees in Paris."
WEATHER_PARALLEL_ANSWER = "Paris is sunny and 22 degrees; Tokyo is rainy and 18 degrees."
THINK_REASONING = "2 plus 2 makes 4."
THINK_ANSWER = "The answer is 4."
THINK_REPLY = f"<think>\n{THINK_REASONING}\n</think>\n\n{THINK_ANSWER}"
JSON_CAT_REPLY = '{"animal": "cat", "legs": 4, "sound": "meow"}'
COUNT_REPLY = ", ".join(str(i) for i in range(1, 41))

_WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
# The Responses API form (what a client sends) ...
WEATHER_TOOL: dict[str, Any] = {"type": "function", "name": "get_weather",
                                "description": "Get the current weather in a city.",
                                "parameters": _WEATHER_PARAMETERS, "strict": True}
# ... and the form handed to `apply_chat_template` (key order matters: it is rendered with `tojson`).
WEATHER_TOOL_HF: dict[str, Any] = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.", "parameters": _WEATHER_PARAMETERS}}

END_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<tool_response>", "</tool_response>")


@dataclass(frozen=True)
class Scripted:
    """One scripted conversation: the prompt (`messages`, `tools`, `chat_template_kwargs`) and the exact reply.

    `completion` excludes the end token (`<|im_end|>`), which the model emits right after it. Instances hold dicts,
    so they compare by value but are not hashable.
    """

    name: str
    messages: tuple[dict[str, Any], ...]
    completion: str
    tools: tuple[dict[str, Any], ...] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def template_kwargs(self) -> dict[str, Any]:
        """The keyword arguments for `tokenizer.apply_chat_template` (besides `add_generation_prompt`)."""
        return {"tools": list(self.tools) if self.tools else None, **(self.chat_template_kwargs or {})}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def _calls(*cities: str) -> dict[str, Any]:  # the ids are not rendered: any call_id works at serve time
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
        for i, city in enumerate(cities, 1)]}


def _result(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


_TOOLS = (WEATHER_TOOL_HF,)
SCRIPT: tuple[Scripted, ...] = (
    Scripted("greeting", (_user(GREETING),), GREETING_REPLY),
    Scripted("pirate", (_system(PIRATE_SYSTEM), _user(GREETING)), PIRATE_REPLY),
    Scripted("greeting_dev", (_system(BRIEF_SYSTEM), _user(GREETING)), BRIEF_REPLY),
    Scripted("name_intro", (_user(NAME_INTRO),), NAME_INTRO_REPLY),
    Scripted("name_recall", (_user(NAME_INTRO), {"role": "assistant", "content": NAME_INTRO_REPLY},
                             _user(NAME_QUESTION)), NAME_RECALL_REPLY),
    Scripted("weather_call", (_user(WEATHER_PARIS),), PARIS_CALL, _TOOLS),
    Scripted("weather_parallel", (_user(WEATHER_PARIS_TOKYO),), PARALLEL_CALLS, _TOOLS),
    Scripted("weather_answer", (_user(WEATHER_PARIS), _calls("Paris"), _result("call_1", PARIS_RESULT)),
             WEATHER_ANSWER, _TOOLS),
    Scripted("weather_parallel_answer", (_user(WEATHER_PARIS_TOKYO), _calls("Paris", "Tokyo"),
                                         _result("call_1", PARIS_RESULT), _result("call_2", TOKYO_RESULT)),
             WEATHER_PARALLEL_ANSWER, _TOOLS),
    Scripted("think", (_user(THINK_PROMPT),), THINK_REPLY),
    Scripted("think_off", (_user(THINK_PROMPT),), THINK_ANSWER, None, {"enable_thinking": False}),
    Scripted("json_cat", (_user(JSON_CAT),), JSON_CAT_REPLY),
    Scripted("count", (_user(COUNT_PROMPT),), COUNT_REPLY),
    Scripted("weather_pirate", (_system(PIRATE_SYSTEM), _user(WEATHER_PARIS)), PARIS_CALL, _TOOLS),
)

# Every line starts with a `-` tag, so the template's own newlines never reach the output.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with \
function signatures within <tools></tools> XML tags:\\n<tools>" }}
{%- for tool in tools %}{{- "\\n" }}{{- tool | tojson }}{%- endfor %}
{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\
\\n</tool_call><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
  {%- if message.role == 'system' and loop.first %}
  {%- elif message.role == 'user' or message.role == 'system' %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
  {%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant\\n' }}
    {%- if message.reasoning_content %}{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' }}\
{%- endif %}
    {%- if message.content %}{{- message.content }}{%- endif %}
    {%- for tc in message.tool_calls or [] %}
      {%- if (loop.first and message.content) or (not loop.first) %}{{- '\\n' }}{%- endif %}
      {%- set f = tc.function if tc.function else tc %}
      {{- '<tool_call>\\n{"name": "' + f.name + '", "arguments": ' + (f.arguments if f.arguments is string \
else f.arguments | tojson) + '}\\n</tool_call>' }}
    {%- endfor %}
{{- '<|im_end|>\\n' }}
  {%- elif message.role == 'tool' %}
    {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
    {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
  {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}
  {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}
"""

# Extra text for the tokenizer only, so that ordinary user text splits into sensible pieces.
_EXTRA_TEXT = """\
The quick brown fox jumps over the lazy dog. Hello, world! How are you doing today? I am fine, thank you.
Please tell me a short story about a robot who learns to paint. Once upon a time, in a small town by the sea,
there lived an old man and his dog. What time is it? Where do you live? Can you help me write an email to my team?
Summarize the following text in one sentence. Translate this into French. Explain how a transformer model works.
The weather today is cloudy with a chance of rain in the afternoon. Tomorrow will be warm and sunny.
Yes, no, maybe, always, never, sometimes. One, two, three, four, five, six, seven, eight, nine, ten.
Monday Tuesday Wednesday Thursday Friday Saturday Sunday. January February March April May June July.
This is a test of the system. The answer is not known. Let me think about it step by step before answering.
She said that they would come back later, but nobody knew when. We should go to the market and buy some bread.
Python is a programming language. The function returns a list of strings. Write a program that prints numbers.
{"id": 1, "name": "Alice", "email": "alice@example.com", "active": true, "tags": ["admin", "user"], "score": 9.5}
{"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}, "required": []}
[{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}, null, false, 0, -1, 3.14]
{"city": "London", "country": "UK", "temperature": 15, "unit": "celsius", "forecast": ["cloudy", "windy"]}
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 20 50 99 100 256 1000 2024. Symbols: ( ) [ ] { } < > + - * / = % & | ^ ~ ! ?
"""

# The training recipe; any change here changes the cache key.
HYPERPARAMETERS: dict[str, Any] = {
    "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048,
    "lr": 3e-3, "beta2": 0.95, "warmup_steps": 20, "decay_steps": 300, "max_steps": 1000, "min_margin": 2.0, "seed": 0,
    "bucket_slack": 0.75, "min_shared_prefix": 32, "threads": 1, "max_seconds": 900,
}


def cache_dir() -> Path:
    """The root of the on-disk cache: `$TRANSFORMERS_RESPONSES_CACHE`, else `~/.cache/transformers_responses`."""
    return Path(os.environ.get("TRANSFORMERS_RESPONSES_CACHE", "~/.cache/transformers_responses")).expanduser()


def __getattr__(name: str) -> Any:
    # `DEFAULT_CACHE_DIR` is read from the environment when it is used, not when this module is imported.
    if name == "DEFAULT_CACHE_DIR":
        return cache_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextmanager
def _quiet() -> Iterator[None]:
    """Silence `transformers`' own progress bars (shard writing, weight loading) for the duration."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


@contextmanager
def _threads(count: int) -> Iterator[None]:
    """Run torch on `count` intra-op threads for the duration. A model this small gains little from threads, and
    OpenMP's spinning workers slow it ten-fold once another process competes for the cores (a test server)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _fingerprint() -> str:
    """A short hash of everything the trained weights depend on (read from metadata: imports nothing heavy)."""
    from importlib.metadata import version

    def major_minor(package: str) -> str:
        return ".".join(version(package).split("+")[0].split(".")[:2])

    payload = json.dumps({
        "format": FORMAT_VERSION, "template": CHAT_TEMPLATE, "extra": _EXTRA_TEXT, "hparams": HYPERPARAMETERS,
        "script": [[s.name, s.messages, s.completion, s.tools, s.chat_template_kwargs] for s in SCRIPT],
        "versions": [major_minor(p) for p in ("torch", "transformers", "tokenizers")],
        "code": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),  # any edit of this module retrains
    }, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def fixture_path(directory: Path | None = None) -> Path:
    """Where `build_fixture_model(directory)` puts (or finds) the model; nothing is built."""
    return Path(directory if directory is not None else cache_dir()) / f"fixture-qwen2-{_fingerprint()}"


def encode(tokenizer: PreTrainedTokenizerBase, item: Scripted) -> tuple[list[int], list[int]]:
    """(prompt ids, as `transformers serve` computes them; target ids: the completion then `<|im_end|>`)."""
    rendered = tokenizer.apply_chat_template(
        list(item.messages), add_generation_prompt=True, tokenize=True, return_dict=True, **item.template_kwargs())
    prompt = list(rendered["input_ids"])
    target = tokenizer(item.completion + END_TOKEN, add_special_tokens=False)["input_ids"]
    return prompt, list(target)


def build_tokenizer() -> PreTrainedTokenizerBase:
    """Train the byte-level BPE tokenizer (deterministic, about a second) and wrap it as a `Qwen2Tokenizer`.

    It uses exactly Qwen2's pipeline (NFC, Qwen's split regex with single digits, byte-level), because that is what
    `AutoTokenizer` rebuilds on load for a `qwen2` checkpoint whatever `tokenizer.json` says.
    """
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    core.decoder = decoders.ByteLevel()
    # Render every scripted conversation through the real template (with a throwaway wrapper) for the corpus.
    probe = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.BPE()), chat_template=CHAT_TEMPLATE)
    corpus = [_EXTRA_TEXT]
    for item in SCRIPT:
        convo = [*item.messages, {"role": "assistant", "content": item.completion}]
        corpus.append(probe.apply_chat_template(convo, tokenize=False, **item.template_kwargs()))
    # Cut the texts at the control tokens, as encoding does, so that no merge spans or spells one.
    control = "|".join(re.escape(token) for token in (*SPECIAL_TOKENS, *ADDED_TOKENS))
    corpus = [piece for text in corpus for piece in re.split(control, text) if piece]
    trainer = trainers.BpeTrainer(
        vocab_size=HYPERPARAMETERS["vocab_size"], min_frequency=1, show_progress=False,
        special_tokens=[*SPECIAL_TOKENS, *ADDED_TOKENS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(corpus, trainer=trainer)
    bpe = json.loads(core.to_str())["model"]
    tokenizer = Qwen2Tokenizer(
        vocab=bpe["vocab"], merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in bpe["merges"]],
        eos_token=END_TOKEN, pad_token="<|endoftext|>", unk_token="<|endoftext|>", chat_template=CHAT_TEMPLATE,
        model_max_length=HYPERPARAMETERS["max_position_embeddings"], clean_up_tokenization_spaces=False)
    # They are in the vocabulary already (ids 0-8); this marks them as added tokens, special or not as in Qwen.
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]})
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in ADDED_TOKENS])
    return tokenizer


_SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads")


def _new_model(tokenizer: PreTrainedTokenizerBase, shape: dict[str, int], *, eos: bool) -> PreTrainedModel:
    """A freshly initialised (seeded) float32 Qwen2 with tied embeddings and a greedy generation config."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    pad_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    eos_ids = [tokenizer.convert_tokens_to_ids(END_TOKEN), pad_id] if eos else None
    config = Qwen2Config(
        vocab_size=len(tokenizer), max_position_embeddings=HYPERPARAMETERS["max_position_embeddings"], **shape,
        tie_word_embeddings=True, bos_token_id=pad_id, eos_token_id=eos_ids[0] if eos_ids else None,
        pad_token_id=pad_id, dtype="float32")
    with torch.random.fork_rng(devices=[]):  # seeded, without touching the caller's random state
        torch.manual_seed(HYPERPARAMETERS["seed"])
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids, pad_token_id=pad_id, bos_token_id=pad_id, do_sample=False)
    return model


def _failures(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Greedy-decode every scripted prompt with `generate`; the names of those not exact (empty: all good)."""
    import torch

    failing = []
    model.eval()
    with torch.no_grad(), _threads(HYPERPARAMETERS["threads"]):
        for item in SCRIPT:
            prompt, target = encode(tokenizer, item)
            ids = torch.tensor([prompt], device=model.device)
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=len(target) + 5,
                                 do_sample=False)
            if out[0, len(prompt):].tolist() != target:
                failing.append(item.name)
    return failing


def verify(directory: Path) -> list[str]:
    """Load the model saved in `directory` and return the names of the scripted items it gets wrong."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _quiet():
        tokenizer = AutoTokenizer.from_pretrained(directory)
        model = AutoModelForCausalLM.from_pretrained(directory, dtype="float32")
    return _failures(model, tokenizer)


def _plan(encoded: list[tuple[list[int], list[int]]], slack: float, min_shared: int) -> list[tuple[list[int], int]]:
    """Split the batch into units of work: (item indices, length of the prompt prefix they all share).

    Prompts sharing a long prefix (the tools system block) become one unit whose prefix is computed once; the rest
    go into buckets of similar length (shared length 0), to waste little compute on padding. The shared part always
    stops before the last prompt token, whose position predicts the first target token.
    """
    def common(a: list[int], b: list[int]) -> int:
        return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    units: list[tuple[list[int], int]] = []
    singles: list[int] = []
    order = sorted(range(len(encoded)), key=lambda i: encoded[i][0])  # lexicographic: shared prefixes adjacent
    group, shared = [order[0]], len(encoded[order[0]][0]) - 1
    for i in [*order[1:], None]:
        if i is not None:
            k = min(shared, common(encoded[group[0]][0], encoded[i][0]), len(encoded[i][0]) - 1)
            if k >= min_shared:
                group, shared = [*group, i], k
                continue
        if len(group) > 1:
            units.append((group, shared))
        else:
            singles.extend(group)
        if i is not None:
            group, shared = [i], len(encoded[i][0]) - 1
    length = {i: len(encoded[i][0]) + len(encoded[i][1]) for i in singles}
    buckets: list[list[int]] = []
    for i in sorted(singles, key=lambda i: -length[i]):
        if buckets and length[i] >= slack * length[buckets[-1][0]]:
            buckets[-1].append(i)
        else:
            buckets.append([i])
    return units + [(bucket, 0) for bucket in buckets]


def _train(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, progress: bool,
           check: Callable[[], list[str]] | None = None, hp: dict[str, Any] | None = None) -> int:
    """Full-batch Adam on the completions only, until each is the greedy choice by `min_margin` logits everywhere.

    Then `check()` (default: greedy `generate` in memory) must return no failures, or training goes on. Returns the
    number of optimizer steps taken; raises RuntimeError naming the items still wrong at the cap.
    """
    import math

    import torch
    from tqdm.auto import tqdm
    from transformers import DynamicCache

    hp = {**HYPERPARAMETERS, **(hp or {})}
    encoded = [encode(tokenizer, item) for item in SCRIPT]
    total = sum(len(target) for _, target in encoded)
    units = []  # (owners, shared prefix ids, suffix ids, where the targets are, the targets); right padded
    for group, shared in _plan(encoded, hp["bucket_slack"], hp["min_shared_prefix"]):
        width = max(len(encoded[i][0]) + len(encoded[i][1]) for i in group) - shared
        ids = torch.full((len(group), width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((len(group), width), -100, dtype=torch.long)
        for row, i in enumerate(group):
            prompt, target = encoded[i]
            ids[row, : len(prompt) + len(target) - shared] = torch.tensor((prompt + target)[shared:])
            labels[row, len(prompt) - shared: len(prompt) + len(target) - shared] = torch.tensor(target)
        where = labels[:, 1:] != -100  # position t predicts token t + 1
        rows = torch.arange(len(group)).unsqueeze(1).expand_as(where)[where]
        prefix = torch.tensor([encoded[group[0]][0][:shared]]) if shared else None
        units.append((torch.tensor(group)[rows], prefix, ids, where, labels[:, 1:][where]))

    def hidden_states(prefix: Any, ids: Any) -> Any:
        if prefix is None:
            return model.model(input_ids=ids, use_cache=False).last_hidden_state
        cache = DynamicCache(config=model.config)
        model.model(input_ids=prefix, cache=cache, use_cache=True)
        cache.batch_repeat_interleave(ids.shape[0])
        return model.model(input_ids=ids, cache=cache, use_cache=True).last_hidden_state

    optimizer = torch.optim.Adam(model.parameters(), lr=hp["lr"], betas=(0.9, hp["beta2"]))

    def lr_at(step: int) -> float:
        if step < hp["warmup_steps"]:
            return (step + 1) / hp["warmup_steps"]
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / hp["decay_steps"])))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    model.train()
    started = time.monotonic()
    failing: list[str] = [item.name for item in SCRIPT]
    with tqdm(total=hp["max_steps"], desc="Training the demo model", disable=not progress, unit="step") as bar, \
            _threads(hp["threads"]):
        for step in range(hp["max_steps"]):
            optimizer.zero_grad(set_to_none=True)
            low = torch.zeros(len(SCRIPT), dtype=torch.long)
            loss_sum = 0.0
            for owners, prefix, ids, where, wanted in units:
                logits = model.lm_head(hidden_states(prefix, ids)[:, :-1][where])
                loss = torch.nn.functional.cross_entropy(logits, wanted, reduction="sum") / total
                loss.backward()
                loss_sum += loss.item()
                with torch.no_grad():  # the check is free: the logits of the parameters as they stand
                    right = logits.gather(1, wanted[:, None]).squeeze(1)
                    margin = right - logits.scatter(1, wanted[:, None], float("-inf")).max(1).values
                    low.index_add_(0, owners, (margin < hp["min_margin"]).long())
            failing = [item.name for item, n in zip(SCRIPT, low.tolist()) if n]
            if not failing:
                failing = check() if check is not None else _failures(model, tokenizer)
                if not failing:
                    return step
                model.train()
            if time.monotonic() - started > hp["max_seconds"]:
                break
            optimizer.step()
            scheduler.step()
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum:.4f}", failing=len(failing))
    raise RuntimeError(f"the fixture model did not learn its script; still wrong: {', '.join(failing) or '?'}")


def _is_complete(path: Path) -> bool:
    return (path / ".complete").is_file()


def build_fixture_model(directory: Path | None = None, *, progress: bool = False) -> Path:
    """Return the directory of the trained fixture model, training it first (~30-40 s on 2 cores) if not cached.

    `directory` is the cache root (default: `cache_dir()`); the model lives in a subdirectory named after a hash of
    the script, template, hyper-parameters, `FORMAT_VERSION` and torch/transformers major.minor versions. It is built
    in a temporary sibling and renamed into place, so concurrent builders never see a partial model (the loser of
    the race discards its copy and returns the winner's). `progress=True` shows a tqdm bar; otherwise silent.
    """
    final = fixture_path(directory)
    if _is_complete(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        from transformers import AutoTokenizer

        started = time.monotonic()
        with _quiet():  # train on the tokenizer exactly as `transformers serve` will load it
            build_tokenizer().save_pretrained(tmp)
            tokenizer = AutoTokenizer.from_pretrained(tmp)
        model = _new_model(tokenizer, {key: HYPERPARAMETERS[key] for key in _SHAPE_KEYS}, eos=True)

        def saved_and_verified() -> list[str]:  # greedy `generate` on the model loaded from disk, as serve does
            with _quiet():
                model.save_pretrained(tmp)
            return verify(tmp)

        steps = _train(model, tokenizer, progress, saved_and_verified)
        info = {"steps": steps, "seconds": round(time.monotonic() - started, 2), "format": FORMAT_VERSION,
                "parameters": sum(p.numel() for p in model.parameters()), "script": [s.name for s in SCRIPT]}
        (tmp / "fixture.json").write_text(json.dumps(info, indent=2) + "\n")
        for path in tmp.iterdir():  # mkdtemp and safetensors create private files; a cache is for everyone
            path.chmod(0o644)
        tmp.chmod(0o755)
        (tmp / ".complete").write_text("")
        try:
            os.rename(tmp, final)
        except OSError:  # another builder got there first: use its copy (or replace debris that isn't one)
            if not _is_complete(final):
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def build_random_model(directory: Path, *, hidden_size: int = 512, num_layers: int = 6,
                       intermediate_size: int = 1536, vocab_source: Path | None = None) -> Path:
    """Save an untrained Qwen2 (seed 0, float32) into `directory`, for benchmarks; returns `directory`.

    With the defaults it has 19,392,000 parameters (986-token vocabulary, tied embeddings, 8 heads of 64, 4 KV
    heads). The tokenizer is loaded from `vocab_source` (a fixture directory) if given, else trained afresh (about a
    second; the very one the fixture uses); the fixture model itself is never built here. Its generation config is
    greedy with no EOS, so `generate` always produces exactly `max_new_tokens` tokens.
    """
    directory = Path(directory)
    if vocab_source is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(vocab_source)
    else:
        tokenizer = build_tokenizer()
    heads = max(1, hidden_size // 64)
    kv_heads = heads // 2 if heads % 2 == 0 else heads
    shape = dict(zip(_SHAPE_KEYS, (hidden_size, intermediate_size, num_layers, heads, kv_heads)))
    model = _new_model(tokenizer, shape, eos=False)
    directory.mkdir(parents=True, exist_ok=True)
    with _quiet():
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
    return directory
