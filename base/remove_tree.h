#pragma once
// zt::remove_tree: deletes a file or a directory with everything below it, through the C
// library's nftw/unlink/rmdir, never std::filesystem::remove_all.
//
// Why not std::filesystem: on a GPU machine whose toolchain is GCC 13.3 (/opt/gcc) with
// LibTorch 2.11+cu130, std::filesystem::remove_all(path, error_code&) called through a null
// function pointer and killed the process (SIGSEGV at address 0, inside remove_all) when the
// engine removed its NVMe parameter swap directory at teardown. The C library's calls resolve
// the same way on every machine.
//
// Symbolic links are removed, never followed. A path that does not exist is not an error.
// Returns "" on success, else one line naming the first entry that could not be removed and the
// system's reason; what could be removed is removed either way.

#include <string>

namespace zt {

std::string remove_tree(const std::string& path);

}  // namespace zt
