# A SPIR-V module as C initializers of its 32-bit words (what glslc -mfmt=num writes), for the modules the
# KHR toolchain builds (cmake/Shaders.cmake). Usage: cmake -DIN=x.spv -DOUT=x.inc -P SpvToInc.cmake
# SPIR-V files are little-endian words here: the tools wrote them on this (x86-64 or arm64) host.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])" "0x\\4\\3\\2\\1,"
       words "${hex}")
file(WRITE ${OUT} "${words}\n")
