#version 450
// A kernel that runs long and then ends by itself (tests/test_faults.cpp: a wait that the context's
// time-out cuts short, and a context that still closes cleanly). Each invocation takes `steps` dependent
// steps of a hash (at most 65,535: lavapipe ends any loop after that many iterations) and the dispatch
// has as many workgroups as the length asks for. The hash is stored where it could be read, so that the
// compiler cannot drop the loop.
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer Out { uint o[]; } out_;
layout(push_constant) uniform PC { uint steps; } pc;

void main() {
  uint h = gl_WorkGroupID.x + 65536u * gl_WorkGroupID.y;
  for (uint i = 0u; i < pc.steps; ++i) {
    h ^= h >> 15;
    h = h * 0x2c1b3c6du + i;
  }
  if (h == 0x9e3779b9u) out_.o[0] = h;
}
