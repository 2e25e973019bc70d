#pragma once
// Hands the free pages of the C library's heap back to the kernel. Partitioned construction and
// the move of stage-3 shards to NVMe free gigabytes of host tensors below glibc's mmap threshold
// (up to 32 MiB), which stay in its heap, resident, between the blocks still in use (glibc trims
// only the heap's top): a 2.4B-parameter GPT built on 2 ranks held 5.2 GiB resident per rank for
// 2.4 GB of shards. glibc's malloc_trim releases every free page inside the heap too.

namespace zt {

// malloc_trim(0) with glibc; nothing elsewhere.
void trim_heap();

}  // namespace zt
