// zerotorch._C: the C++ side of the Python package (python/zerotorch/ is the Python side).
#include <torch/python.h>

#include "python/csrc/bindings.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "zerotorch's C++ engine, data path and launcher helpers";
  zt::python::bind_data(m);
  zt::python::bind_model_parallel(m);
  zt::python::bind_engine(m);
  zt::python::bind_launch(m);
}
