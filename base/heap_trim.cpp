#include "base/heap_trim.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zt {

void trim_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace zt
