#!/usr/bin/env python3
"""Prints the rows of tests/unit/core/config/elasticity_test.cpp's kDeepSpeedTable and
kDeepSpeedRuntime by running DeepSpeed's own compute_elastic_config on each input below.

    python3 generate_table.py DIR

DIR holds DeepSpeed's deepspeed/elasticity/{elasticity,config,constants}.py (DeepSpeed 0.19
removed the module; take them from an older release or checkout). Nothing of DeepSpeed is kept
here: the three files are copied into a scratch package whose other imports (the logger, the
version) are stubbed. Needs numpy and packaging.

kDeepSpeedTable: each input is called the way DeepSpeed's runtime calls it,
compute_elastic_config(config, world_size=W), or without world_size where W is 0 (then no micro
batch is returned); a row records the result, or the class of the exception raised.
kDeepSpeedRuntime: the batch triple DeepSpeed's runtime (DeepSpeedConfig) sets from that call,
gradient_accumulation_steps = train_batch_size // (micro * W), for configs at W = 1, 2, 4.
"""
import json
import math
import os
import shutil
import sys
import tempfile

DEFAULTS = {  # DeepSpeed's defaults (constants.py), for the C++ rows
    "enabled": False, "max_train_batch_size": None, "micro_batch_sizes": [], "min_gpus": 1,
    "max_gpus": 10000, "min_time": 0, "version": 0.2, "prefer_larger_batch": True,
    "num_gpus_per_node": 1, "model_parallel_size": 1,
}

DS_TEST = {"enabled": True, "max_train_batch_size": 10000, "micro_batch_sizes": [8, 12, 16, 17],
           "min_gpus": 32, "max_gpus": 1500, "min_time": 20, "version": 0.1}


def on(**kw):
    block = {"enabled": True}
    block.update(kw)
    return block


def ds_test(**kw):
    block = dict(DS_TEST)
    block.update(kw)
    return block


# (name, elasticity block, world size)
CASES = [
    ("V01DeepSpeedTestNoWorld", ds_test(), 0),
    ("V01DeepSpeedTestWorld64", ds_test(), 64),
    ("V01DeepSpeedTestWorld128Invalid", ds_test(), 128),
    ("V01ProperMicroBatch", ds_test(max_train_batch_size=32, micro_batch_sizes=[1, 2, 3, 7],
                                    min_gpus=1), 4),
    ("V01ProperMicroBatchWorld7Invalid", ds_test(max_train_batch_size=32,
                                                 micro_batch_sizes=[1, 2, 3, 7], min_gpus=1), 7),
    ("V01LcmAboveMaxSkipped", on(max_train_batch_size=100, micro_batch_sizes=[8, 10, 12],
                                 version=0.1), 0),
    ("V01LcmAboveMaxWorld2", on(max_train_batch_size=100, micro_batch_sizes=[8, 10, 12],
                                version=0.1), 2),
    ("V01PreferSmaller", on(max_train_batch_size=100, micro_batch_sizes=[8, 10, 12], version=0.1,
                            prefer_larger_batch=False), 2),
    ("V01TieGoesToLarger", on(max_train_batch_size=10, micro_batch_sizes=[2, 3], version=0.1),
     2),
    ("V01TieGoesToSmaller", on(max_train_batch_size=10, micro_batch_sizes=[2, 3], version=0.1,
                               prefer_larger_batch=False), 2),
    ("V01DefaultsPreferLarger", on(max_train_batch_size=2000, micro_batch_sizes=[2, 4, 6],
                                   version=0.1), 8),
    ("V01DefaultsPreferSmaller", on(max_train_batch_size=2000, micro_batch_sizes=[2, 4, 6],
                                    version=0.1, prefer_larger_batch=False), 8),
    ("V01MinMaxGpus", on(max_train_batch_size=1000, micro_batch_sizes=[2, 4], min_gpus=4,
                         max_gpus=16, version=0.1), 8),
    ("V01BelowMinGpusInvalid", on(max_train_batch_size=1000, micro_batch_sizes=[2, 4], min_gpus=4,
                                  max_gpus=16, version=0.1), 2),
    ("V01BaseEqualsMax", on(max_train_batch_size=12, micro_batch_sizes=[12], version=0.1), 1),
    ("V01PastLastHcn", on(max_train_batch_size=1441440, micro_batch_sizes=[1], max_gpus=24,
                          version=0.1), 0),
    ("V01NoValidCountPreferSmaller", on(max_train_batch_size=3, micro_batch_sizes=[3], min_gpus=2,
                                        max_gpus=2, version=0.1, prefer_larger_batch=False), 2),
    ("V02OneGpuPerNode", on(max_train_batch_size=2000, micro_batch_sizes=[2, 4, 6], version=0.2),
     8),
    ("V02DefaultVersion", on(max_train_batch_size=2000, micro_batch_sizes=[2, 4, 6]), 4),
    ("V02EightPerNode", on(max_train_batch_size=1024, micro_batch_sizes=[4, 8], min_gpus=8,
                           max_gpus=64, num_gpus_per_node=8, version=0.2), 16),
    ("V02EightPerNodeOffGrid", on(max_train_batch_size=1024, micro_batch_sizes=[4, 8], min_gpus=8,
                                  max_gpus=64, num_gpus_per_node=8, version=0.2), 12),
    ("V02FourPerNodeThreeNodes", on(max_train_batch_size=1000, micro_batch_sizes=[2, 5],
                                    min_gpus=4, max_gpus=64, num_gpus_per_node=4, version=0.2),
     12),
    ("V02ModelParallel2World8", on(max_train_batch_size=1024, micro_batch_sizes=[4, 8], min_gpus=8,
                                   max_gpus=64, num_gpus_per_node=8, model_parallel_size=2,
                                   version=0.2), 8),
    ("V02ModelParallel2World16", on(max_train_batch_size=1024, micro_batch_sizes=[4, 8],
                                    min_gpus=8, max_gpus=64, num_gpus_per_node=8,
                                    model_parallel_size=2, version=0.2), 16),
    ("V02ModelParallel2TwoPerNode", on(max_train_batch_size=512, micro_batch_sizes=[2, 4],
                                       num_gpus_per_node=2, model_parallel_size=2, version=0.2),
     4),
    ("V02FallbackPreferLarger", on(max_train_batch_size=100, micro_batch_sizes=[3, 5],
                                   min_gpus=1, max_gpus=4, version=0.2), 7),
    ("V02FallbackPreferSmaller", on(max_train_batch_size=100, micro_batch_sizes=[3, 5],
                                    min_gpus=1, max_gpus=4, version=0.2,
                                    prefer_larger_batch=False), 7),
    ("V02FallbackBatchZero", on(max_train_batch_size=10, micro_batch_sizes=[4], version=0.2), 3),
    ("V02NoWorldSize", on(max_train_batch_size=2000, micro_batch_sizes=[2, 4, 6], version=0.2), 0),
    ("V02NodesNotDivisibleByModelParallel", on(max_train_batch_size=1024,
                                               micro_batch_sizes=[4, 8], num_gpus_per_node=8,
                                               model_parallel_size=3, version=0.2), 16),
    ("ErrorMicroAboveMax", on(max_train_batch_size=4, micro_batch_sizes=[2, 8], version=0.1), 0),
    ("ErrorMicroAboveMaxPerNode", on(max_train_batch_size=16, micro_batch_sizes=[4, 8],
                                     num_gpus_per_node=4, version=0.2), 8),
    ("ErrorVersionTooNew", on(max_train_batch_size=2000, micro_batch_sizes=[2], version=0.3), 0),
    ("ErrorVersionUnknown", on(max_train_batch_size=2000, micro_batch_sizes=[2], version=0.15),
     0),
    ("ErrorModelParallelV01", on(max_train_batch_size=2000, micro_batch_sizes=[2],
                                 model_parallel_size=2, num_gpus_per_node=8, version=0.1), 0),
    ("ErrorDisabled", dict(ds_test(), enabled=False), 64),
    ("ErrorMissingMax", on(micro_batch_sizes=[2, 4]), 0),
    ("ErrorMissingMicro", on(max_train_batch_size=100), 0),
    ("ErrorMicroNotPositive", on(max_train_batch_size=100, micro_batch_sizes=[2, 0, 4]), 0),
    ("ErrorMinAboveMax", on(max_train_batch_size=100, micro_batch_sizes=[2], min_gpus=8,
                            max_gpus=4), 0),
    ("ErrorMaxGpusZero", on(max_train_batch_size=100, micro_batch_sizes=[2], max_gpus=0), 0),
    ("ErrorNegativeMinTime", on(max_train_batch_size=100, micro_batch_sizes=[2], min_time=-1), 0),
    ("ErrorGpusPerNodeZero", on(max_train_batch_size=100, micro_batch_sizes=[2],
                                num_gpus_per_node=0), 0),
]


# Config-path cases: (name, elasticity block); each at world sizes 1, 2 and 4.
RUNTIME = [
    ("V01", on(max_train_batch_size=100, micro_batch_sizes=[2, 4, 6], version=0.1)),
    ("V02Default", on(max_train_batch_size=2000, micro_batch_sizes=[2, 4, 6])),
    ("V02TwoPerNode", on(max_train_batch_size=512, micro_batch_sizes=[8], num_gpus_per_node=2,
                         min_gpus=2, max_gpus=8)),
]


def load_deepspeed_elasticity(src):
    root = tempfile.mkdtemp(prefix="ds-elastic-")
    pkg = os.path.join(root, "deepspeed")
    os.makedirs(os.path.join(pkg, "elasticity"))
    with open(os.path.join(pkg, "__init__.py"), "w"):
        pass
    with open(os.path.join(pkg, "git_version_info.py"), "w") as f:
        f.write("version = '0.18.9'\n")
    with open(os.path.join(pkg, "utils.py"), "w") as f:
        f.write("import logging\nlogger = logging.getLogger('stub')\n")
    with open(os.path.join(pkg, "elasticity", "__init__.py"), "w"):
        pass
    for name in ("elasticity.py", "config.py", "constants.py"):
        shutil.copy(os.path.join(src, name), os.path.join(pkg, "elasticity", name))
    sys.path.insert(0, root)
    import deepspeed.elasticity.elasticity as el  # noqa: E402
    return el


def cpp_list(values):
    return "{" + ", ".join(str(v) for v in values) + "}"


def cpp_number(v):
    return repr(float(v)) if isinstance(v, float) else str(v)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    el = load_deepspeed_elasticity(sys.argv[1])
    os.environ.pop("WORLD_SIZE", None)
    os.environ.pop("DEEPSPEED_ELASTICITY_CONFIG", None)
    for name, block, world in CASES:
        kwargs = {"world_size": world} if world > 0 else {}
        try:
            out = el.compute_elastic_config({"elasticity": dict(block)}, "0.18.9", **kwargs)
            error = ""
        except Exception as e:  # noqa: BLE001 - the table records what DeepSpeed raised
            out, error = None, type(e).__name__
        if out is not None and world > 0 and float(block.get("version", 0.2)) == 0.1:
            # return_microbatch=True adds nothing once a world size is given.
            again = el.compute_elastic_config({"elasticity": dict(block)}, "0.18.9",
                                              world_size=world, return_microbatch=True)
            assert again == out, (name, again, out)
        f = dict(DEFAULTS)
        f.update(block)
        given_max = "std::nullopt" if f["max_train_batch_size"] is None else str(
            f["max_train_batch_size"])
        inputs = (f"{'true' if f['enabled'] else 'false'}, {given_max}, "
                  f"{cpp_list(f['micro_batch_sizes'])}, {f['min_gpus']}, {f['max_gpus']}, "
                  f"{cpp_number(f['min_time'])}, {cpp_number(f['version'])}, "
                  f"{'true' if f['prefer_larger_batch'] else 'false'}, "
                  f"{f['num_gpus_per_node']}, {f['model_parallel_size']}")
        if error:
            print(f'    {{"{name}", {{{inputs}}}, {world}, "{error}", 0, {{}}, 0}},')
        else:
            final, valid = int(out[0]), list(out[1])
            micro = out[2] if len(out) > 2 else 0
            assert not (isinstance(final, float) and not math.isfinite(final))
            print(f'    {{"{name}", {{{inputs}}}, {world}, "", {final}, {cpp_list(valid)}, '
                  f'{micro}}},')
    print("    // kDeepSpeedRuntime")
    for name, block in RUNTIME:
        for world in (1, 2, 4):
            final, _, micro = el.compute_elastic_config({"elasticity": dict(block)}, "0.18.9",
                                                        world_size=world)
            gas = final // (micro * world)
            text = json.dumps(block).replace('"', '\\"')
            print(f'    {{"{name}", "{text}", {world}, {final}, {micro}, {gas}}},')


if __name__ == "__main__":
    main()
