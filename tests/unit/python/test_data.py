"""zerotorch.data from Python: the token shard reads back what was written, the length-bucketed
sampler gives every rank the same number of batches, covers the epoch, buckets by length, is
deterministic per (seed, epoch) and resumes mid-epoch, token budgets hold, and a DataLoader with
worker processes yields padded batches."""

import random

import pytest
import torch

from zerotorch import data as ztd


def make_shard(tmp_path, samples, labels=None, vocab_size=1000):
    path = tmp_path / "samples.ztt"
    ztd.write_token_shard(path, samples, vocab_size,
                          label_fields=["label"] if labels is not None else (),
                          labels=[[v] for v in labels] if labels is not None else (),
                          meta={"pad_id": "0"})
    return ztd.TokenShardDataset(path)


def random_samples(n, seed=0, longest=60):
    rng = random.Random(seed)
    return [[rng.randrange(1, 1000) for _ in range(rng.randrange(2, longest))] for _ in range(n)]


def test_shard_reads_back_what_was_written(tmp_path):
    samples = [[5, 6, 7], [8], list(range(1, 40))]
    ds = make_shard(tmp_path, samples, labels=[3, 1, 2])
    assert len(ds) == 3
    assert ds.lengths() == [3, 1, 39]
    for i, s in enumerate(samples):
        assert ds[i]["input_ids"].dtype == torch.int64
        assert ds[i]["input_ids"].tolist() == s
    assert ds[-1]["input_ids"].tolist() == samples[-1]
    assert [ds[i]["sample_labels"].tolist() for i in range(3)] == [[3], [1], [2]]
    assert ds.label_fields == ["label"]
    assert ds.pad_id == 0
    with pytest.raises(IndexError):
        ds[3]


def test_a_bad_shard_is_one_error_naming_it(tmp_path):
    bad = tmp_path / "bad.ztt"
    bad.write_bytes(b"not a shard")
    with pytest.raises(RuntimeError, match=str(bad)):
        ztd.TokenShardDataset(bad)


def samplers(ds, world, **kw):
    return [ztd.LengthBucketedSampler(ds, rank=r, world_size=world, **kw) for r in range(world)]


def test_every_rank_gets_the_same_number_of_batches_and_the_epoch_is_covered(tmp_path):
    ds = make_shard(tmp_path, random_samples(101))
    for drop_last in (False, True):
        ranks = samplers(ds, 3, batch_size=4, seed=7, drop_last=drop_last)
        batches = [list(s) for s in ranks]
        assert len({len(b) for b in batches}) == 1
        assert all(len(b) == 4 for r in batches for b in r)
        seen = [i for r in batches for b in r for i in b]
        if drop_last:
            assert len(seen) == len(set(seen)) and len(seen) == 96  # 8 steps of 3 x 4
        else:
            assert set(seen) == set(range(101))  # the last step completed by repeats


def test_batches_are_bucketed_by_length(tmp_path):
    samples = random_samples(400, seed=1)
    ds = make_shard(tmp_path, samples)
    (sampler,) = samplers(ds, 1, batch_size=8, seed=3)
    lengths = ds.lengths()
    padded = sum(len(b) * max(lengths[i] for i in b) for b in sampler)
    rng = random.Random(3)
    order = list(range(400))
    rng.shuffle(order)
    shuffled = sum(8 * max(lengths[i] for i in order[k:k + 8]) for k in range(0, 400, 8))
    assert padded < 0.8 * shuffled, (padded, shuffled)


def test_order_is_set_by_seed_and_epoch(tmp_path):
    ds = make_shard(tmp_path, random_samples(64, seed=2))
    a, b = (ztd.LengthBucketedSampler(ds, batch_size=4, seed=11) for _ in range(2))
    assert list(a) == list(b)
    assert list(a) == list(a)  # iterating again repeats the epoch
    first = list(a)
    a.set_epoch(1)
    assert list(a) != first
    c = ztd.LengthBucketedSampler(ds, batch_size=4, seed=12)
    assert list(c) != first


def test_state_dict_resumes_on_the_next_batch(tmp_path):
    ds = make_shard(tmp_path, random_samples(80, seed=4))
    a = ztd.LengthBucketedSampler(ds, batch_size=4, seed=5)
    a.set_epoch(2)
    it = iter(a)
    head = [next(it) for _ in range(7)]
    state = a.state_dict()
    rest = list(it)
    b = ztd.LengthBucketedSampler(ds, batch_size=4, seed=5)
    b.load_state_dict(state)
    assert list(b) == rest
    assert head + rest == list(a)
    other = ztd.LengthBucketedSampler(ds, batch_size=8, seed=5)
    with pytest.raises(RuntimeError):
        other.load_state_dict(state)


def test_token_budget_bounds_every_padded_batch(tmp_path):
    ds = make_shard(tmp_path, random_samples(200, seed=6))
    (sampler,) = samplers(ds, 1, max_tokens=256, pad_to_multiple=8, seed=1)
    collate = ztd.Collator(pad_id=0, pad_to_multiple=8)
    total = 0
    for batch in sampler:
        padded = collate([ds[i] for i in batch])["input_ids"]
        assert padded.numel() <= 256
        assert padded.shape[1] == sampler.padded_length(batch)
        total += len(batch)
    assert total >= 200
    with pytest.raises(ValueError):
        ztd.LengthBucketedSampler(ds, batch_size=4, max_tokens=256)


def test_dataloader_with_workers_yields_padded_batches(tmp_path):
    samples = random_samples(50, seed=8)
    ds = make_shard(tmp_path, samples)
    sampler = ztd.LengthBucketedSampler(ds, batch_size=5, seed=9)
    expected = list(sampler)
    loader = torch.utils.data.DataLoader(
        ds, batch_sampler=sampler, num_workers=2,
        collate_fn=ztd.Collator(pad_id=0, causal_lm_shift=True))
    got = list(loader)
    assert len(got) == len(expected)
    for batch, indices in zip(got, expected):
        ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        assert ids.shape == mask.shape == labels.shape
        for row, i in enumerate(indices):
            n = len(samples[i]) - 1  # the shift: inputs are all tokens but the last
            assert mask[row].sum().item() == n
            assert ids[row, :n].tolist() == samples[i][:-1]
            assert labels[row, :n].tolist() == samples[i][1:]
            assert (labels[row, n:] == -100).all()
