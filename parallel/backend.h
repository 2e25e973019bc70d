#pragma once
// The communication backends parallel/dist.h creates, named once: the config's
// communication.backend and the programs' --backend flags read these names into the enum, which
// reaches create_communicator as it is. No LibTorch here, so the config (core/config/config.h)
// can hold one.

#include <string>

namespace zt::dist {

enum class Backend { kAuto, kMpi, kGloo, kNccl };

// "auto", "mpi", "gloo" or "nccl".
const char* backend_name(Backend backend);

// The backend a name names; anything else is an error naming it and the choices.
Backend parse_backend(const std::string& name);

}  // namespace zt::dist
