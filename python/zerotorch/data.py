"""The data path of the C++ programs, for Python scripts.

``TokenShardDataset`` reads a token shard (``zt-pretokenize`` output, memory-mapped);
``LengthBucketedSampler`` is the distributed smart-batching sampler of ``data/batch_sampler.h``
(Hugging Face's length-grouped sampler extended to ranks: every rank of a step gets a batch of
similar length, batches sized by sample count or by a padded-token budget); ``Collator`` pads a
batch to its own longest sample (dynamic padding). Together::

    ds = TokenShardDataset("train.ztt")
    sampler = LengthBucketedSampler(ds, batch_size=16, seed=1234)  # rank/world from the env
    loader = torch.utils.data.DataLoader(ds, batch_sampler=sampler,
                                         collate_fn=Collator(pad_id=ds.pad_id))
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for batch in loader: ...   # input_ids, attention_mask, labels: (B, T) int64

The batches are exactly those the C++ loader forms from the same options.
"""

import os

import torch

from . import _C


class TokenShardDataset(torch.utils.data.Dataset):
    """Samples of a token shard: ``ds[i]`` is ``{"input_ids": (length,) int64}``, plus
    ``"sample_labels"`` ((fields,) int64) when the shard carries labels."""

    def __init__(self, path, verify_checksum=True):
        self._path = os.fspath(path)
        self._verify = verify_checksum
        self._shard = _C.TokenShard(self._path, verify_checksum)

    def __len__(self):
        return len(self._shard)

    def __getitem__(self, index):
        if not -len(self) <= index < len(self):
            raise IndexError(f"{self._path}: sample {index} of {len(self)}")
        index %= len(self)
        item = {"input_ids": self._shard.tokens(index)}
        if self._shard.label_fields:
            item["sample_labels"] = torch.tensor(self._shard.labels(index), dtype=torch.int64)
        return item

    def lengths(self):
        """Tokens of every sample, in order (what the sampler buckets by)."""
        return self._shard.lengths()

    @property
    def path(self):
        return self._path

    @property
    def pad_id(self):
        return self._shard.pad_id

    @property
    def vocab_size(self):
        return self._shard.vocab_size

    @property
    def label_fields(self):
        return list(self._shard.label_fields)

    def meta(self, key):
        return self._shard.meta_value(key)

    # DataLoader workers get a copy: the shard is mapped again there (checked once already).
    def __getstate__(self):
        return {"path": self._path}

    def __setstate__(self, state):
        self._path = state["path"]
        self._verify = False
        self._shard = _C.TokenShard(self._path, False)


def _distributed_default(name, env, fallback):
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank() if name == "rank" else torch.distributed.get_world_size()
    return int(os.environ.get(env, fallback))


class LengthBucketedSampler(torch.utils.data.Sampler):
    """Yields this rank's batches (lists of sample indices) of the current epoch.

    Exactly one of ``batch_size`` (samples per batch per rank) and ``max_tokens`` (a padded-token
    budget per batch, B * T, with at most ``max_batch_size`` samples) sizes the batches.
    ``rank`` and ``world_size`` default to torch.distributed's, else the RANK and WORLD_SIZE
    environment (ztrun, torchrun), else a single process. The last step is completed by repeating
    samples unless ``drop_last``. ``max_length`` and ``pad_to_multiple`` must be the collator's,
    so token budgets count what the model computes on. Call ``set_epoch`` before each epoch, as
    with ``DistributedSampler``; iterating again without it repeats the epoch's order.
    ``state_dict()`` / ``load_state_dict()`` resume mid-epoch on the next batch.
    """

    def __init__(self, dataset_or_lengths, batch_size=0, max_tokens=0, max_batch_size=0,
                 mega_batch_mult=50, seed=0, drop_last=False, rank=None, world_size=None,
                 max_length=0, pad_to_multiple=1, longest_first=True):
        if hasattr(dataset_or_lengths, "lengths"):
            lengths = list(dataset_or_lengths.lengths())
        else:
            lengths = [int(n) for n in dataset_or_lengths]
        if (batch_size > 0) == (max_tokens > 0):
            raise ValueError("LengthBucketedSampler: give exactly one of batch_size and max_tokens")
        if rank is None:
            rank = _distributed_default("rank", "RANK", 0)
        if world_size is None:
            world_size = _distributed_default("world_size", "WORLD_SIZE", 1)
        self._sampler = _C.LengthBucketedSampler(
            lengths, batch_size, max_tokens, max_batch_size, mega_batch_mult, seed, drop_last,
            rank, world_size, max_length, pad_to_multiple, longest_first)
        self._sampler.set_epoch(0)

    def set_epoch(self, epoch):
        self._sampler.set_epoch(epoch)

    @property
    def epoch(self):
        return self._sampler.epoch

    def __len__(self):
        return len(self._sampler)

    def __iter__(self):
        if not self._sampler.has_next():
            self._sampler.set_epoch(self._sampler.epoch)
        while self._sampler.has_next():
            yield list(self._sampler.next())

    def padded_length(self, batch):
        """T the collator pads ``batch`` to."""
        return self._sampler.padded_length(list(batch))

    def state_dict(self):
        return {"sampler_state": self._sampler.state()}

    def load_state_dict(self, state):
        self._sampler.load_state(state["sampler_state"])


class Collator:
    """Pads a list of samples (``TokenShardDataset`` items, or dicts with ``"input_ids"``) to
    their longest (rounded up to ``pad_to_multiple``, cut at ``max_length``) and returns
    ``input_ids``, ``attention_mask``, ``labels`` ((B, T) int64; padding labelled
    ``ignore_index``; with ``causal_lm_shift`` the labels are the next tokens) and, when the samples
    carry them, ``sample_labels``."""

    def __init__(self, pad_id=0, pad_to_multiple=1, max_length=0, causal_lm_shift=False,
                 ignore_index=-100):
        self._args = (pad_id, pad_to_multiple, max_length, causal_lm_shift, ignore_index)
        self._collator = _C.Collator(*self._args)

    def __call__(self, samples):
        tokens = [_as_list(s["input_ids"]) for s in samples]
        labels = [_as_list(s["sample_labels"]) for s in samples if "sample_labels" in s]
        if labels and len(labels) != len(samples):
            raise ValueError("Collator: some samples carry sample_labels and some do not")
        return self._collator.collate(tokens, labels, [])

    def __getstate__(self):
        return {"args": self._args}

    def __setstate__(self, state):
        self._args = state["args"]
        self._collator = _C.Collator(*self._args)


def _as_list(x):
    return x.tolist() if isinstance(x, torch.Tensor) else list(x)


def write_token_shard(path, samples, vocab_size, label_fields=(), labels=(), meta=None):
    """Writes ``samples`` (lists of token ids < vocab_size) as a token shard; ``labels[i]`` holds
    sample i's value of each of ``label_fields``; ``meta`` (str -> str) goes into the shard's
    metadata, e.g. ``{"pad_id": "0"}``, which ``TokenShardDataset.pad_id`` reads."""
    _C.write_token_shard(os.fspath(path), [list(map(int, s)) for s in samples], vocab_size,
                         list(label_fields), [list(map(int, v)) for v in labels],
                         {str(k): str(v) for k, v in (meta or {}).items()})
