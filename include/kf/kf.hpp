// KernelFusion: fused neural-network kernels on any GPU. Include this one header.
#pragma once
#include "kf/attention.hpp"
#include "kf/context.hpp"
#include "kf/conv.hpp"
#include "kf/device.hpp"
#include "kf/dtype.hpp"
#include "kf/error.hpp"
#include "kf/graph.hpp"
#include "kf/interop.hpp"
#include "kf/linalg.hpp"
#include "kf/ops.hpp"
#include "kf/tensor.hpp"
#include "kf/training.hpp"
