// volk (Debian's libvulkan-volk-dev) compiled into the library: it opens the Vulkan loader at run
// time, so one binary runs on machines with and without Vulkan and reports "Vulkan unavailable".
#include <volk.c>  // NOLINT(bugprone-suspicious-include)
