"""Objects a jitted call creates and its caller keeps, and writes into lists reachable from the arguments
(:mod:`thunder_ext.python_state.object_state`).

A growing cache appends per-layer objects to a list inside the call, and later calls read and rebind their tensors:
each call must leave the caller's cache as eager does — real tensors, never the trace's proxies — and a cache with a
different number of layers must not reuse a compilation traced for another (``len(cache.layers)`` is pinned in
the prologue). A module built inside ``forward`` (a loss) simply runs. Each case compares with eager on identical
copies, over several calls (first compilations and cache hits), on the torch executor, the default executors and
torch.compile (both fusion types; where a test runs several cases, one per case, alternating). Stock
``thunder.jit`` is recorded as the contrast: it leaves proxies in the caller's list.
"""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder.core.proxies import Proxy  # noqa: E402
from thunder_ext.python_state.object_state import CreatedObjectError  # noqa: E402
from thunder_ext.python_state.tensor_attributes import OpaqueReadError, TensorDeepcopyError  # noqa: E402

from executor_configs import CALLS, CONFIGS, PARAMS, per_case  # noqa: E402


class Layer:
    """One layer of a cache: a tensor attribute set when created, rebound on later calls. (A number attribute
    rebound too would be pinned by the prologue at its value when the call starts — Thunder unpacks every entry of
    a ``__dict__`` it proxies — one more compilation per value.)"""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


class ObjectCache:
    """``DynamicCache``'s pattern: a list of layer objects appended inside the call."""

    def __init__(self) -> None:
        self.layers: list[Layer] = []

    def update(self, index: int, keys: torch.Tensor) -> torch.Tensor:
        if len(self.layers) <= index:
            self.layers.append(Layer(keys))
        else:
            layer = self.layers[index]
            layer.keys = layer.keys * 0.5 + keys
        return self.layers[index].keys

    def contents(self) -> list[object]:
        return [layer.keys for layer in self.layers]


class TensorListCache:
    """A list of tensors: appended on the first call, replaced item by item later."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []

    def update(self, index: int, keys: torch.Tensor) -> torch.Tensor:
        if len(self.keys) <= index:
            self.keys.append(keys)
        else:
            self.keys[index] = self.keys[index] * 0.5 + keys
        return self.keys[index]

    def contents(self) -> list[object]:
        return list(self.keys)


class DictOfListsCache:
    """A dict of lists: the first call stores a new list under each name, later calls write into it."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[torch.Tensor]] = {}

    def update(self, index: int, keys: torch.Tensor) -> torch.Tensor:
        name = f"layer{index}"
        if name not in self.by_name:
            self.by_name[name] = [keys]
        else:
            self.by_name[name][0] = self.by_name[name][0] * 0.5 + keys
        return self.by_name[name][0]

    def contents(self) -> dict[str, list[torch.Tensor]]:
        return {name: list(items) for name, items in self.by_name.items()}


CACHES = {"objects": ObjectCache, "tensor-list": TensorListCache, "dict-of-lists": DictOfListsCache}


def step(x: torch.Tensor, cache: object) -> torch.Tensor:
    a = cache.update(0, x * 2)
    b = cache.update(1, x.sin())
    return (a * b).sum()


def _no_proxies(value: object) -> None:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for item in value:
            _no_proxies(item)
    assert not isinstance(value, Proxy), "a proxy was left in the caller's state"


def _run(fn, cache_type, calls: int = 3):
    cache, results = cache_type(), []
    for i in range(calls):
        results.append(fn(torch.arange(3.0) + i, cache))
        _no_proxies(cache.contents())
    return results, cache.contents()


@pytest.mark.parametrize("cache_type,config", per_case(list(CACHES.values()), list(CACHES)))
def test_a_cache_filled_inside_the_call_matches_eager(cache_type, config):
    options = CONFIGS[config]
    """First call: layers created and appended (length 0 pinned); later calls: the same layers updated (length 2
    pinned) — two compilations, then cache hits."""
    jitted = thunder_ext.jit(step, **options)
    got = _run(jitted, cache_type)
    torch.testing.assert_close(got, _run(step, cache_type))
    assert thunder.cache_misses(jitted) == 2 and thunder.cache_hits(jitted) == 1


@pytest.mark.parametrize("cache_type", CACHES.values(), ids=CACHES.keys())
def test_a_cache_with_another_length_misses(cache_type):
    """An empty cache after a filled one (and back) runs the compilation traced for its length, not the last
    one's."""
    jitted = thunder_ext.jit(step, executors=["torch"])
    caches = {"jit": [cache_type(), cache_type()], "eager": [cache_type(), cache_type()]}
    for order in (0, 0, 1, 0, 1, 1):
        x = torch.arange(3.0) + order
        torch.testing.assert_close(jitted(x, caches["jit"][order]), step(x, caches["eager"][order]))
    for got, expected in zip(caches["jit"], caches["eager"], strict=True):
        torch.testing.assert_close(got.contents(), expected.contents())
    assert thunder.cache_misses(jitted) == 2


def test_stock_thunder_leaves_proxies_in_the_callers_list():
    """The contrast: stock Thunder appends to the caller's real list while tracing."""
    cache = ObjectCache()
    thunder.jit(step, executors=["torch"])(torch.arange(3.0), cache)
    assert all(isinstance(keys, Proxy) for keys in cache.contents())


def edit_list(x: torch.Tensor, items: list) -> torch.Tensor:
    items.insert(0, x + 1)
    last = items.pop()
    items.append(x * 3)
    items.extend([x, x * 4])
    items[1] = items[1] * 2
    items.remove(items[0])  # found by identity (eager compares earlier items with ==)
    del items[-1]
    items.reverse()
    return last + len(items)


def clear_list(x: torch.Tensor, items: list) -> torch.Tensor:
    total = items[0] + items[1]
    items.clear()
    items += [total]
    return total * 2


@pytest.mark.parametrize("fn,config", per_case([edit_list, clear_list], ["edit_list", "clear_list"]))
def test_list_methods_on_an_argument_match_eager(fn, config):
    """``insert``, ``pop``, ``append``, ``extend``, ``__setitem__``, ``remove``, ``__delitem__``, ``reverse``,
    ``clear``, ``+=``: the caller's list ends as eager's (the same length each call: one compilation)."""
    jitted = thunder_ext.jit(fn, **CONFIGS[config])
    for i in range(3):
        x = torch.arange(3.0) + i
        got_items, expected_items = [x * 5, x - 1], [x * 5, x - 1]
        torch.testing.assert_close(jitted(x, got_items), fn(x, expected_items))
        torch.testing.assert_close(got_items, expected_items)
        _no_proxies(got_items)
    assert thunder.cache_misses(jitted) == 1


def make_layer(x: torch.Tensor) -> tuple[torch.Tensor, Layer]:
    layer = Layer(x * 2)
    layer.updated = False
    layer.extra = [x + 1, {"scale": x.sum()}]
    layer.self_ref = layer
    return x + 1, layer


@pytest.mark.parametrize("config", PARAMS)
def test_an_object_made_in_the_call_and_returned_is_rebuilt(config):
    """Class and ``__new__``, then its fields as the call left them (a created list and dict inside, a reference
    to itself), with the run's tensors — a new object on every call, as in eager."""
    jitted = thunder_ext.jit(make_layer, **CONFIGS[config])
    seen = []
    for i in range(2):
        x = torch.arange(3.0) + i
        y, layer = jitted(x)
        _, expected = make_layer(x)
        assert type(layer) is Layer and layer.self_ref is layer and not layer.updated
        torch.testing.assert_close((y, layer.keys, layer.extra), (x + 1, expected.keys, expected.extra))
        seen.append(layer)
    assert seen[0] is not seen[1]


class Slotted:
    __slots__ = ("keys",)

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


def keep_slotted(x: torch.Tensor, items: list) -> torch.Tensor:
    items.append(Slotted(x * 2))
    return x + 1


def test_a_created_object_without_a_dict_is_a_typed_error():
    with pytest.raises(CreatedObjectError, match=r"argument\[1\]\[0\].*Slotted.*__slots__.*pass it in"):
        thunder_ext.jit(keep_slotted, executors=["torch"])(torch.arange(3.0), [])


class Settings:
    """A plain configuration object, no tensors inside (what a ``transformers`` forward deep-copies)."""

    def __init__(self) -> None:
        self.scale = 2
        self.options = {"shift": 1, "names": ["a"]}


class Holder:
    def __init__(self) -> None:
        self.settings = Settings()
        self.kept: Settings | None = None


def copy_settings(x: torch.Tensor, holder: Holder) -> torch.Tensor:
    deep = copy.deepcopy(holder.settings)
    deep.options["names"].append("b")
    deep.scale += 1
    shallow = copy.copy(holder.settings)
    shallow.scale = 5
    made = Settings.__new__(Settings)  # a factory's cls.__new__(cls), then read natively (vars)
    made.scale = 3
    holder.kept = deep
    return x * deep.scale + shallow.scale * len(deep.options["names"]) + vars(made)["scale"] + holder.settings.scale


def test_copies_and_cls_new_made_in_the_call_are_the_calls_objects():
    """``copy.deepcopy``/``copy.copy`` of a plain object and ``cls.__new__(cls)`` inside the call: the objects they
    make are the call's, their attributes set on them (the interpreter had written them into a copy of their
    ``__dict__`` as write-backs, once ``object.__new__`` was read as an attribute: a deep copy's iteration of a
    ``__dict__`` failed on its own mapping view); the caller's settings untouched, the kept copy eager's."""
    jitted = thunder_ext.jit(copy_settings, executors=["torch"])
    for i in range(2):
        x, eager_holder, holder = torch.arange(3.0) + i, Holder(), Holder()
        torch.testing.assert_close(jitted(x, holder), copy_settings(x, eager_holder))
        assert vars(holder.settings) == vars(eager_holder.settings) == vars(Settings())
        assert type(holder.kept) is Settings and vars(holder.kept) == vars(eager_holder.kept)
        assert holder.kept.options is not holder.settings.options
    assert thunder.cache_misses(jitted) == 1


class Box:
    def __init__(self, weight: torch.Tensor) -> None:
        self.weight, self.scale = weight, 2.0


class Kept:
    box: Box


def shifted_copy(box: Box, kept: Kept, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    moved = copy.copy(box)
    moved.weight = moved.weight + x
    kept.box = moved
    return moved.weight * moved.scale, box.weight


@pytest.mark.parametrize("config", PARAMS)
def test_a_shallow_copy_of_an_object_holding_a_tensor_reads_and_keeps_it_as_eager(config):
    """``copy.copy`` reaches an object's state through ``object.__reduce_ex__``: answered with the interpreter's
    own ``obj.__dict__`` (``python_state/reductions``), the tensor read from the copy has a path back to the
    original, the copy kept by the caller holds the run's tensors, the original is untouched — on cache hits too."""
    jitted = thunder_ext.jit(shifted_copy, **CONFIGS[config])
    for i in range(CALLS):
        box, eager_box = Box(torch.full((3,), float(i))), Box(torch.full((3,), float(i)))
        kept, eager_kept = Kept(), Kept()
        x = torch.arange(3.0)
        torch.testing.assert_close(jitted(box, kept, x), shifted_copy(eager_box, eager_kept, x))
        assert type(kept.box) is Box and kept.box is not box and kept.box.scale == 2.0
        torch.testing.assert_close(kept.box.weight, eager_kept.box.weight)
        torch.testing.assert_close(box.weight, torch.full((3,), float(i)))
    assert thunder.cache_misses(jitted) == 1


def scaled_copy_loss(box: Box, x: torch.Tensor) -> torch.Tensor:
    return (copy.copy(box).weight * box.scale * x).sum()


@pytest.mark.parametrize("config", PARAMS)
def test_gradients_flow_through_a_shallow_copy_to_the_original_parameter(config):
    """A weight that requires grad, read through ``copy.copy`` of its holder: the loss and the weight's gradient as
    eager's, on the first call and a cache hit."""
    jitted = thunder_ext.jit(scaled_copy_loss, **CONFIGS[config])
    for i in range(CALLS):
        weight = torch.randn(3, generator=torch.Generator().manual_seed(i)).requires_grad_()
        eager_weight, x = weight.detach().clone().requires_grad_(), torch.arange(3.0) + i
        got, expected = jitted(Box(weight), x), scaled_copy_loss(Box(eager_weight), x)
        got.backward()
        expected.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(weight.grad, eager_weight.grad)
    assert thunder.cache_misses(jitted) == 1


def test_a_deep_copy_reaching_a_tensor_is_refused_naming_it():
    """``copy.deepcopy`` of a tensor cannot be made as eager makes it inside the trace (its ``requires_grad``, a
    leaf's ``.grad``): a typed error that says what to do."""
    def scaled(box, x):
        return copy.deepcopy(box).weight * x

    with pytest.raises(TensorDeepcopyError, match=r"copy\.deepcopy reaches the tensor .*outside the jitted"):
        thunder_ext.jit(scaled, executors=["torch"])(Box(torch.ones(3)), torch.ones(3))


class SlottedBox:
    __slots__ = ("weight",)

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight


def test_a_copy_reduced_natively_is_refused_naming_the_attribute():
    """An instance with ``__slots__`` is reduced by CPython's own code (``copyreg``'s slot names, then a state pair),
    not answered by the interpreter: a tensor read from its copy has no path back, :class:`OpaqueReadError` names
    the attribute and the call. (A reduction written in Python, ``__reduce_ex__``/``__getstate__``, is traced.)"""
    def scaled(box, x):
        return copy.copy(box).weight * x

    with pytest.raises(OpaqueReadError, match=r"__reduce_ex__\(\).*outside the jitted"):
        thunder_ext.jit(scaled, executors=["torch"])(SlottedBox(torch.ones(3)), torch.ones(3))


class WithLoss(nn.Module):
    """Builds its loss module (with a ``weight`` buffer of ``None``) and an ``nn.Identity`` in ``forward``, as
    BERT and T5 build ``CrossEntropyLoss()`` when given ``labels=``."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        hidden = nn.Identity()(self.linear(x)) * self.scale
        return nn.CrossEntropyLoss(label_smoothing=0.1)(hidden, labels)


@pytest.mark.parametrize("config", PARAMS)
def test_a_module_built_in_forward_runs_with_eager_gradients(config):
    options = CONFIGS[config]
    """Stock Thunder fails (``get_parameter_or_buffer_or_submodule_name_and_root``: the new module's buffer
    write looked up in the root module); here it is the program's temporary."""
    torch.manual_seed(0)
    eager = WithLoss()
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, **options)
    for i in range(3):
        x, labels = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, i % 3])
        loss, expected = jitted(x, labels), eager(x, labels)
        loss.backward()
        expected.backward()
        torch.testing.assert_close(loss, expected)
        for got, want in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(got.grad, want.grad)
    assert thunder.cache_misses(jitted) == 1


def test_stock_thunder_fails_on_a_module_built_in_forward():
    with pytest.raises(AssertionError):
        thunder.jit(WithLoss(), executors=["torch"])(torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0]))


VOCAB = 64


def _transformers():
    """``transformers`` (the ``models`` extra), or the test is skipped; only its tests need it."""
    return pytest.importorskip("transformers")


def _tiny(name: str) -> nn.Module:
    """Random tiny configurations built locally (nothing downloaded)."""
    transformers = _transformers()
    torch.manual_seed(0)
    if name == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4,
                                                                    n_positions=64)).eval()
    config = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
    if name == "mistral":
        return transformers.MistralForCausalLM(transformers.MistralConfig(**config)).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()


def _decode(forward, tokens: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding with an empty ``DynamicCache`` passed in: its layers are appended inside the first call."""
    cache = _transformers().DynamicCache()
    ids = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(3))
    chosen = []
    with torch.no_grad():
        for _ in range(tokens):
            ids = forward(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1].argmax(-1, keepdim=True)
            chosen.append(ids)
    return torch.cat(chosen, 1), [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "gpt2", "mistral"])
def test_dynamic_cache_decoding_matches_eager_in_two_compilations(name):
    """Eager's tokens and cache contents over 12 tokens, decoding from an empty cache the first call fills. Two
    compilations: the prompt, then every one-token step — the cache's tensors grow by one position per token, and the
    second compilation, which writes them back longer than it read them, makes that size dynamic
    (``thunder_ext.dynamic_shapes``)."""
    tokens = 12
    model = _tiny(name)
    expected = _decode(model, tokens)
    jitted = thunder_ext.jit(copy.deepcopy(model), executors=["torch"])
    torch.testing.assert_close(_decode(jitted, tokens), expected)
    assert thunder.cache_misses(jitted) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert", "t5"])
def test_labels_loss_built_in_forward_matches_eager(name):
    """BERT and T5 build ``CrossEntropyLoss()`` inside ``forward`` when given ``labels=``: loss and gradients as
    eager's, over two calls. T5's forward also deep-copies its config (``get_text_config(decoder=True)``) and reads
    it through ``PretrainedConfig.__getattribute__``'s aliases (``num_hidden_layers``)."""
    transformers = _transformers()
    torch.manual_seed(0)
    if name == "bert":
        eager = transformers.BertForMaskedLM(transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32))
    else:
        eager = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=2, decoder_start_token_id=0))
    eager.eval()
    model = copy.deepcopy(eager)
    jitted = thunder_ext.jit(model, executors=["torch"])
    for i in range(2):
        ids = torch.randint(1, VOCAB, (2, 6), generator=torch.Generator().manual_seed(i))
        got, expected = jitted(input_ids=ids, labels=ids).loss, eager(input_ids=ids, labels=ids).loss
        got.backward()
        expected.backward()
        torch.testing.assert_close(got, expected)
        for a, b in zip(model.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4)
    assert thunder.cache_misses(jitted) == 1


def test_a_defaultdict_made_in_the_call_keeps_its_default_factory():
    """``GradScaler.update`` replaces its per-optimizer states with a new ``defaultdict``: the rebuilt one must
    still create missing entries."""
    from collections import defaultdict

    class Holder:
        states: defaultdict

    def reset(holder, x):
        holder.states = defaultdict(list)
        holder.states["seen"].append(1)
        return x + 1

    holder = Holder()
    thunder_ext.jit(reset, executors=["torch"])(holder, torch.ones(2))
    assert type(holder.states) is defaultdict and holder.states.default_factory is list
    assert holder.states["new"] == [] and holder.states["seen"] == [1]
