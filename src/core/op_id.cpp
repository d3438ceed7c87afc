#include "core/op_id.hpp"

#include <cstring>

namespace kf {

namespace {
constexpr const char* kNames[] = {
#define KF_OP_NAME(name) #name,
    KF_OPS(KF_OP_NAME)
#undef KF_OP_NAME
};
static_assert(sizeof(kNames) / sizeof(kNames[0]) == kOpCount);
}  // namespace

const char* op_name(OpId id) { return kNames[static_cast<int>(id)]; }

bool op_id_of(const char* name, OpId* id) {
  for (int k = 0; k < kOpCount; ++k)
    if (std::strcmp(kNames[k], name) == 0) {
      *id = static_cast<OpId>(k);
      return true;
    }
  return false;
}

}  // namespace kf
