// What the two files of kernelfusion._kf share: module.cpp (contexts, tensors, the registry) and
// fast_call.cpp (the per-call path of kernelfusion.ops).
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include "kf/kf.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace kf::py {

// kf::Attrs from a dict of keyword arguments (None: the defaults); an unknown name raises TypeError.
Attrs attrs_from(const std::string& op, nb::handle kw);
// kf's dtype of a DLPack dtype; none for the dtypes kf lacks.
std::optional<DType> from_dlpack(nb::dlpack::dtype t);
// Defines fast_call and its set-up functions (fast_call.cpp).
void bind_fast_call(nb::module_& m);

}  // namespace kf::py
