"""Reads a TensorBoard event file the way TensorBoard does and prints its scalars.

Usage: read_events.py EVENT_FILE. Checks every record's two masked CRC32C values with
TensorBoard's own implementation, loads the file with TensorBoard's EventAccumulator, and prints
"file_version <v>" then one "<tag> <step> <value!r>" line per scalar, sorted by tag and step.
Exit 2 when tensorboard is not installed (the test then skips).
"""
import struct
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
except ImportError as e:
    print(f"no tensorboard: {e}", file=sys.stderr)
    sys.exit(2)


def check_records(path):
    data = open(path, "rb").read()
    pos, count = 0, 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert hcrc == masked_crc32c(header), f"record {count}: bad length CRC"
        body = data[pos + 12:pos + 12 + length]
        (bcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert bcrc == masked_crc32c(body), f"record {count}: bad data CRC"
        pos += 16 + length
        count += 1
    assert pos == len(data), "trailing bytes"
    return count


def main():
    path = sys.argv[1]
    records = check_records(path)
    acc = EventAccumulator(path, size_guidance={"scalars": 0})
    acc.Reload()
    print(f"records {records}")
    print(f"file_version {acc.file_version}")
    for tag in sorted(acc.Tags()["scalars"]):
        for ev in acc.Scalars(tag):
            print(f"{tag} {ev.step} {ev.value!r}")


if __name__ == "__main__":
    main()
