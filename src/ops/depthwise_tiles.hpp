// The depthwise tile plan lives with the other plans shared by backends (src/plan/depthwise.hpp).
#pragma once
#include "plan/depthwise.hpp"
